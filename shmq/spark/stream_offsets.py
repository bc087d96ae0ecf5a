"""Offset arithmetic of the `shmq` streaming source, free of I/O and Spark (tested alone).

A stream offset is a dict {"topic/queue_id": next queue offset to read}, one key per queue the
query has seen, keys sorted: Spark journals it as JSON in the checkpoint and decides whether a
micro-batch has new data by comparing two offsets, so the same position must always serialize
the same way. Over a store root (several brokers' stores) a key also names the broker:
"broker/topic/queue_id"; a single store keeps the two-part keys, so its checkpoints written
before roots existed still load. Neither broker nor topic names can hold "/", so a key splits
back unambiguously.

Each trigger sees, per queue present in the store, its `head` (min offset: entries below it
were deleted by cleanup) and its `tail` (live-safe end: every entry below it points at a whole
record). From the checkpointed start and these, `next_end` picks the micro-batch end, and
`plan_ranges` turns a (start, end) pair into the queue-offset ranges to read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

StreamOffset = dict[str, int]


def queue_key(topic: str, queue_id: int, broker: str | None = None) -> str:
    """The offset key of a queue: "topic/queue_id", or "broker/topic/queue_id" in a store root."""
    return f"{topic}/{queue_id}" if broker is None else f"{broker}/{topic}/{queue_id}"


def parse_queue_key(key: str) -> tuple[str | None, str, int]:
    """(broker, topic, queue_id) of an offset key (broker None for a single store's key);
    ValueError when it is not one."""
    parts = key.split("/")
    if len(parts) not in (2, 3) or not all(parts) or not parts[-1].isdigit():
        raise ValueError(f"not a shmq stream offset key ([broker/]topic/queue_id): {key!r}")
    return (parts[0] if len(parts) == 3 else None), parts[-2], int(parts[-1])


def sorted_offset(offsets: Mapping[str, int]) -> StreamOffset:
    """The same offsets with keys in sorted order (a stable JSON form)."""
    return {k: int(offsets[k]) for k in sorted(offsets)}


def fair_split(available: Mapping[str, int], budget: int) -> dict[str, int]:
    """Share `budget` rows over queues with `available` rows each, max-min fairly.

    Every queue gets an equal share, or all it has when that is less; what the small queues
    leave goes to the others (water filling). The few rows an equal split cannot place go to the
    queues with the largest backlog left (ties: key order), so with a budget smaller than the
    number of queues the longest queues move first and no queue starves for ever: its backlog
    becomes the largest in turn.
    """
    want = {k: max(0, int(v)) for k, v in available.items()}
    grant = dict.fromkeys(want, 0)
    left = max(0, budget)
    open_keys = sorted(k for k, v in want.items() if v > 0)
    while left > 0 and open_keys:
        share = left // len(open_keys)
        if share == 0:
            by_backlog = sorted(open_keys, key=lambda k: (-(want[k] - grant[k]), k))
            for k in by_backlog[:left]:
                grant[k] += 1
            break
        still_open = []
        for k in open_keys:
            take = min(share, want[k] - grant[k])
            grant[k] += take
            left -= take
            if grant[k] < want[k]:
                still_open.append(k)
        open_keys = still_open
    return grant


def next_end(
    start: Mapping[str, int],
    heads: Mapping[str, int],
    tails: Mapping[str, int],
    max_rows: int | None = None,
    target: Mapping[str, int] | None = None,
) -> StreamOffset:
    """The end offset of the next micro-batch.

    `start`: where the last batch ended (the checkpoint). `heads`/`tails`: min offset and
    live-safe end of each queue present now. A queue not in `start` is new and starts at its
    head; a queue whose head moved past its start (cleanup) counts from the head. `max_rows`
    caps the rows of the batch (shared by `fair_split`); `target` (Trigger.AvailableNow) caps
    each queue at the end recorded when the query started, and leaves out queues found later.
    Offsets never move backwards, and a queue that disappeared keeps its offset. Returns
    `start` itself (same keys and values) when there is nothing to read.
    """
    frm: dict[str, int] = {}
    available: dict[str, int] = {}
    for key, tail in tails.items():
        if target is not None and key not in target and key not in start:
            continue
        pos = max(start.get(key, heads.get(key, 0)), heads.get(key, 0))
        stop = tail if target is None else min(tail, target.get(key, start.get(key, pos)))
        frm[key] = pos
        available[key] = max(0, stop - pos)
    grant = available if max_rows is None else fair_split(available, max_rows)
    end = dict(start)
    for key, pos in frm.items():
        end[key] = max(end.get(key, pos), pos + grant[key])
    return sorted_offset(end)


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Queue offsets [start, end) of one queue (of `broker`'s store in a store root) to read in
    a micro-batch; `lost` entries from `lost_from` on were deleted by cleanup before the query
    read them."""

    topic: str
    queue_id: int
    start: int
    end: int
    lost: int = 0
    lost_from: int = 0
    broker: str | None = None


def plan_ranges(start: Mapping[str, int], end: Mapping[str, int], heads: Mapping[str, int]) -> list[QueueRange]:
    """What the micro-batch (start, end] reads, queue by queue, given the heads now.

    A queue in `end` but not in `start` appeared during the previous trigger: it is read from
    its head. A queue whose head passed its start lost the entries in between (reported in
    `lost`); the batch reads from the head, up to `end` when anything is left.
    """
    out = []
    for key in sorted(end):
        broker, topic, qid = parse_queue_key(key)
        head = heads.get(key, 0)
        pos = start.get(key, head)
        lost = max(0, min(head, end[key]) - pos) if key in start else 0
        frm, pos = pos, max(pos, head)
        if end[key] > pos or lost:
            out.append(QueueRange(topic, qid, pos, max(pos, end[key]), lost, frm if lost else 0, broker))
    return out
