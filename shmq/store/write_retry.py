"""WriteRetry: a file write that keeps failing for a reason outside the process.

A read-only or full file system fails every write of a metadata file (topics.json, committed
offsets) until an operator acts. The broker must not stop for it, nor try again on every pass
of its loop (every 20 ms when idle) and log each try: that buried the log under hundreds of
identical lines a second. So a failing write is tried again with a doubling delay (up to
``max_delay`` s), and logged once when it starts failing, once more only if it fails for
another reason, and once when it works again (a write already spaced by its own interval, as
the committed offsets are, skips ``due`` and uses only the logging). The clock is the
caller's (``now``, monotonic seconds), so the policy is tested without waiting.
"""

from __future__ import annotations

import logging
import re

FIRST_DELAY_S = 0.1  # s before the first retry
MAX_DELAY_S = 5.0  # s between retries at most: how long a freed disk may wait for the write
_DIGITS = re.compile(r"\d+")


class WriteRetry:
    """When ``what`` (``"writing topics.json"``) may be tried next, and its failure logged once."""

    def __init__(self, log: logging.Logger, what: str, max_delay: float = MAX_DELAY_S) -> None:
        self.log = log
        self.what = what
        self.max_delay = max_delay
        self.failures = 0  # since the last success
        self._delay = 0.0
        self._next = 0.0
        self._state = ""  # the reason last logged, numbers left out

    @property
    def failing(self) -> bool:
        return self.failures > 0

    def due(self, now: float) -> bool:
        """Whether to try now: always while the write works, else once its delay is over."""
        return now >= self._next

    def failed(self, error: object, now: float) -> None:
        """A try failed: the next waits twice as long as the last (up to ``max_delay``); logged if
        the write worked before or failed for another reason (messages differing only in
        numbers, such as sizes, are one reason)."""
        self.failures += 1
        self._delay = min(self.max_delay, self._delay * 2 if self._delay else FIRST_DELAY_S)
        self._next = now + self._delay
        state = _DIGITS.sub("#", str(error))
        if state != self._state:
            self._state = state
            self.log.error("%s failed: %s; the broker goes on, tries again and logs when it works", self.what, error)

    def succeeded(self) -> None:
        """A try worked: logged if it had been failing; the next failure is logged again."""
        if self.failures:
            self.log.warning("%s works again (after %d failed tries)", self.what, self.failures)
        self.failures = 0
        self._delay = self._next = 0.0
        self._state = ""
