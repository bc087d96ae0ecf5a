"""Function filters: a plain Python predicate on the message, evaluated where the consumer runs.

``consumer.subscribe("Orders", lambda m: m.properties.get("region") == "eu")``. The broker is
told ``*`` (it evaluates nothing it cannot see), every message of the queue is decoded, and
the predicate decides which reach the listener (PushConsumer) or the PullResult
(PullConsumer.pull). Messages it rejects are skipped exactly as tag mismatches are: the
pull position and so the committed offset move past them, and they are never delivered
again to this group.

A predicate that raises counts as "no match": the message is skipped, the exception logged
(the first with its traceback, then a count at most every ``LOG_INTERVAL_S``) and counted in
``errors``. This is the rule of RocketMQ's SQL92 filter, where a property that cannot be
compared is no match, never an error; the other choice (a consume failure, so retries and
the DLQ) would put every message of the queue into redelivery for a bug in a filter, and
the filter runs in the puller thread, before any listener, where no ConsumeResult exists.
A listener that wants a failing check retried does it itself and returns RECONSUME_LATER.

The predicate runs in the puller thread (push) or the caller's (pull), once per message:
keep it cheap, as a tag or SQL filter, which skip mismatches without decoding them, are.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from shmq.model.message_ext import MessageExt

if TYPE_CHECKING:
    from shmq.model.pulled import PulledBatch

log = logging.getLogger(__name__)

TYPE_FUNCTION = "FUNCTION"
LOG_INTERVAL_S = 10.0

Predicate = Callable[[MessageExt], object]


class FunctionFilter:
    """``predicate(msg: MessageExt) -> bool`` as a subscription; the broker sees ``expression`` "*"."""

    type = TYPE_FUNCTION
    expression = "*"  # what the group's subscription shows: the broker filters nothing for it

    def __init__(self, predicate: Predicate) -> None:
        self.predicate = predicate
        self.errors = 0  # messages skipped because the predicate raised
        self._logged_at = 0.0

    def test(self, msg: MessageExt) -> bool:
        """Whether ``msg`` passes; a predicate that raises is logged and counts as no match."""
        try:
            return bool(self.predicate(msg))
        except Exception:
            self.errors += 1
            now = time.monotonic()
            if self.errors == 1:
                log.exception(
                    "function filter %r raised on message %s of %s/%d; treated as no match (the message is skipped)",
                    self.predicate,
                    msg.msg_id,
                    msg.topic,
                    msg.queue_id,
                )
                self._logged_at = now
            elif now - self._logged_at >= LOG_INTERVAL_S:
                log.warning(
                    "function filter %r has raised on %d messages so far; each was skipped", self.predicate, self.errors
                )
                self._logged_at = now
            return False

    def select(self, batch: PulledBatch) -> tuple[PulledBatch, list[MessageExt]]:
        """The batch cut down to the messages that pass, and those messages (decoded once)."""
        msgs = batch.messages()
        keep = np.fromiter(map(self.test, msgs), dtype=bool, count=len(msgs))
        if keep.all():
            return batch, msgs
        return take(batch, keep), [m for m, k in zip(msgs, keep.tolist()) if k]

    def __repr__(self) -> str:
        return f"FunctionFilter({self.predicate!r})"


def take(batch: PulledBatch, keep: np.ndarray) -> PulledBatch:
    """The rows of ``batch`` where ``keep`` is true (every per-message column cut alike)."""
    cut = {
        f.name: getattr(batch, f.name)[keep]
        for f in dataclasses.fields(batch)
        if isinstance(getattr(batch, f.name), np.ndarray)
    }
    return dataclasses.replace(batch, **cut)
