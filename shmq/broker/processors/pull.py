"""PULL_WAIT: long polling (RocketMQ's PullRequestHoldService). A consumer that found nothing new
parks a waiter on its queue; the broker wakes it when a put moves the queue's max offset past
the waiter's offset, or answers "timed out" at its deadline. Consumers read the store files
themselves: the answer only says where the queue ends now."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from shmq.broker.answers import Peer
from shmq.codec import frames as P


@dataclass(eq=False, slots=True)
class PullWaiter:
    peer: Peer
    req_id: int
    offset: int
    deadline_ns: int


class PullWaitProcessor:
    """Waiters per (topic, queue id); ``max_offset(topic, qid)`` is the queue's current end."""

    def __init__(self, max_offset: Callable[[str, int], int]) -> None:
        self._max_offset = max_offset
        self.waiters: dict[tuple[str, int], list[PullWaiter]] = {}

    def handle(self, peer: Peer, view: memoryview, now: int) -> None:
        pw = P.decode_pull_wait(view)
        hi = self._max_offset(pw.topic, pw.queue_id)
        if hi > pw.offset or pw.timeout_ms == 0:
            peer.out.append((P.WAKE, P.encode_wake(pw.req_id, hi, hi <= pw.offset)))
            return
        w = PullWaiter(peer, pw.req_id, pw.offset, now + pw.timeout_ms * 1_000_000)
        self.waiters.setdefault((pw.topic, pw.queue_id), []).append(w)

    def wake(self, topic: str, qid: int, hi: int) -> None:
        """The queue now ends at ``hi``: answer the waiters below it (called for queues with puts)."""
        waiting = self.waiters.get((topic, qid))
        if waiting:
            keep = []
            for w in waiting:
                if w.offset < hi:
                    _answer(w, hi, False)
                else:
                    keep.append(w)
            self.waiters[(topic, qid)] = keep

    def expire(self, now: int) -> None:
        """Answer the waiters whose deadline passed; forget those of clients gone."""
        for (topic, qid), waiting in list(self.waiters.items()):
            keep = []
            for w in waiting:
                if not w.peer.alive:
                    continue
                if now >= w.deadline_ns:
                    _answer(w, self._max_offset(topic, qid), True)
                else:
                    keep.append(w)
            if keep:
                self.waiters[(topic, qid)] = keep
            else:
                del self.waiters[(topic, qid)]


def _answer(w: PullWaiter, max_offset: int, timed_out: bool) -> None:
    if w.peer.alive:
        w.peer.out.append((P.WAKE, P.encode_wake(w.req_id, max_offset, timed_out)))
