"""POP long polls (RocketMQ's PopLongPollingService): a POP that found nothing waits until a put
to one of its topics, an ack or revive that frees a FIFO queue of its group, or its deadline.

Waiters are kept per group, with an index from each topic to the groups waiting on it, so a put
looks only at the groups that may want it. What one client holds is capped (as PULL_WAIT's
waiters, by ``maxPullWaitersPerClient``); deadlines sit in a heap (lazy deletion, rebuilt when
it holds twice the live waiters).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from shmq.broker.answers import Peer
from shmq.codec.pop_frames import Pop

_HEAP_SLACK = 1024


@dataclass(eq=False, slots=True)
class PopWaiter:
    peer: Peer
    pop: Pop
    deadline_ns: int
    done: bool = False


class PopWaiters:
    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self.by_group: dict[str, list[PopWaiter]] = {}
        self.topic_groups: dict[str, set[str]] = {}
        self.held: dict[Peer, int] = {}
        self._live = 0
        self._heap: list[tuple[int, int, PopWaiter]] = []
        self._seq = itertools.count()

    def park(self, peer: Peer, pop: Pop, topics: Iterable[str], now: int) -> bool:
        """Wait for ``topics``; False when the client holds its cap of waiters already."""
        held = self.held.get(peer, 0)
        if held >= self.per_client:
            return False
        w = PopWaiter(peer, pop, now + pop.await_ms * 1_000_000)
        self.by_group.setdefault(pop.group, []).append(w)
        for t in topics:
            self.topic_groups.setdefault(t, set()).add(pop.group)
        self.held[peer] = held + 1
        self._live += 1
        heapq.heappush(self._heap, (w.deadline_ns, next(self._seq), w))
        return True

    def groups_of(self, topics: Iterable[str]) -> set[str]:
        """The groups with waiters on any of ``topics``."""
        out: set[str] = set()
        for t in topics:
            gs = self.topic_groups.get(t)
            if gs:
                out |= gs
        return out & self.by_group.keys()

    def waiting(self, group: str) -> list[PopWaiter]:
        """A copy of the group's live waiters, oldest first."""
        return list(self.by_group.get(group, ()))

    def done(self, w: PopWaiter) -> None:
        """``w`` was answered: it stops waiting."""
        if w.done:
            return
        w.done = True
        self._live -= 1
        waiting = self.by_group[w.pop.group]
        waiting.remove(w)
        if not waiting:
            del self.by_group[w.pop.group]
            for t, gs in list(self.topic_groups.items()):
                gs.discard(w.pop.group)
                if not gs:
                    del self.topic_groups[t]
        n = self.held[w.peer] - 1
        if n:
            self.held[w.peer] = n
        else:
            del self.held[w.peer]

    def expired(self, now: int) -> list[PopWaiter]:
        """The waiters whose deadline passed (taken out: the caller answers them)."""
        heap, out = self._heap, []
        while heap and heap[0][0] <= now:
            w = heapq.heappop(heap)[2]
            if not w.done:
                self.done(w)
                out.append(w)
        if len(heap) > 2 * self._live + _HEAP_SLACK:
            self._heap = [e for e in heap if not e[2].done]
            heapq.heapify(self._heap)
        return out

    def forget(self, peer: Peer) -> None:
        """A client left: its waiters go unanswered."""
        if peer not in self.held:
            return
        for group in list(self.by_group):
            for w in [w for w in self.by_group.get(group, ()) if w.peer is peer]:
                self.done(w)
