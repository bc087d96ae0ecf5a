"""LogWriter: the store's one writer (RocketMQ's CommitLog.putMessage with the ReputMessageService's
dispatch folded in). Every byte written to the commitlog, the consume queues and the index goes
through it, under its put lock, and only it publishes how far they reach.

Three doors lead in:

- ``put(req)``: the records of a put that passed the store's put hooks; the plain lane
  (``put_plain``) is the same door compiled for the usual put;
- ``ReplicaAppender`` (``shmq.store.write.replicated``): a replica's raw master bytes, written
  with ``write_raw`` and dispatched with ``dispatch``;
- ``redispatch(start)``: recovery's rebuild of queues and index from the log.

Readers (consumers, lookups, the flush services) never take the lock: they trust what
``publish`` made visible, which comes after the bytes and their entries are written.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Iterable

import numpy as np

from shmq.codec import record as fmt
from shmq.config import BrokerConfig
from shmq.errors import DiskFullError, StoreClosedError
from shmq.store import recovery
from shmq.store.commitlog import CommitLog
from shmq.store.consume_queue import ConsumeQueue, reserve_each
from shmq.store.index_file import IndexService
from shmq.store.mapped_file import AllocateMappedFileService, MappedFile
from shmq.store.queue_slots import QueueSlots
from shmq.store.space import DiskSpace
from shmq.store.write import multi_put, plain_put
from shmq.store.write.dispatch import (
    ConsumeQueueDispatcher,
    Dispatcher,
    DispatchRequest,
    IndexDispatcher,
    group_by_queue,
    requests_from_log,
)
from shmq.store.write.hooks import PutRequest, measure, record_limits
from shmq.store.write.result import PutMessageResult, PutStatus

log = logging.getLogger(__name__)
_I32 = struct.Struct(">i")
# SYSFLAG bit of prepared and rolled-back transactions (TRANSACTION_ROLLBACK includes it): no
# consume-queue entry
HIDDEN_TX_BIT = fmt.TRANSACTION_PREPARED
QueueKey = tuple[str, int]


class LogWriter:
    """The single writer of a store's commitlog, consume queues and index."""

    def __init__(
        self,
        store_dir: str,
        config: BrokerConfig,
        commitlog: CommitLog,
        space: DiskSpace,
        allocator: AllocateMappedFileService,
    ) -> None:
        self.store_dir = store_dir
        self.config = config
        self.commitlog = commitlog
        self.put_lock = commitlog.put_lock
        self.space = space
        self.allocator = allocator
        self.max_body, self.max_record = record_limits(config)
        self.queues: dict[QueueKey, ConsumeQueue] = {}
        self._queues_lock = threading.Lock()
        self.queue_slots = QueueSlots()  # the queues' hot numbers, for the put over many queues (multi_put)
        self.dispatchers: list[Dispatcher] = [ConsumeQueueDispatcher()]
        self.index: IndexService | None = None
        self.accepting = False  # puts are taken (the store is running)
        self.dispatched_ts = 0  # store ts of the last record dispatched (for the checkpoint)
        # set when recovery could not re-dispatch for lack of disk: done before the next write
        self.redispatch_from: int | None = None

    def attach_index(self, index: IndexService) -> None:
        """Keys of the records from now on go to ``index`` too (the index is opened by recovery)."""
        self.index = index
        self.dispatchers.append(IndexDispatcher(index))

    # ------------------------------------------------------------------ queues

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The consume queue of (topic, queue id), made on first use."""
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            with self._queues_lock:
                cq = self.queues.get((topic, queue_id))
                if cq is None:
                    cq = self.open_queue(topic, queue_id)
                    self.queues[(topic, queue_id)] = cq
        return cq

    def open_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """A ConsumeQueue object of this store (not yet in ``queues``: recovery loads it first)."""
        cq = ConsumeQueue(self.store_dir, topic, queue_id, self.config.mapped_file_size_consume_queue)
        cq.queue.before_new_file = self.space.check_new_file
        return cq

    def consume_queues(self) -> list[ConsumeQueue]:
        with self._queues_lock:
            return list(self.queues.values())

    # ------------------------------------------------------------------ writable

    def writable(self) -> bool:
        """The common case, one comparison chain: running, disk not full, recovery complete."""
        return self.accepting and not self.space.full and self.redispatch_from is None

    def check_writable(self) -> None:
        """Refuse a write on a closed store or a full disk; while the disk is full, measure it again
        now and then (DiskSpace.recheck) so that writes resume by themselves."""
        if not self.accepting:
            raise StoreClosedError("the message store is shut down")
        self.space.recheck()
        if self.space.full:
            raise self.space.error()
        if self.redispatch_from is not None:
            with self.put_lock:
                self._finish_recovery()

    def finish_recovery(self) -> None:
        """Complete a recovery cut short by a full disk, if space is back (each cleanup round
        calls it, so reads complete without waiting for a write)."""
        if self.redispatch_from is not None and self.accepting:
            with self.put_lock:
                try:
                    self._finish_recovery()
                except DiskFullError:
                    pass  # still full: logged when it became so

    def _finish_recovery(self) -> None:
        start = self.redispatch_from
        if start is None:
            return
        try:
            self.redispatch(start)
        except DiskFullError as e:
            self.space.refused(e)
            raise self.space.error() from None
        self.redispatch_from = None
        log.warning("recovery finished: consume queues and index complete again")

    def _closed_check(self) -> None:
        if not self.accepting:
            raise StoreClosedError("the message store is shut down")

    # ------------------------------------------------------------------ reservation, publication

    def reserve(
        self, queues: Iterable[tuple[ConsumeQueue, int]], nbytes: int, sizes: np.ndarray | int, nkeys: int
    ) -> None:
        """Give everything a put will write disk blocks before any byte is written (commitlog,
        then ``count`` entries of each queue, then ``nkeys`` index entries): on a full disk the
        put fails whole with DiskFullError and the store refuses writes until space is freed,
        never faulting on a hole (SIGBUS) or leaving records without their entries. Comparisons
        only, unless a file needs its next chunk."""
        try:
            self.commitlog.reserve(nbytes, sizes)
            reserve_each(queues)
            if nkeys and self.index is not None:
                self.index.reserve(nkeys)
        except DiskFullError as e:
            self.space.refused(e)
            raise self.space.error() from None

    def reserve_raw(self, mf: MappedFile, end: int, reqs: list[DispatchRequest]) -> None:
        """Disk blocks for raw bytes to ``end`` of segment ``mf`` and the entries ``reqs`` will write."""
        try:
            mf.reserve(end)
            for req in reqs:
                for q, r in zip(req.queues, req.rows or [np.arange(len(req.phys_offsets))] * len(req.queues)):
                    assert isinstance(q, ConsumeQueue)
                    q.reserve(len(r))
                if len(req.key_hashes) and self.index is not None:
                    self.index.reserve(len(req.key_hashes))
        except DiskFullError as e:
            self.space.refused(e)
            raise self.space.error() from None

    def publish(self, end: int, store_timestamp: int) -> None:
        """The commitlog is whole and dispatched to ``end``, its last record stored at
        ``store_timestamp``: what a flush from now on covers, and the checkpoint's logics time.
        The one place these move (under the put lock, after the bytes and entries)."""
        self.commitlog.confirmed = (end, store_timestamp)
        self.dispatched_ts = store_timestamp

    def dispatchers_plain(self) -> bool:
        """Whether the dispatcher list is the store's own (the consume queues, then this store's
        index, if any): the compiled lanes write exactly those entries, nothing else may listen."""
        d = self.dispatchers
        return type(d[0]) is ConsumeQueueDispatcher and (
            len(d) == 1 or (len(d) == 2 and type(d[1]) is IndexDispatcher and d[1].index is self.index)
        )

    def dispatch(self, req: DispatchRequest) -> None:
        """Entries of records already in the commitlog, by every dispatcher in order."""
        for d in self.dispatchers:
            d.dispatch(req)

    # ------------------------------------------------------------------ door 1: put

    def put(self, req: PutRequest) -> PutMessageResult:
        """Write the records of ``req`` the put hooks did not refuse; the result covers every record
        (a refused one: offsets -1, its reason). A user's MessageBatch with a refusal is refused whole."""
        refused = req.refused
        n = len(req)
        if refused is None:
            return self._write_one(req) if n == 1 else self._write(req)
        if req.user_batch:  # all or nothing: every record shares the first refusal
            refused[:] = refused[refused != 0][0]
        keep = np.flatnonzero(refused == 0)
        result = self._write(req.subset(keep)).spread(n, keep) if len(keep) else PutMessageResult.nothing_stored(n)
        result.refused, result.refusals = refused, req.refusals or ()
        return result

    def put_plain(self, req: PutRequest) -> PutMessageResult | None:
        """The plain lane: ``req`` (several records of one queue, hooks that pass it untouched) in
        one compiled pass, or None with nothing written (the caller then runs the hooks and ``put``)."""
        with self.put_lock:
            self._closed_check()
            taken = plain_put.take(self, req)
            if taken is None:
                return None
            phys, qoff, ts = taken
            self.publish(int(phys[0]) + len(req.batch.buf), ts)
        n = len(req)
        return PutMessageResult(
            PutStatus.PUT_OK,
            int(phys[0]),
            len(req.batch.buf),
            qoff,
            n,
            ts,
            phys,
            np.arange(qoff, qoff + n, dtype=np.int64),
        )

    def put_frame(
        self, topic: str, qid: int, payload: memoryview, arrays: np.ndarray, size: int, phys: np.ndarray
    ) -> tuple[int, int] | None:
        """The plain lane for a SEND_BATCH frame still in its request ring (``plain_put.take_frame``):
        (first queue offset, store timestamp) with ``phys`` filled, or None with nothing written."""
        with self.put_lock:
            self._closed_check()
            taken = plain_put.take_frame(self, topic, qid, payload, arrays, size, phys)
            if taken is None:
                return None
            _, qoff, ts = taken
            self.publish(int(phys[0]) + size, ts)
        return qoff, ts

    def _write(self, req: PutRequest) -> PutMessageResult:
        """Append and dispatch records that all passed the hooks: one record without numpy, one
        queue without grouping, else grouped by queue (ranks within each queue, in log order)."""
        b = req.batch
        n = len(b.starts)
        if n == 1:
            return self._write_one(req)
        sizes, header = measure(req)
        missing = np.flatnonzero(header[:, 2] == 0)
        missing_crc = missing if len(missing) else None
        enters = (header[:, 3] & HIDDEN_TX_BIT) == 0
        # Freed before the write: kept alive through the append, the header (n x 5 int64) moved
        # glibc's heap top so that every large put paid fresh page faults (measured: 1.7x the
        # broker's cost of a 2,048-record batch).
        req.header = None
        del header
        q = req.queue_ids
        one_queue = len(req.topics) == 1 and (isinstance(q, int) or bool((q == q[0]).all()))
        if one_queue and enters.all():
            topic, qid = req.topics[0], int(q if isinstance(q, int) else q[0])
            with self.put_lock:
                self._closed_check()
                cq = self.queue(topic, qid)
                self.reserve(((cq, n),), _span(b.starts, sizes), sizes, len(b.key_hashes))
                qoff = cq.max_offset
                ts = self.commitlog.next_store_timestamp()
                res = self.commitlog.append_batch(b.buf, b.starts, sizes, qoff, qid, ts, missing_crc)
                phys = _per_record(res.phys_offsets)
                self.dispatch(
                    DispatchRequest([cq], None, [qoff], phys, sizes, b.tags_codes, ts, b.key_hashes, b.key_records)
                )
                self.publish(res.wrote_offset + res.wrote_bytes, ts)
            return PutMessageResult(
                PutStatus.PUT_OK,
                res.wrote_offset,
                res.wrote_bytes,
                qoff,
                n,
                ts,
                phys,
                np.arange(qoff, qoff + n, dtype=np.int64),
            )
        if multi_put.ENABLED:
            with self.put_lock:
                self._closed_check()
                taken = multi_put.take(self, req, sizes, missing_crc, enters)
                if taken is not None:
                    res, qoffs, slots, ts = taken
                    self.publish(res.wrote_offset + res.wrote_bytes, ts)
            if taken is not None:
                phys = _per_record(res.phys_offsets)
                return PutMessageResult(
                    PutStatus.PUT_OK,
                    res.wrote_offset,
                    res.wrote_bytes,
                    int(qoffs[0]),
                    n,
                    ts,
                    phys,
                    qoffs,
                    queue_rows=slots,
                )
        tid, qids = req.topic_ids(), req.queue_id_array()
        ent = np.flatnonzero(enters)
        queues, gid, rank, rows = group_by_queue(tid, qids, ent)
        groups = [(req.topics[t], q) for t, q in queues]
        with self.put_lock:
            self._closed_check()
            cqs = [self.queue(topic, qid) for topic, qid in groups]
            self.reserve(zip(cqs, map(len, rows)), _span(b.starts, sizes), sizes, len(b.key_hashes))
            bases = np.fromiter((cq.max_offset for cq in cqs), np.int64, len(cqs))
            qoffs = np.zeros(n, np.int64)
            qoffs[ent] = bases[gid] + rank
            ts = self.commitlog.next_store_timestamp()
            res = self.commitlog.append_batch(b.buf, b.starts, sizes, qoffs, qids, ts, missing_crc)
            phys = _per_record(res.phys_offsets)
            self.dispatch(
                DispatchRequest(cqs, rows, bases.tolist(), phys, sizes, b.tags_codes, ts, b.key_hashes, b.key_records)
            )
            self.publish(res.wrote_offset + res.wrote_bytes, ts)
        return PutMessageResult(PutStatus.PUT_OK, res.wrote_offset, res.wrote_bytes, int(qoffs[0]), n, ts, phys, qoffs)

    def _write_one(self, req: PutRequest) -> PutMessageResult:
        b = req.batch
        record = b.buf
        size = len(record)
        # a one-record subset of a put of several topics keeps the put's topic table
        topic = req.topics[0] if req.topic_idx is None else req.topics[int(req.topic_idx[0])]
        qid = int(req.queue_ids if isinstance(req.queue_ids, int) else req.queue_ids[0])
        enters = not _I32.unpack_from(record, fmt.OFF_SYSFLAG)[0] & HIDDEN_TX_BIT
        with self.put_lock:
            self._closed_check()
            cq = self.queues.get((topic, qid)) or self.queue(topic, qid)
            self.reserve(((cq, 1),) if enters else (), size, size, len(b.key_hashes))
            qoff = cq.max_offset if enters else 0
            ts = self.commitlog.next_store_timestamp()
            phys = self.commitlog.append(record, qoff, qid, ts)
            tags_code, keys = int(b.tags_codes[0]), b.key_hashes
            for d in self.dispatchers:
                d.dispatch_one(cq if enters else None, qoff, phys, size, tags_code, keys, ts)
            self.publish(phys + size, ts)
        return PutMessageResult(PutStatus.PUT_OK, phys, size, qoff, 1, ts)

    # ------------------------------------------------------------------ door 2: raw bytes (the replica)

    def write_raw(self, mf: MappedFile, pos: int, data: np.ndarray, wrote_to: int) -> None:
        """Bytes of the master's commitlog into segment ``mf`` at ``pos`` (blocks reserved by
        ``reserve_raw``); the segment's written end moves to ``wrote_to``. Published with the
        dispatch of the records they complete (``publish``)."""
        if len(data):
            if self.commitlog.write_through:
                mf.write(data.data, pos)
            else:
                mf.array[pos : pos + len(data)] = data
        mf.wrote_position = max(mf.wrote_position, wrote_to)
        if mf.wrote_position >= mf.warm_mark:
            self.allocator.keep_ahead(mf)

    # ------------------------------------------------------------------ door 3: recovery

    def redispatch(self, start: int, only: set[QueueKey] | None = None) -> set[QueueKey]:
        """Dispatch the records from ``start`` (only those of the queues ``only``); returns the
        queues that had a gap: a record past the queue's end although the log before ``start``
        is dispatched, so the queue lost entries (from the log's min offset a gap is normal:
        cleanup removed the records before it)."""
        commitlog = self.commitlog
        count = 0
        gaps: set[QueueKey] = set()
        check = start > commitlog.min_offset
        for req in requests_from_log(recovery.decoded_records(commitlog, start, only), self.queue):
            if check and req.queues:
                cq = req.queues[0]
                assert isinstance(cq, ConsumeQueue)
                if req.first_queue_offsets[0] > cq.max_offset:
                    gaps.add((cq.topic, cq.queue_id))
            self.dispatch(req)
            self.dispatched_ts = req.store_timestamp
            count += len(req.phys_offsets)
        if count:
            log.info("re-dispatched %d records from commitlog offset %d", count, start)
        return gaps


def _span(starts: np.ndarray, sizes: np.ndarray) -> int:
    """Bytes from the first record's start to the last one's end: the records' total, or more
    (records are in order); three scalar reads instead of a sum over the batch."""
    return int(starts[-1]) - int(starts[0]) + int(sizes[-1])


def _per_record(phys: np.ndarray | None) -> np.ndarray:
    """A batch append's per-record offsets (``AppendResult`` leaves them None only for one record)."""
    assert phys is not None
    return phys
