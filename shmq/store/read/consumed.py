"""What the consumer groups have consumed, in commitlog terms: forced cleanup's limit.

RocketMQ's forced cleanup (disk over diskSpaceCleanForciblyRatio) deletes the oldest
commitlog segments whether or not anyone read them. shmq by default deletes an unexpired
segment only if every message in it that a consume queue points at lies below the committed
offset of every group that committed on that queue; a queue no group committed on counts as
unread. The committed offsets come from ``config/consumerOffset.json``, the file the broker
persists every flushConsumerOffsetInterval: it may lag the groups, which only keeps more.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from shmq.store.config_files import read_json
from shmq.store.consume_queue import BLANK_SIZE, ConsumeQueue

Floors = dict[tuple[str, int], int]  # (topic, queue id) -> lowest committed offset over groups


def committed_floors(store_dir: str) -> Floors:
    """The lowest committed offset of each queue over the groups that committed on it.

    An unreadable file gives no floors: then nothing counts as consumed, the safe side."""
    data = read_json(os.path.join(store_dir, "config", "consumerOffset.json"), {})
    table = data.get("offsetTable") if isinstance(data, dict) else None
    floors: Floors = {}
    if not isinstance(table, dict):
        return floors
    for key, queues in table.items():
        topic = str(key).partition("@")[0]
        if not isinstance(queues, dict):
            continue
        for qid, offset in queues.items():
            if str(qid).isdigit() and isinstance(offset, int) and not isinstance(offset, bool):
                k = (topic, int(qid))
                floors[k] = min(floors.get(k, offset), offset)
    return floors


def _first_unconsumed(cq: ConsumeQueue, floors: Floors) -> int:
    return max(cq.min_offset, floors.get((cq.topic, cq.queue_id), cq.min_offset))


def _first_at(cq: ConsumeQueue, lo: int, phys: int) -> int:
    """The first queue offset >= ``lo`` whose message starts at or after commitlog offset
    ``phys`` (entries are in commitlog order; blank entries count as below)."""
    hi = cq.max_offset
    while lo < hi:
        mid = (lo + hi) // 2
        e = cq.entry(mid)
        if e is not None and e["size"] != BLANK_SIZE and int(e["offset"]) >= phys:
            hi = mid
        else:
            lo = mid + 1
    return lo


def protected_offset(queues: Iterable[ConsumeQueue], floors: Floors, log_end: int) -> int:
    """The commitlog offset of the oldest message some group has not consumed (``log_end`` if
    none): segments ending at or below it hold only consumed messages."""
    lowest = log_end
    for cq in queues:
        first = _first_at(cq, _first_unconsumed(cq, floors), 0)
        e = cq.entry(first) if first < cq.max_offset else None
        if e is not None:
            lowest = min(lowest, int(e["offset"]))
    return lowest


@dataclass(frozen=True, slots=True)
class Lost:
    """Unconsumed messages of one queue in a deleted segment: queue offsets [first, end)."""

    topic: str
    queue_id: int
    first: int
    end: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.queue_id} offsets {self.first}-{self.end - 1} ({self.end - self.first})"


def unconsumed_between(queues: Iterable[ConsumeQueue], floors: Floors, lo: int, hi: int) -> list[Lost]:
    """Per queue, the unconsumed messages stored in commitlog offsets [lo, hi)."""
    out = []
    for cq in queues:
        start = _first_unconsumed(cq, floors)
        a = _first_at(cq, start, lo)
        z = _first_at(cq, a, hi)
        if z > a:
            out.append(Lost(cq.topic, cq.queue_id, a, z))
    return out
