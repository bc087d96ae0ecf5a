"""The requests a producer has written and not yet seen finished: what ``Producer.flush`` waits for.

A request is open from the moment it is made until its future is finished (answer, error,
timeout, broker gone) and that future's callbacks have run: those callbacks settle the
futures of the auto-batched messages it carries, so when a request leaves this table every
user-visible future of it is done. ``flush`` waits only for the requests open when it is
called: sends made meanwhile (by other threads) do not keep it waiting.

Cost per request: one dict insert and one delete; the Condition is taken only while someone
waits (the counter is read unlocked; the order of "remove, then read the counter" against
"count yourself, then look" means a waiter never misses its wake-up).
"""

from __future__ import annotations

import threading
import time
from typing import Any


class InFlight:
    def __init__(self) -> None:
        self._open: dict[int, Any] = {}  # id(request) -> request
        self._cond = threading.Condition()
        self._waiters = 0

    def __len__(self) -> int:
        return len(self._open)

    def add(self, request: Any) -> None:
        self._open[id(request)] = request

    def discard(self, request: Any) -> None:
        """``request`` is finished (its future done and its callbacks run)."""
        if self._open.pop(id(request), None) is not None and self._waiters:
            with self._cond:
                self._cond.notify_all()

    def wait(self, timeout: float | None) -> int:
        """Wait until every request open now is finished; the number still open at the timeout.
        A timeout of 0 (``Producer.flush(0)``) waits for nothing: every request open is still open."""
        if timeout is not None and timeout <= 0:
            return len(self._open)
        snapshot = list(self._open.copy().values())  # held: their ids cannot be reused meanwhile
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._waiters += 1
            try:
                for i, request in enumerate(snapshot):
                    while id(request) in self._open:
                        remaining = None if deadline is None else deadline - time.monotonic()
                        if remaining is not None and remaining <= 0:
                            return sum(id(r) in self._open for r in snapshot[i:])
                        self._cond.wait(remaining)
            finally:
                self._waiters -= 1
        return 0
