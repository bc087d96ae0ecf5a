"""ProcessQueue: the messages of one assigned queue that were pulled and are not yet consumed.

As in RocketMQ, the offset a consumer may commit is the smallest offset still in process (a
message waiting for redelivery stays in process), or the pull position when none is: nothing
unconsumed is ever committed past. Messages are added in offset order, so the first key of
the insertion-ordered dict is the smallest.
"""

from __future__ import annotations

import threading
from collections import deque

from shmq.model.message import MessageQueue
from shmq.model.message_ext import MessageExt


class ProcessQueue:
    def __init__(self, mq: MessageQueue, next_offset: int) -> None:
        self.mq = mq
        self.lock = threading.Lock()
        self.msgs: dict[int, MessageExt] = {}
        self.msg_size = 0
        self.next_offset = next_offset  # the pull position
        self.dropped = False
        self.inflight = 0  # listener calls running now
        self.pending: deque[MessageExt] = deque()  # orderly: pulled, not yet handed to the listener
        self.consuming = False  # orderly: a consume task owns this queue
        self.committed = -1  # last offset sent to the broker / offset store
        self.wait_req: int | None = None  # outstanding PULL_WAIT
        self.ready_at = 0.0  # monotonic time before which the puller leaves the queue alone (handoff)

    def put(self, msgs: list[MessageExt], next_offset: int) -> None:
        """Add pulled messages and move the pull position past everything scanned."""
        with self.lock:
            for m in msgs:
                if m.queue_offset not in self.msgs:
                    self.msgs[m.queue_offset] = m
                    self.msg_size += len(m.body)
            self.next_offset = next_offset

    def remove(self, msgs: list[MessageExt]) -> None:
        """Consumed: they no longer hold the commit offset back."""
        with self.lock:
            for m in msgs:
                if self.msgs.pop(m.queue_offset, None) is not None:
                    self.msg_size -= len(m.body)

    def take(self, max_nums: int) -> list[MessageExt]:
        """Remove and return up to ``max_nums`` of the smallest offsets (LitePullConsumer's poll)."""
        with self.lock:
            out: list[MessageExt] = []
            while self.msgs and len(out) < max_nums:
                m = self.msgs.pop(next(iter(self.msgs)))
                self.msg_size -= len(m.body)
                out.append(m)
            return out

    def reset(self, next_offset: int) -> None:
        """Forget every message in process and pull from ``next_offset`` next (a seek)."""
        with self.lock:
            self.msgs.clear()
            self.msg_size = 0
            self.next_offset = next_offset

    def commit_offset(self) -> int:
        """The smallest offset in process, or the pull position when nothing is."""
        with self.lock:
            return next(iter(self.msgs)) if self.msgs else self.next_offset

    @property
    def count(self) -> int:
        return len(self.msgs)

    def span(self) -> int:
        """Distance between the smallest and the largest offset in process."""
        with self.lock:
            if not self.msgs:
                return 0
            return next(reversed(self.msgs)) - next(iter(self.msgs))

    def begin(self) -> bool:
        """A listener call starts; False if the queue was dropped by a rebalance (skip the call)."""
        with self.lock:
            if self.dropped:
                return False
            self.inflight += 1
            return True

    def end(self) -> None:
        with self.lock:
            self.inflight -= 1

    def drop(self) -> None:
        """Rebalanced away or shut down: no new listener call starts."""
        with self.lock:
            self.dropped = True
