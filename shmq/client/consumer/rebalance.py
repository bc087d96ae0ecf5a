"""Queue allocation strategies: which queues of a topic one member of a consumer group reads.

Every member runs the same pure function over the same sorted queue list and sorted member
list (the broker publishes the members), so the group agrees on a split without talking.
The averagely and by-circle strategies give exactly RocketMQ's results
(AllocateMessageQueueAveragely, AllocateMessageQueueAveragelyByCircle).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from shmq.errors import BadArgumentError
from shmq.model.message import MessageQueue

Q = TypeVar("Q")
M = TypeVar("M", bound=Hashable)

AllocateStrategy = Callable[[Sequence[Q], Sequence[M], M], list[Q]]


def allocate_averagely(queues: Sequence[Q], members: Sequence[M], me: M) -> list[Q]:
    """Contiguous blocks: the first `len(queues) % len(members)` members get one queue more."""
    if me not in members or not queues:
        return []
    n, m = len(queues), len(members)
    index = members.index(me)
    mod = n % m
    average = 1 if n <= m else n // m + (1 if mod > 0 and index < mod else 0)
    start = index * average if mod > 0 and index < mod else index * average + mod
    count = min(average, n - start)
    return [queues[(start + i) % n] for i in range(max(count, 0))]


def allocate_averagely_by_circle(queues: Sequence[Q], members: Sequence[M], me: M) -> list[Q]:
    """Round robin: queue i goes to member i % len(members)."""
    if me not in members:
        return []
    index = members.index(me)
    return list(queues[index :: len(members)])


def _md5_hash(key: str) -> int:
    """RocketMQ's ConsistentHashRouter hash: the first 4 bytes of MD5, big-endian."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def allocate_consistent_hash(
    queues: Sequence[Q], members: Sequence[M], me: M, virtual_nodes: int = 10, key: Callable[[Q], str] = str
) -> list[Q]:
    """Hash ring with `virtual_nodes` points per member; a member joining or leaving moves few queues.

    Not balanced within one queue: the price of stability.
    """
    if virtual_nodes < 1:
        raise BadArgumentError(f"virtual_nodes must be at least 1, got {virtual_nodes}")
    if me not in members:
        return []
    ring: dict[int, M] = {}
    for member in members:
        for i in range(virtual_nodes):
            ring[_md5_hash(f"{member}-{i}")] = member
    points = sorted(ring)
    out = []
    for q in queues:
        i = bisect.bisect_left(points, _md5_hash(key(q)))
        if ring[points[i % len(points)]] == me:
            out.append(q)
    return out


def allocate_by_config(fixed: Sequence[Q]) -> AllocateStrategy[Q, M]:
    """A strategy that always answers `fixed` (RocketMQ's AllocateMessageQueueByConfig)."""
    chosen = list(fixed)

    def allocate(queues: Sequence[Q], members: Sequence[M], me: M) -> list[Q]:
        return list(chosen)

    return allocate


# consumers allocate MessageQueues among member client ids
STRATEGIES: dict[str, AllocateStrategy[MessageQueue, int]] = {
    "AVG": allocate_averagely,
    "AVG_BY_CIRCLE": allocate_averagely_by_circle,
    "CONSISTENT_HASH": allocate_consistent_hash,
}
