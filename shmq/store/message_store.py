"""MessageStore: the facade the broker owns (RocketMQ's DefaultMessageStore).

It opens a store directory (lock, abort marker, checkpoint), recovers it (shmq.store.startup), and serves puts,
reads, queries and cleanup; flush and cleanup run in background threads.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import struct
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shmq.codec import record as fmt
from shmq.config import SYNC_FLUSH, BrokerConfig
from shmq.errors import DiskFullError, StoreClosedError
from shmq.store import files, multi_put, plain_put, queue_table, startup
from shmq.store.checkpoint import StoreCheckpoint
from shmq.store.cleanup import CleanupService
from shmq.store.commitlog import CommitLog
from shmq.store.consume_queue import ConsumeQueue, flush_queues, reserve_each
from shmq.store.dispatch import ConsumeQueueDispatcher, Dispatcher, DispatchRequest, group_by_queue
from shmq.store.flush import FlushConsumeQueueService, FlushRealTimeService, GroupCommitService, ServiceThread
from shmq.store.hooks import PutHook, PutRequest, QueueCheck, RecordCheck, measure
from shmq.store.index_file import IndexService
from shmq.store.lookup import MessageLookup
from shmq.store.mapped_file import AllocateMappedFileService
from shmq.store.queue_slots import QueueSlots
from shmq.store.space import DiskSpace

log = logging.getLogger(__name__)
_I32 = struct.Struct(">i")
_HIDDEN_TX_BIT = 0x4  # SYSFLAG bit of prepared and rolled-back transactions: no consume-queue entry


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


@dataclass(slots=True)
class PutMessageResult:
    """Where the records of a put went: per record its physical and queue offset (-1 for a
    refused one), and for the first stored one as plain ints."""

    status: PutStatus
    wrote_offset: int  # physical offset of the first stored record
    wrote_bytes: int  # from the first stored record to the end of the last
    queue_offset: int  # queue offset of the first stored record
    msg_num: int  # records stored
    store_timestamp: int
    _phys: np.ndarray | None = None  # records may straddle a segment end: not wrote_offset + sizes
    _qoffs: np.ndarray | None = None  # None for a single stored record: made when asked for
    refused: np.ndarray | None = None  # per record: 0 stored, k > 0 refused for refusals[k - 1]; None: all stored
    refusals: Sequence[tuple[int, str]] = ()  # (response code, reason)

    @property
    def end_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes

    @property
    def phys_offsets(self) -> np.ndarray:
        if self._phys is None:
            self._phys = np.array([self.wrote_offset], np.int64)
        return self._phys

    @property
    def queue_offsets(self) -> np.ndarray:
        if self._qoffs is None:
            self._qoffs = np.array([self.queue_offset], np.int64)
        return self._qoffs

    def spread(self, n: int, rows: np.ndarray) -> PutMessageResult:
        """This result of the records ``rows`` of a put of ``n`` as the result of the whole put."""
        phys, qoffs = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        phys[rows] = self.phys_offsets
        qoffs[rows] = self.queue_offsets
        self._phys, self._qoffs = phys, qoffs
        return self

    def reason(self, i: int) -> tuple[int, str]:
        """(response code, reason) of refused record ``i``."""
        assert self.refused is not None and self.refused[i]
        return self.refusals[int(self.refused[i]) - 1]


class MessageStore(MessageLookup):
    """A store directory: commitlog, consume queues, index, checkpoint, config files."""

    checkpoint: StoreCheckpoint  # from start() on

    def __init__(self, store_dir: str, config: BrokerConfig | Mapping[str, Any] | str | None = None) -> None:
        self.store_dir = os.path.abspath(store_dir)
        self.config = BrokerConfig.load(config)
        self._lock_fd = -1
        self.running = False
        self.space = DiskSpace(self.store_dir, self.config.disk_space_warning_level_ratio)
        # set when recovery could not re-dispatch for lack of disk: done before the next write
        self._redispatch_from: int | None = None
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._queues_lock = threading.Lock()
        self.queue_slots = QueueSlots()  # the queues' hot numbers, for the put over many queues (multi_put)
        self._dispatched_ts = 0  # store ts of the last record dispatched (for the checkpoint)
        self.queue_table = queue_table.QueueTableWriter(self.store_dir)
        sync_flush = self.config.flush_disk_type == SYNC_FLUSH
        self.allocator = AllocateMappedFileService(
            self.config.warm_mapped_file_enable, sync_warm=sync_flush, ahead=self.config.warm_ahead_size
        )
        self.commitlog = CommitLog(
            self.store_dir,
            self.config.mapped_file_size_commit_log,
            self.config.store_host,
            self.allocator,
            write_through=sync_flush,
        )
        self.commitlog.queue.before_new_file = self.space.check_new_file
        self.index: IndexService | None = None
        self._services: list[ServiceThread] = []
        self.put_hooks: list[PutHook] = [RecordCheck(self.config), QueueCheck()]
        self.dispatchers: list[Dispatcher] = [ConsumeQueueDispatcher()]
        self.group_commit: GroupCommitService | None = None
        self.clean_service: CleanupService | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def abort_path(self) -> str:
        return os.path.join(self.store_dir, "abort")

    def start(self) -> MessageStore:
        """Lock the directory, recover it, and start the flush services."""
        files.prepare_root(self.store_dir, self.config.group_id())
        self._lock_fd = files.lock_store(self.store_dir)
        try:
            startup.load_and_recover(self)
        except BaseException:
            files.unlock_store(self._lock_fd)
            self._lock_fd = -1
            raise
        os.close(files.open_file(self.abort_path)[0])
        self._start_services()
        self.running = True
        return self

    def _start_services(self) -> None:
        cfg = self.config
        if cfg.flush_disk_type == SYNC_FLUSH:
            self.group_commit = GroupCommitService(self.commitlog.flush, self._on_commitlog_flushed)
            self._services.append(self.group_commit)
        else:
            self._services.append(
                FlushRealTimeService(
                    self.commitlog.flush,
                    self._on_commitlog_flushed,
                    cfg.flush_interval_commit_log,
                    cfg.flush_commit_log_least_pages,
                    cfg.flush_commit_log_thorough_interval,
                )
            )
        self._services.append(
            FlushConsumeQueueService(
                self._flush_logics,
                cfg.flush_interval_consume_queue,
                cfg.flush_consume_queue_least_pages,
                cfg.flush_consume_queue_thorough_interval,
            )
        )
        self.clean_service = CleanupService(self)
        self._services.append(self.clean_service)
        for s in self._services:
            s.start()

    def _on_commitlog_flushed(self, offset: int, ts: int) -> None:
        if ts > self.checkpoint.physic_msg_timestamp:
            self.checkpoint.physic_msg_timestamp = ts

    def _flush_logics(self, least_pages: int = 0) -> None:
        """Flush consume queues and index; a thorough flush (least_pages 0) also writes the
        checkpoint, whose timestamps must only cover what is really on disk."""
        ts = self._dispatched_ts
        with self._queues_lock:
            queues = list(self._queues.values())
        flush_queues(queues, least_pages)
        if self.index is not None:
            self.index.flush()
        if least_pages:
            return
        if self.index is not None:
            self.checkpoint.index_msg_timestamp = max(self.checkpoint.index_msg_timestamp, ts)
        self.checkpoint.logics_msg_timestamp = max(self.checkpoint.logics_msg_timestamp, ts)
        # before the checkpoint: a queue created before the checkpoint's time is then in the table
        # (one created after it has all its records in what abnormal recovery re-dispatches)
        self.queue_table.write(queues)
        self.checkpoint.flush()

    def shutdown(self) -> None:
        """Flush everything, write the checkpoint, remove the abort marker, release the lock."""
        if not self.running:
            return
        with self.commitlog.put_lock:
            self.running = False  # from here on puts are refused
        for s in reversed(self._services):
            s.shutdown()  # outside the lock: cleanup and flush rounds take it
        self._services = []
        with self.commitlog.put_lock:
            self.allocator.shutdown()
            self.commitlog.flush(0)
            self._flush_logics()
            self.queue_table.write(self.consume_queues(), force=True)  # exact now: every queue's max offset
            for cq in self._queues.values():
                cq.close()
            if self.index is not None:
                self.index.close()
            self.commitlog.close()
            self.checkpoint.close()
        os.unlink(self.abort_path)
        files.unlock_store(self._lock_fd)
        self._lock_fd = -1

    def __enter__(self) -> MessageStore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ queues

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            with self._queues_lock:
                cq = self._queues.get((topic, queue_id))
                if cq is None:
                    cq = ConsumeQueue(self.store_dir, topic, queue_id, self.config.mapped_file_size_consume_queue)
                    cq.queue.before_new_file = self.space.check_new_file
                    self._queues[(topic, queue_id)] = cq
        return cq

    def consume_queues(self) -> list[ConsumeQueue]:
        with self._queues_lock:
            return list(self._queues.values())

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, qid in sorted(self._queues):
            out.setdefault(topic, []).append(qid)
        return out

    # ------------------------------------------------------------------ put

    @property
    def disk_full(self) -> bool:
        return self.space.full

    def _check_writable(self) -> None:
        """Refuse a put on a closed store or a full disk; while the disk is full, measure it again
        now and then (DiskSpace.recheck) so that writes resume by themselves."""
        if not self.running:
            raise StoreClosedError("the message store is shut down")
        self.space.recheck()
        if self.space.full:
            raise self.space.error()
        if self._redispatch_from is not None:
            with self.commitlog.put_lock:
                self._finish_recovery()

    def finish_recovery(self) -> None:
        """Complete a recovery cut short by a full disk, if space is back (each cleanup round
        calls it, so reads complete without waiting for a write)."""
        if self._redispatch_from is not None and self.running:
            with self.commitlog.put_lock:
                try:
                    self._finish_recovery()
                except DiskFullError:
                    pass  # still full: logged when it became so

    def _finish_recovery(self) -> None:
        """Re-dispatch what recovery could not for lack of disk (idempotent), before any new record."""
        start = self._redispatch_from
        if start is None:
            return
        try:
            startup.redispatch(self.commitlog, start, self._queue, self._dispatch)
        except DiskFullError as e:
            self.space.refused(e)
            raise self.space.error() from None
        self._redispatch_from = None
        log.warning("recovery finished: consume queues and index complete again")

    def _reserve(
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

    def put(self, req: PutRequest, wait_flush: bool = True) -> PutMessageResult:
        """The one put path: run the put hooks on the records, append those that pass with one
        commitlog write, run the dispatchers on them.

        A record a hook refuses fails alone (``result.refused``, ``result.refusals``); a user's
        MessageBatch fails whole. What fails the whole put raises: a closed store or full disk
        (StoreClosedError, DiskFullError), record starts that do not fit the buffer
        (CorruptRecordError). With SYNC_FLUSH the call returns once the records are on disk,
        unless ``wait_flush`` is False (the broker then waits on ``group_commit`` itself).
        """
        if not self.running or self.space.full or self._redispatch_from is not None:
            self._check_writable()
        b = req.batch
        if not _private(b.buf):  # the hooks check, and the commitlog takes, one copy nobody can change
            req.batch = b = dataclasses.replace(b, buf=bytes(b.buf))
        n = len(b.starts)
        if n > 1 and plain_put.ENABLED:  # one compiled pass, or nothing written and the path below
            with self.commitlog.put_lock:
                if not self.running:
                    raise StoreClosedError("the message store is shut down")
                taken = plain_put.take(self, req)
            if taken is not None:
                phys, qoff, ts = taken
                result = PutMessageResult(
                    PutStatus.PUT_OK,
                    int(phys[0]),
                    len(b.buf),
                    qoff,
                    n,
                    ts,
                    phys,
                    np.arange(qoff, qoff + n, dtype=np.int64),
                )
                return self._await_flush(result) if wait_flush else result
        if n != 1:
            if n == 0:
                raise ValueError("empty put")
            if (req.topic_idx is not None and len(req.topic_idx) != n) or (
                not isinstance(req.queue_ids, int) and len(req.queue_ids) != n
            ):
                raise ValueError(f"{n} records but per-record topics or queue ids of another length")
            src_len, starts = len(b.buf), b.starts
            if (
                src_len < fmt.FIXED_OVERHEAD * n
                or starts[0] != 0
                or (starts[1:] <= starts[:-1]).any()
                or starts[-1] > src_len - fmt.FIXED_OVERHEAD
            ):
                raise fmt.CorruptRecordError("record starts do not fit the buffer")
        for hook in self.put_hooks:
            hook.before_put(req)
        refused = req.refused
        if refused is None:
            result = self._write_one(req) if n == 1 else self._write(req)
        else:
            if req.user_batch:  # all or nothing: every record shares the first refusal
                refused[:] = refused[refused != 0][0]
            keep = np.flatnonzero(refused == 0)
            if len(keep):
                result = self._write(req.subset(keep)).spread(n, keep)
            else:
                result = PutMessageResult(
                    PutStatus.PUT_OK, -1, 0, -1, 0, 0, np.full(n, -1, np.int64), np.full(n, -1, np.int64)
                )
            result.refused, result.refusals = refused, req.refusals or ()
        return self._await_flush(result) if wait_flush and result.msg_num else result

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
        enters = (header[:, 3] & _HIDDEN_TX_BIT) == 0
        # Freed before the write: kept alive through the append, the header (n x 5 int64) moved
        # glibc's heap top so that every large put paid fresh page faults (measured: 1.7x the
        # broker's cost of a 2,048-record batch).
        req.header = None
        del header
        q = req.queue_ids
        one_queue = len(req.topics) == 1 and (isinstance(q, int) or bool((q == q[0]).all()))
        if one_queue and enters.all():
            topic, qid = req.topics[0], int(q if isinstance(q, int) else q[0])
            with self.commitlog.put_lock:
                if not self.running:
                    raise StoreClosedError("the message store is shut down")
                cq = self._queue(topic, qid)
                self._reserve(((cq, n),), _span(b.starts, sizes), sizes, len(b.key_hashes))
                qoff = cq.max_offset
                ts = self.commitlog.next_store_timestamp()
                res = self.commitlog.append_batch(b.buf, b.starts, sizes, qoff, qid, ts, missing_crc)
                phys = _per_record(res.phys_offsets)
                self._dispatch(
                    DispatchRequest([cq], None, [qoff], phys, sizes, b.tags_codes, ts, b.key_hashes, b.key_records)
                )
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
        taken = multi_put.take(self, req, sizes, missing_crc, enters) if multi_put.ENABLED else None
        if taken is not None:
            res, qoffs, ts = taken
            phys = _per_record(res.phys_offsets)
            return PutMessageResult(PutStatus.PUT_OK, res.wrote_offset, res.wrote_bytes, int(qoffs[0]), n, ts, phys, qoffs)
        tid, qids = req.topic_ids(), req.queue_id_array()
        ent = np.flatnonzero(enters)
        queues, gid, rank, rows = group_by_queue(tid, qids, ent)
        groups = [(req.topics[t], q) for t, q in queues]
        with self.commitlog.put_lock:
            if not self.running:
                raise StoreClosedError("the message store is shut down")
            cqs = [self._queue(topic, qid) for topic, qid in groups]
            self._reserve(zip(cqs, map(len, rows)), _span(b.starts, sizes), sizes, len(b.key_hashes))
            bases = np.fromiter((cq.max_offset for cq in cqs), np.int64, len(cqs))
            qoffs = np.zeros(n, np.int64)
            qoffs[ent] = bases[gid] + rank
            ts = self.commitlog.next_store_timestamp()
            res = self.commitlog.append_batch(b.buf, b.starts, sizes, qoffs, qids, ts, missing_crc)
            phys = _per_record(res.phys_offsets)
            self._dispatch(
                DispatchRequest(cqs, rows, bases.tolist(), phys, sizes, b.tags_codes, ts, b.key_hashes, b.key_records)
            )
        return PutMessageResult(PutStatus.PUT_OK, res.wrote_offset, res.wrote_bytes, int(qoffs[0]), n, ts, phys, qoffs)

    def _write_one(self, req: PutRequest) -> PutMessageResult:
        b = req.batch
        record = b.buf
        size = len(record)
        # a one-record subset of a put of several topics keeps the put's topic table
        topic = req.topics[0] if req.topic_idx is None else req.topics[int(req.topic_idx[0])]
        qid = int(req.queue_ids if isinstance(req.queue_ids, int) else req.queue_ids[0])
        enters = not _I32.unpack_from(record, fmt.OFF_SYSFLAG)[0] & _HIDDEN_TX_BIT
        with self.commitlog.put_lock:
            if not self.running:
                raise StoreClosedError("the message store is shut down")
            cq = self._queues.get((topic, qid)) or self._queue(topic, qid)
            self._reserve(((cq, 1),) if enters else (), size, size, len(b.key_hashes))
            qoff = cq.max_offset if enters else 0
            ts = self.commitlog.next_store_timestamp()
            phys = self.commitlog.append(record, qoff, qid, ts)
            tags_code, keys = int(b.tags_codes[0]), b.key_hashes
            for d in self.dispatchers:
                d.dispatch_one(cq if enters else None, qoff, phys, size, tags_code, keys, ts)
            self._dispatched_ts = ts
        return PutMessageResult(PutStatus.PUT_OK, phys, size, qoff, 1, ts)

    def _dispatch(self, req: DispatchRequest) -> None:
        for d in self.dispatchers:
            d.dispatch(req)
        self._dispatched_ts = req.store_timestamp

    def _await_flush(self, result: PutMessageResult) -> PutMessageResult:
        if self.group_commit is None:
            return result
        fut = self.group_commit.request(result.end_offset)
        try:
            ok = fut.result(self.config.sync_flush_timeout / 1000)
        except TimeoutError:
            ok = False
        if not ok:
            result.status = PutStatus.FLUSH_DISK_TIMEOUT
        return result


def _private(buf: object) -> bool:
    """Whether ``buf`` is immutable bytes (or a view of them): a view of shared memory (a client's
    request ring) or of any writable buffer could change between the put hooks' checks and the
    commitlog copy, and the store would keep what it never checked."""
    return type(buf) is bytes or (type(buf) is memoryview and type(buf.obj) is bytes)


def _span(starts: np.ndarray, sizes: np.ndarray) -> int:
    """Bytes from the first record's start to the last one's end: the records' total, or more
    (records are in order); three scalar reads instead of a sum over the batch."""
    return int(starts[-1]) - int(starts[0]) + int(sizes[-1])


def _per_record(phys: np.ndarray | None) -> np.ndarray:
    """A batch append's per-record offsets (``AppendResult`` leaves them None only for one record)."""
    assert phys is not None
    return phys
