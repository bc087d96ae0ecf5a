"""Dispatch: turn committed commitlog records into consume-queue and index entries.

The put path builds a DispatchRequest from what the client precomputed (tag hash, key
hashes); recovery builds the same requests by decoding records from the commitlog. Both go
through `dispatch`, which is idempotent: entries a consume queue or the index already holds are
skipped, so re-dispatching a range after a crash never duplicates anything.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Protocol

import numpy as np

from shmq.codec import record as fmt

@dataclass(slots=True)
class DispatchRequest:
    """Consecutive commitlog records of one topic/queue."""

    topic: str
    queue_id: int
    first_queue_offset: int
    phys_offsets: np.ndarray  # int64, one per record
    sizes: np.ndarray
    tags_codes: np.ndarray
    store_timestamp: int  # of the last record (what the checkpoint records)
    key_hashes: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # every indexed key of every record, flattened
    key_records: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # record number (into phys_offsets) of each key hash
    key_timestamps: np.ndarray | None = None  # per key; None = all at store_timestamp
    enters_consume_queue: bool = True  # False for prepared / rolled-back transaction records


class QueueSink(Protocol):
    def put_batch(self, phys: np.ndarray, sizes: np.ndarray, tags_codes: np.ndarray, first_queue_offset: int) -> int: ...

    def put(self, phys: int, size: int, tags_code: int, queue_offset: int) -> bool: ...


class IndexSink(Protocol):
    end_phys_offset: int

    def put_batch(self, key_hashes: np.ndarray, phys_offsets: np.ndarray, store_timestamps: np.ndarray) -> None: ...


def dispatch(req: DispatchRequest, queue: QueueSink | None, index: IndexSink | None) -> None:
    """Write the request's consume-queue entries and index entries (skipping ones already there)."""
    if queue is not None and req.enters_consume_queue:
        queue.put_batch(req.phys_offsets, req.sizes, req.tags_codes, req.first_queue_offset)
    _index(index, req.key_hashes, req.phys_offsets, req.key_records, req.key_timestamps, req.store_timestamp)


def dispatch_queues(queues: list[QueueSink], rows: list[np.ndarray], first_offsets: list[int], phys: np.ndarray,
                    sizes: np.ndarray, tags_codes: np.ndarray, key_hashes: np.ndarray, key_records: np.ndarray,
                    store_timestamp: int, index: IndexSink | None) -> None:
    """Records of several queues appended together (``MessageStore.put_messages_multi``): queue k
    gets records ``rows[k]`` (in log order) from ``first_offsets[k]``; the index gets all keys at
    once. A queue with one or two records takes the scalar put (a numpy put costs ~10 us)."""
    for q, r, first in zip(queues, rows, first_offsets):
        if len(r) <= 2:
            for k, i in enumerate(r.tolist()):
                q.put(int(phys[i]), int(sizes[i]), int(tags_codes[i]), first + k)
        else:
            q.put_batch(phys[r], sizes[r], tags_codes[r], first)
    _index(index, key_hashes, phys, key_records, None, store_timestamp)


def _index(index: IndexSink | None, key_hashes: np.ndarray, phys_offsets: np.ndarray, key_records: np.ndarray,
           key_timestamps: np.ndarray | None, store_timestamp: int) -> None:
    """Index entries for the keys of records not indexed yet (the index is idempotent by offset)."""
    if index is not None and len(key_hashes):
        phys = phys_offsets[key_records]
        fresh = phys > index.end_phys_offset
        if fresh.any():
            ts = key_timestamps if key_timestamps is not None else np.full(len(phys), store_timestamp)
            index.put_batch(key_hashes[fresh], phys[fresh], ts[fresh])


def requests_from_log(records: Iterator[tuple[int, fmt.StoredRecord]], max_batch: int = 4096) -> Iterator[DispatchRequest]:
    """Group decoded (phys offset, record) pairs into requests of consecutive same-queue records.

    Grouping only consecutive records keeps commitlog order across queues, so a crash during
    re-dispatch leaves every queue dispatched up to a common point.
    """
    group: list[tuple[int, fmt.StoredRecord]] = []
    key = None
    for phys, rec in records:
        k = (rec.topic, rec.queue_id, fmt.enters_consume_queue(rec.sysflag))
        if group and (k != key or len(group) >= max_batch or
                      rec.queue_offset != group[-1][1].queue_offset + 1):
            yield _request(group)
            group = []
        key = k
        group.append((phys, rec))
    if group:
        yield _request(group)


def _request(group: list[tuple[int, fmt.StoredRecord]]) -> DispatchRequest:
    first = group[0][1]
    key_hashes, key_records, key_ts = [], [], []
    for i, (_, rec) in enumerate(group):
        hashes = fmt.record_key_hashes(rec.topic, rec.uniq_key, rec.properties.get(fmt.PROPERTY_KEYS))
        key_hashes += hashes
        key_records += [i] * len(hashes)
        key_ts += [rec.store_timestamp] * len(hashes)
    return DispatchRequest(
        topic=first.topic,
        queue_id=first.queue_id,
        first_queue_offset=first.queue_offset,
        phys_offsets=np.array([p for p, _ in group], dtype=np.int64),
        sizes=np.array([r.total_size for _, r in group], dtype=np.int64),
        tags_codes=np.array([fmt.tags_code(r.tags) for _, r in group], dtype=np.int64),
        store_timestamp=group[-1][1].store_timestamp,
        key_hashes=np.array(key_hashes, dtype=np.int64),
        key_records=np.array(key_records, dtype=np.int64),
        key_timestamps=np.array(key_ts, dtype=np.int64),
        enters_consume_queue=fmt.enters_consume_queue(first.sysflag),
    )

