"""PULL_WAIT: long polling (RocketMQ's PullRequestHoldService). A consumer that found nothing new
parks a waiter on its queue; the broker wakes it when a put moves the queue's max offset past
the waiter's offset, or answers "timed out" at its deadline. Consumers read the store files
themselves: the answer only says where the queue ends now.

What one client holds is capped, since every waiter costs memory and a look on each put to its
queue: past ``per_client_queue`` waiters on one queue the client's oldest there is answered at
once (timed out: it looks again), past ``per_client`` waiters in all the new one is refused with
SYSTEM_BUSY (the consumer then polls without waiting). Expiry scans the waiters only once the
earliest deadline is due, so long waits cost no CPU per tick."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from shmq.broker.answers import Peer
from shmq.codec import frames as P

_NEVER = 1 << 63


@dataclass(eq=False, slots=True)
class PullWaiter:
    peer: Peer
    req_id: int
    offset: int
    deadline_ns: int


class PullWaitProcessor:
    """Waiters per (topic, queue id); ``max_offset(topic, qid)`` is the queue's current end."""

    def __init__(self, max_offset: Callable[[str, int], int], per_client: int, per_client_queue: int) -> None:
        self._max_offset = max_offset
        self.per_client = per_client
        self.per_client_queue = per_client_queue
        self.waiters: dict[tuple[str, int], list[PullWaiter]] = {}
        self.held: dict[Peer, int] = {}  # waiters per client
        self._next_deadline = _NEVER

    def handle(self, peer: Peer, view: memoryview, now: int) -> None:
        pw = P.decode_pull_wait(view)
        hi = self._max_offset(pw.topic, pw.queue_id)
        if hi > pw.offset or pw.timeout_ms == 0:
            peer.out.append((P.WAKE, P.encode_wake(pw.req_id, hi, hi <= pw.offset)))
            return
        held = self.held.get(peer, 0)
        key = (pw.topic, pw.queue_id)
        waiting = self.waiters.get(key)
        if waiting is None:
            waiting = self.waiters[key] = []
        elif len(waiting) >= self.per_client_queue:
            mine = [i for i, w in enumerate(waiting) if w.peer is peer]
            if len(mine) >= self.per_client_queue:  # the client's oldest wait here gives way
                _answer(waiting.pop(mine[0]), hi, True)
                held -= 1
        if held >= self.per_client:
            if not waiting:
                del self.waiters[key]
            self.held[peer] = held
            peer.out.append((P.ERROR, P.encode_error(
                pw.req_id, P.SYSTEM_BUSY, f"client holds {held} long polls, the most maxPullWaitersPerClient "
                f"allows; poll again after an answer")))
            return
        deadline = now + pw.timeout_ms * 1_000_000
        waiting.append(PullWaiter(peer, pw.req_id, pw.offset, deadline))
        self.held[peer] = held + 1
        if deadline < self._next_deadline:
            self._next_deadline = deadline

    def wake(self, topic: str, qid: int, hi: int) -> None:
        """The queue now ends at ``hi``: answer the waiters below it (called for queues with puts)."""
        waiting = self.waiters.get((topic, qid))
        if waiting:
            keep = []
            held = self.held
            for w in waiting:
                if w.offset < hi:
                    _answer(w, hi, False)
                    held[w.peer] -= 1
                else:
                    keep.append(w)
            self.waiters[(topic, qid)] = keep

    def expire(self, now: int) -> None:
        """Answer the waiters whose deadline passed (scanned only once the earliest is due)."""
        if now < self._next_deadline:
            return
        nearest = _NEVER
        held = self.held
        for (topic, qid), waiting in list(self.waiters.items()):
            keep = []
            for w in waiting:
                if now >= w.deadline_ns:
                    _answer(w, self._max_offset(topic, qid), True)
                    held[w.peer] -= 1
                else:
                    keep.append(w)
                    nearest = min(nearest, w.deadline_ns)
            if keep:
                self.waiters[(topic, qid)] = keep
            else:
                del self.waiters[(topic, qid)]
        self._next_deadline = nearest
        for peer in [p for p, n in held.items() if n <= 0]:
            del held[peer]

    def forget(self, peer: Peer) -> None:
        """A client left: drop its waiters (nobody reads their answers)."""
        if self.held.pop(peer, 0) <= 0:
            return
        for key, waiting in list(self.waiters.items()):
            keep = [w for w in waiting if w.peer is not peer]
            if keep:
                self.waiters[key] = keep
            else:
                del self.waiters[key]


def _answer(w: PullWaiter, max_offset: int, timed_out: bool) -> None:
    if w.peer.alive:
        w.peer.out.append((P.WAKE, P.encode_wake(w.req_id, max_offset, timed_out)))
