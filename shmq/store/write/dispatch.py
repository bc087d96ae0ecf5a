"""Dispatch: turn committed commitlog records into consume-queue and index entries (RocketMQ's
CommitLogDispatcher list, ``DefaultMessageStore.doDispatch``).

After every write the store hands one ``DispatchRequest`` (all records of the put) to each
dispatcher of its list, in order: the consume queues, then the index; the SQL filter bitmap
and transaction ops join the list later. Recovery builds the same requests by decoding records
from the commitlog and runs the same list, as the replica will. Dispatchers are idempotent:
entries a consume queue or the index already holds are skipped, so re-dispatching a range after
a crash never duplicates anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.model.system_topics import is_parking_topic
from shmq.store.consume_queue import MAX_QUEUE_ID

_EMPTY = np.empty(0, np.int64)
# one value per record: an int64 array, or for a single record a plain list (a numpy array of
# one costs more than the rest of its dispatch)
Column = np.ndarray | list[int]


class QueueSink(Protocol):
    def put_batch(
        self, phys: np.ndarray, sizes: np.ndarray, tags_codes: np.ndarray, first_queue_offset: int
    ) -> int: ...

    def put(self, phys: int, size: int, tags_code: int, queue_offset: int) -> bool: ...


class IndexSink(Protocol):
    @property
    def end_phys_offset(self) -> int: ...

    def put_batch(self, key_hashes: np.ndarray, phys_offsets: np.ndarray, store_timestamps: np.ndarray) -> None: ...

    def put(self, key_hashes: list[int], phys_offset: int, store_timestamp: int) -> None: ...

    def hashes_at(self, phys_offset: int) -> np.ndarray: ...


@dataclass(slots=True)
class DispatchRequest:
    """Records written together (one put, or a run of recovered records), per record where it
    landed. Queue ``queues[k]`` gets records ``rows[k]`` (in log order) from queue offset
    ``first_queue_offsets[k]``; ``rows`` None: one queue takes every record. Records that do
    not enter a consume queue (prepared or rolled-back transactions) are in no row."""

    queues: Sequence[QueueSink]
    rows: list[np.ndarray] | None
    first_queue_offsets: list[int]
    phys_offsets: Column
    sizes: Column
    tags_codes: Column
    store_timestamp: int  # of the last record (what the checkpoint records)
    key_hashes: np.ndarray = field(default_factory=lambda: _EMPTY)  # every indexed key of every record, flattened
    key_records: np.ndarray = field(default_factory=lambda: _EMPTY)  # record number of each key hash
    key_timestamps: np.ndarray | None = None  # per key; None = all at store_timestamp


class Dispatcher(Protocol):
    """Runs after the write on all records of a put (or of a recovered run).

    ``dispatch_one`` is the same for the one record of a single send (the sync send's path):
    building a DispatchRequest and reading its columns back cost more than the dispatch itself."""

    def dispatch(self, req: DispatchRequest) -> None: ...

    def dispatch_one(
        self,
        queue: QueueSink | None,
        queue_offset: int,
        phys: int,
        size: int,
        tags_code: int,
        key_hashes: np.ndarray,
        store_timestamp: int,
    ) -> None: ...


class ConsumeQueueDispatcher:
    """Consume-queue entries. A queue with one or two records takes the scalar put (a numpy put
    costs ~10 us)."""

    def dispatch_one(
        self,
        queue: QueueSink | None,
        queue_offset: int,
        phys: int,
        size: int,
        tags_code: int,
        key_hashes: np.ndarray,
        store_timestamp: int,
    ) -> None:
        if queue is not None:
            queue.put(phys, size, tags_code, queue_offset)

    def dispatch(self, req: DispatchRequest) -> None:
        phys, sizes, tags = req.phys_offsets, req.sizes, req.tags_codes
        if req.rows is None:
            if not req.queues:
                return
            q, first = req.queues[0], req.first_queue_offsets[0]
            if len(phys) == 1:
                q.put(int(phys[0]), int(sizes[0]), int(tags[0]), first)
            elif len(phys) == 2:
                for k in range(len(phys)):
                    q.put(int(phys[k]), int(sizes[k]), int(tags[k]), first + k)
            else:
                q.put_batch(np.asarray(phys), np.asarray(sizes), np.asarray(tags), first)
            return
        put_rows(req.queues, req.rows, req.first_queue_offsets, phys, sizes, tags)


def put_rows(
    queues: Sequence[QueueSink], rows: list[np.ndarray], firsts: list[int], phys: Column, sizes: Column, tags: Column
) -> None:
    """Entries of a put over many queues: queue ``queues[k]`` takes records ``rows[k]`` from
    queue offset ``firsts[k]``. A queue with one or two records takes the scalar put (a numpy
    put costs ~10 us); with 1,250 topics sending that is every queue, so the compiled twin
    writes those entries itself when the queue's last file has room (else it calls the same
    ``put``)."""
    for q, r, first in zip(queues, rows, firsts):
        if len(r) <= 2:
            for k, i in enumerate(r.tolist()):
                q.put(int(phys[i]), int(sizes[i]), int(tags[i]), first + k)
        else:
            q.put_batch(np.asarray(phys)[r], np.asarray(sizes)[r], np.asarray(tags)[r], first)


put_rows = _speedups.pick("_queues", "put_rows", put_rows)


class IndexDispatcher:
    """Index entries for the keys of records not indexed yet (the index is idempotent by offset,
    and for the record at its end by key hash)."""

    def __init__(self, index: IndexSink) -> None:
        self.index = index

    def dispatch_one(
        self,
        queue: QueueSink | None,
        queue_offset: int,
        phys: int,
        size: int,
        tags_code: int,
        key_hashes: np.ndarray,
        store_timestamp: int,
    ) -> None:
        if len(key_hashes):  # a record just put: new, so no freshness check
            self.index.put(key_hashes.tolist(), phys, store_timestamp)

    def dispatch(self, req: DispatchRequest) -> None:
        key_hashes = req.key_hashes
        if not len(key_hashes):
            return
        index = self.index
        if len(req.phys_offsets) == 1 and req.key_timestamps is None:
            # one record just put (recovery gives key_timestamps): new, so no freshness check
            index.put(key_hashes.tolist(), int(req.phys_offsets[0]), req.store_timestamp)
            return
        phys_k = np.asarray(req.phys_offsets)[req.key_records]
        end = index.end_phys_offset
        fresh = phys_k > end
        if req.key_timestamps is not None:
            # records read back from the log (recovery, the replica): the index's last record
            # may hold only some of its keys, as a crash between them leaves it (the index's end
            # moves with each key of a one-record put and with each file a batch fills); its
            # missing keys go in now
            last = phys_k == end
            if last.any():
                fresh |= last & ~np.isin(key_hashes, index.hashes_at(end))
        if fresh.any():
            ts = req.key_timestamps if req.key_timestamps is not None else np.full(len(phys_k), req.store_timestamp)
            index.put_batch(key_hashes[fresh], phys_k[fresh], ts[fresh])


def group_by_queue(
    topic_ids: np.ndarray, queue_ids: np.ndarray, rows: np.ndarray
) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray, list[np.ndarray]]:
    """Records ``rows`` of a put grouped by (topic number, queue id), vectorised: the groups'
    (topic number, queue id); for each of ``rows`` its group and its rank within the group (log
    order); for each group its records. Queue ids must be in 0..65535."""
    span = MAX_QUEUE_ID + 1
    keys, gid = np.unique(topic_ids[rows] * span + queue_ids[rows], return_inverse=True)
    gid = gid.reshape(-1)
    order = np.argsort(gid, kind="stable")
    counts = np.bincount(gid, minlength=len(keys))
    ends = np.cumsum(counts)
    rank = np.empty(len(rows), np.int64)
    rank[order] = np.arange(len(rows)) - np.repeat(ends - counts, counts)
    bounds = ends.tolist()
    by_group = rows[order]  # one gather; each group is then a view (a gather per group cost ~1 us each)
    members = [by_group[a:z] for a, z in zip([0, *bounds[:-1]], bounds)]  # np.split costs ~3x as much
    return [(k // span, k % span) for k in keys.tolist()], gid, rank, members


def requests_from_log(
    records: Iterator[tuple[int, fmt.StoredRecord]], queue: Callable[[str, int], QueueSink], max_batch: int = 4096
) -> Iterator[DispatchRequest]:
    """Group decoded (phys offset, record) pairs into requests of consecutive same-queue records;
    ``queue(topic, queue_id)`` finds or makes the consume queue.

    Grouping only consecutive records keeps commitlog order across queues, so a crash during
    re-dispatch leaves every queue dispatched up to a common point.
    """
    group: list[tuple[int, fmt.StoredRecord]] = []
    key = None
    for phys, rec in records:
        k = (rec.topic, rec.queue_id, fmt.enters_consume_queue(rec.sysflag))
        if group and (k != key or len(group) >= max_batch or rec.queue_offset != group[-1][1].queue_offset + 1):
            yield _request(group, queue)
            group = []
        key = k
        group.append((phys, rec))
    if group:
        yield _request(group, queue)


def _request(group: list[tuple[int, fmt.StoredRecord]], queue: Callable[[str, int], QueueSink]) -> DispatchRequest:
    first = group[0][1]
    key_hashes: list[int] = []
    key_records: list[int] = []
    key_ts: list[int] = []
    for i, (_, rec) in enumerate(group):
        hashes = fmt.record_key_hashes(rec.topic, rec.uniq_key, rec.properties.get(fmt.PROPERTY_KEYS))
        key_hashes += hashes
        key_records += [i] * len(hashes)
        key_ts += [rec.store_timestamp] * len(hashes)
    enters = fmt.enters_consume_queue(first.sysflag)
    return DispatchRequest(
        queues=[queue(first.topic, first.queue_id)] if enters else [],
        rows=None,
        first_queue_offsets=[first.queue_offset],
        phys_offsets=np.array([p for p, _ in group], dtype=np.int64),
        sizes=np.array([r.total_size for _, r in group], dtype=np.int64),
        tags_codes=np.array([consume_queue_tags_code(r) for _, r in group], dtype=np.int64),
        store_timestamp=group[-1][1].store_timestamp,
        key_hashes=np.array(key_hashes, dtype=np.int64),
        key_records=np.array(key_records, dtype=np.int64),
        key_timestamps=np.array(key_ts, dtype=np.int64),
    )


def consume_queue_tags_code(rec: fmt.StoredRecord) -> int:
    """The consume-queue tag field of a record read back from the log: the tag hash, or for a
    parked delayed or timer message its due time (what the put stored there)."""
    due = rec.properties.get(fmt.PROPERTY_TIMER_OUT_MS)
    if due is not None and is_parking_topic(rec.topic):
        try:
            return int(due)
        except ValueError:
            pass
    return fmt.tags_code(rec.tags)
