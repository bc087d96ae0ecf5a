"""PULL_WAIT: long polling (RocketMQ's PullRequestHoldService). A consumer that found nothing new
parks a waiter on its queue; the broker wakes it when a put moves the queue's max offset past
the waiter's offset, or answers "timed out" at its deadline. Consumers read the store files
themselves: the answer only says where the queue ends now.

What one client holds is capped, since every waiter costs memory and a look on each put to its
queue: past ``per_client_queue`` waiters on one queue the client's oldest there is answered at
once (timed out: it looks again), past ``per_client`` waiters in all the new one is refused with
SYSTEM_BUSY (the consumer then polls without waiting). Deadlines sit in a heap, so a tick costs
only the waiters that are due, however many wait; waiters answered early leave their heap entry
behind until the heap is rebuilt (when it holds twice the live waiters).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from shmq.broker.answers import Peer
from shmq.codec import frames as P

_HEAP_SLACK = 1024  # dead heap entries tolerated on top of twice the live waiters


@dataclass(eq=False, slots=True)
class PullWaiter:
    peer: Peer
    req_id: int
    offset: int
    deadline_ns: int
    key: tuple[str, int]
    done: bool = False


class PullWaitProcessor:
    """Waiters per (topic, queue id); ``max_offset(topic, qid)`` is the queue's current end."""

    def __init__(self, max_offset: Callable[[str, int], int], per_client: int, per_client_queue: int) -> None:
        self._max_offset = max_offset
        self.per_client = per_client
        self.per_client_queue = per_client_queue
        self.waiters: dict[tuple[str, int], list[PullWaiter]] = {}
        self.held: dict[Peer, int] = {}  # live waiters per client
        self._live = 0
        self._deadlines: list[tuple[int, int, PullWaiter]] = []  # (deadline, tie breaker, waiter)
        self._seq = itertools.count()

    def handle(self, peer: Peer, view: memoryview, now: int) -> None:
        pw = P.decode_pull_wait(view)
        hi = self._max_offset(pw.topic, pw.queue_id)
        if hi > pw.offset or pw.timeout_ms == 0:
            peer.out.append((P.WAKE, P.encode_wake(pw.req_id, hi, hi <= pw.offset)))
            return
        key = (pw.topic, pw.queue_id)
        waiting = self.waiters.get(key)
        if waiting is not None and len(waiting) >= self.per_client_queue:
            mine = [w for w in waiting if w.peer is peer]
            if len(mine) >= self.per_client_queue:  # the client's oldest wait here gives way
                waiting.remove(mine[0])
                self._done(mine[0])
                _answer(mine[0], hi, True)
        held = self.held.get(peer, 0)
        if held >= self.per_client:
            peer.out.append(
                (
                    P.ERROR,
                    P.encode_error(
                        pw.req_id,
                        P.SYSTEM_BUSY,
                        f"client holds {held} long polls, the most maxPullWaitersPerClient "
                        f"allows; poll again after an answer",
                    ),
                )
            )
            return
        w = PullWaiter(peer, pw.req_id, pw.offset, now + pw.timeout_ms * 1_000_000, key)
        if waiting is None:
            waiting = self.waiters[key] = []
        waiting.append(w)
        self.held[peer] = held + 1
        self._live += 1
        heapq.heappush(self._deadlines, (w.deadline_ns, next(self._seq), w))

    def wake(self, topic: str, qid: int, hi: int) -> None:
        """The queue now ends at ``hi``: answer the waiters below it (called for queues with puts)."""
        waiting = self.waiters.get((topic, qid))
        if waiting:
            keep = []
            for w in waiting:
                if w.offset < hi:
                    self._done(w)
                    _answer(w, hi, False)
                else:
                    keep.append(w)
            if keep:
                self.waiters[(topic, qid)] = keep
            else:
                del self.waiters[(topic, qid)]

    def expire(self, now: int) -> None:
        """Answer the waiters whose deadline passed."""
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            w = heapq.heappop(heap)[2]
            if w.done:
                continue
            waiting = self.waiters[w.key]
            waiting.remove(w)
            if not waiting:
                del self.waiters[w.key]
            self._done(w)
            _answer(w, self._max_offset(*w.key), True)
        if len(heap) > 2 * self._live + _HEAP_SLACK:
            self._deadlines = [e for e in heap if not e[2].done]
            heapq.heapify(self._deadlines)

    def forget(self, peer: Peer) -> None:
        """A client left: drop its waiters (nobody reads their answers)."""
        if peer not in self.held:
            return
        for key, waiting in list(self.waiters.items()):
            keep = []
            for w in waiting:
                if w.peer is peer:
                    self._done(w)
                else:
                    keep.append(w)
            if keep:
                self.waiters[key] = keep
            else:
                del self.waiters[key]
        self.held.pop(peer, None)

    def _done(self, w: PullWaiter) -> None:
        """``w`` left its queue's list: it no longer counts (its heap entry is skipped)."""
        w.done = True
        self._live -= 1
        n = self.held[w.peer] - 1
        if n:
            self.held[w.peer] = n
        else:
            del self.held[w.peer]


def _answer(w: PullWaiter, max_offset: int, timed_out: bool) -> None:
    if w.peer.alive:
        w.peer.out.append((P.WAKE, P.encode_wake(w.req_id, max_offset, timed_out)))
