"""SYNC_MASTER answers held until a replica has acknowledged their records (RocketMQ's
``GroupTransferService``), pure logic: no sockets, no shared memory, no clock of its own.

The answers of one pass form one group with the pass's log end (the SYNC_FLUSH group commit
hands its flushed group over here). Groups arrive in log order with the same timeout, so a deque
ordered by end offset is also ordered by deadline: releasing is popping from the left while
the best in-sync replica's acked offset covers the head's end, and timing out is popping while
the head's deadline has passed. The loop never blocks on this: it asks ``ready`` while idle,
parks no longer than ``park_timeout``, and calls ``release`` once per pass while groups wait.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from shmq.broker.answers import Peer, Results, answer, set_status
from shmq.codec import frames as P

REPLICATION_STATS = (
    "replica_waits",
    "replica_acked",
    "replica_timeouts",
    "slave_not_available",
    "replica_dropped",
    "replica_wait_ns",
)


class AckSource(Protocol):
    """Where the acked offsets come from (``shmq.procs.ha_link.MasterLink`` over the HA segment)."""

    def best_acked(self) -> int:
        """The highest offset an in-sync replica acknowledged; -1 if none is in sync."""

    def set_waiting(self, waiting: bool) -> None:
        """Tell the sender whether answers wait (it then rings the broker's doorbell on acks)."""


class _Group:
    """The SYNC_MASTER answers of one pass: released together once ``end`` is acknowledged."""

    __slots__ = ("end", "since", "deadline", "items")

    def __init__(self, end: int, since: int, deadline: int, items: list[tuple[Peer, Results]]) -> None:
        self.end = end
        self.since = since
        self.deadline = deadline
        self.items = items


class ReplicaWaits:
    """Groups of answers waiting for a replica; ``source`` None: no HA segment (no replica ever)."""

    def __init__(self, timeout_ms: int, stats: dict[str, int], source: AckSource | None = None) -> None:
        self.timeout_ns = timeout_ms * 1_000_000
        self.stats = stats
        self.source = source
        self.groups: deque[_Group] = deque()

    def _acked(self) -> int:
        return -1 if self.source is None else self.source.best_acked()

    def hold(self, items: list[tuple[Peer, Results]], end: int, now: int) -> int:
        """A pass's stored answers, its log ending at ``end``: SLAVE_NOT_AVAILABLE at once if no
        replica is in sync, answered at once if one already acknowledged ``end``, else held.
        Returns the answers queued now."""
        acked = self._acked()
        if acked >= end:
            return self._answer(items, P.SEND_OK)
        if acked < 0:
            n = self._answer(items, P.SLAVE_NOT_AVAILABLE)
            self.stats["slave_not_available"] += n
            return n
        if not self.groups and self.source is not None:
            self.source.set_waiting(True)
        self.groups.append(_Group(end, now, now + self.timeout_ns, items))
        self.stats["replica_waits"] += sum(len(r) for _, r in items)
        return 0

    def ready(self, now: int) -> bool:
        """Whether ``release`` would answer something now (a few loads; False when nothing waits)."""
        groups = self.groups
        if not groups:
            return False
        head = groups[0]
        return now >= head.deadline or self._acked() >= head.end

    def release(self, now: int) -> int:
        """Answer every group an in-sync replica covers (SEND_OK), then every group past its
        deadline (FLUSH_SLAVE_TIMEOUT); the number of answers released."""
        groups = self.groups
        if not groups:
            return 0
        stats = self.stats
        n = 0
        acked = self._acked()
        while groups and groups[0].end <= acked:
            g = groups.popleft()
            k = self._answer(g.items, P.SEND_OK)
            stats["replica_acked"] += k
            stats["replica_wait_ns"] += (now - g.since) * k
            n += k
        while groups and groups[0].deadline <= now:
            k = self._answer(groups.popleft().items, P.FLUSH_SLAVE_TIMEOUT)
            stats["replica_timeouts"] += k
            n += k
        if not groups and self.source is not None:
            self.source.set_waiting(False)
        return n

    def finish(self, now: int) -> int:
        """At shutdown: answer everything that waits, FLUSH_SLAVE_TIMEOUT unless acknowledged."""
        n = self.release(now)
        if self.groups:
            while self.groups:
                k = self._answer(self.groups.popleft().items, P.FLUSH_SLAVE_TIMEOUT)
                self.stats["replica_timeouts"] += k
                n += k
            if self.source is not None:
                self.source.set_waiting(False)
        return n

    def park_timeout(self, default_s: float, now: int) -> float:
        """How long the idle loop may park: never past the next deadline."""
        if not self.groups:
            return default_s
        return max(0.0, min(default_s, (self.groups[0].deadline - now) / 1e9))

    def _answer(self, items: list[tuple[Peer, Results]], status: int) -> int:
        """Queue the answers of live peers with ``status``; answers of dead peers are dropped."""
        n = 0
        for peer, results in items:
            if not peer.alive:
                self.stats["replica_dropped"] += len(results)
                continue
            if status != P.SEND_OK:
                set_status(results, status)
            answer(peer, results)
            n += len(results)
        return n
