"""MessageStore: the facade the broker owns (RocketMQ's DefaultMessageStore).

It opens a store directory (lock, abort marker, checkpoint), recovers it (shmq.store.startup), and serves puts,
reads, queries and cleanup; flush and cleanup run in background threads.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from shmq.codec import record as fmt
from shmq.config import SYNC_FLUSH, BrokerConfig
from shmq.store import files, queue_table, startup
from shmq.store.checkpoint import StoreCheckpoint
from shmq.store.cleanup import CleanupService
from shmq.store.commitlog import CommitLog
from shmq.store.consume_queue import ConsumeQueue, flush_queues
from shmq.store.flush import FlushConsumeQueueService, FlushRealTimeService, GroupCommitService, ServiceThread
from shmq.store.index_file import IndexService
from shmq.store.mapped_file import AllocateMappedFileService
from shmq.store.read.lookup import MessageLookup
from shmq.store.space import DiskSpace
from shmq.store.write import plain_put
from shmq.store.write.dispatch import Dispatcher
from shmq.store.write.hooks import PutHook, PutRequest, QueueCheck, RecordCheck
from shmq.store.write.log_writer import LogWriter, QueueKey
from shmq.store.write.result import PutMessageResult, PutStatus

log = logging.getLogger(__name__)
_MAX_PROBES = 4096  # put_frame's remembered hook questions (one per queue sent to)
_NO_RECORDS = fmt.EncodedBatch(b"", *(np.empty(0, np.int64) for _ in range(4)))


class MessageStore(MessageLookup):
    """A store directory: commitlog, consume queues, index, checkpoint, config files."""

    checkpoint: StoreCheckpoint  # from start() on

    def __init__(self, store_dir: str, config: BrokerConfig | Mapping[str, Any] | str | None = None) -> None:
        self.store_dir = os.path.abspath(store_dir)
        self.config = BrokerConfig.load(config)
        self._lock_fd = -1
        self.running = False
        self.space = DiskSpace(self.store_dir, self.config.disk_space_warning_level_ratio)
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
        self.writer = LogWriter(self.store_dir, self.config, self.commitlog, self.space, self.allocator)
        self._services: list[ServiceThread] = []
        self.put_hooks: list[PutHook] = [RecordCheck(self.config), QueueCheck()]
        self._probes: dict[QueueKey, PutRequest] = {}  # what put_frame asks the hooks, per queue
        self.group_commit: GroupCommitService | None = None
        self.clean_service: CleanupService | None = None

    @property
    def queues(self) -> Mapping[QueueKey, ConsumeQueue]:
        """The consume queues by (topic, queue id) (the writer's table: read it, never change it)."""
        return self.writer.queues

    @property
    def index(self) -> IndexService | None:
        return self.writer.index

    @property
    def dispatchers(self) -> list[Dispatcher]:
        """The writer's dispatcher list: a dispatcher inserted here sees every record from then on."""
        return self.writer.dispatchers

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
        self.running = self.writer.accepting = True
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
        ts = self.writer.dispatched_ts
        queues = self.writer.consume_queues()
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
            self.running = self.writer.accepting = False  # from here on puts are refused
        for s in reversed(self._services):
            s.shutdown()  # outside the lock: cleanup and flush rounds take it
        self._services = []
        with self.commitlog.put_lock:
            self.allocator.shutdown()
            self.commitlog.flush(0)
            self._flush_logics()
            self.queue_table.write(self.consume_queues(), force=True)  # exact now: every queue's max offset
            for cq in self.writer.consume_queues():
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

    def consume_queues(self) -> list[ConsumeQueue]:
        return self.writer.consume_queues()

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, qid in sorted(self.writer.queues):
            out.setdefault(topic, []).append(qid)
        return out

    # ------------------------------------------------------------------ put

    @property
    def disk_full(self) -> bool:
        return self.space.full

    def finish_recovery(self) -> None:
        """Complete a recovery cut short by a full disk, if space is back."""
        self.writer.finish_recovery()

    def put(self, req: PutRequest, wait_flush: bool = True) -> PutMessageResult:
        """The one put path: run the put hooks on the records, then the writer appends those
        that pass with one commitlog write and dispatches them. A put of several records that
        every hook would pass untouched takes the writer's plain lane (one compiled pass) instead.

        A record a hook refuses fails alone (``result.refused``, ``result.refusals``); a user's
        MessageBatch fails whole. What fails the whole put raises: a closed store or full disk
        (StoreClosedError, DiskFullError), record starts that do not fit the buffer
        (CorruptRecordError). With SYNC_FLUSH the call returns once the records are on disk,
        unless ``wait_flush`` is False (the broker then waits on ``group_commit`` itself).
        """
        writer = self.writer
        if not writer.writable():
            writer.check_writable()
        b = req.batch
        if not _private(b.buf):  # the hooks check, and the commitlog takes, one copy nobody can change
            req.batch = b = dataclasses.replace(b, buf=bytes(b.buf))
        n = len(b.starts)
        if n > 1 and plain_put.ENABLED and plain_put.lane_open(req, self.put_hooks):
            result = writer.put_plain(req)
            if result is not None:
                return self._await_flush(result) if wait_flush else result
        if n != 1:
            _check_shape(req, n)
        for hook in self.put_hooks:
            hook.before_put(req)
        result = writer.put(req)
        return self._await_flush(result) if wait_flush and result.msg_num else result

    def put_frame(
        self, topic: str, qid: int, payload: memoryview, arrays: np.ndarray, size: int, phys: np.ndarray
    ) -> tuple[int, int] | None:
        """The plain lane for a user's batch still in its SEND_BATCH frame (``payload``, the
        client's request ring; ``arrays``: its columns as ``send_batch_arrays`` copied and
        checked them; ``size`` bytes of records as its header says):
        (first queue offset, store timestamp) with each record's phys offset in ``phys``, the
        flush left to the caller; None with nothing written, whenever ``put`` of the decoded
        frame could do anything else than the plain lane does (a hook that may act, a store
        not writable, a new queue, a roll, a record the checks refuse, a bad frame)."""
        if not plain_put.FRAME_ENABLED or not self.writer.writable():
            return None
        probe = self._probes.get((topic, qid))
        if probe is None:
            if len(self._probes) >= _MAX_PROBES:
                self._probes.clear()
            probe = self._probes[(topic, qid)] = PutRequest(_NO_RECORDS, [topic], None, qid, user_batch=True)
        if not plain_put.lane_open(probe, self.put_hooks):  # the queue id's range and every hook
            return None
        return self.writer.put_frame(topic, qid, payload, arrays, size, phys)

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


def _check_shape(req: PutRequest, n: int) -> None:
    """Refuse a put of several records whose arrays disagree or whose starts do not fit the buffer."""
    if n == 0:
        raise ValueError("empty put")
    if (req.topic_idx is not None and len(req.topic_idx) != n) or (
        not isinstance(req.queue_ids, int) and len(req.queue_ids) != n
    ):
        raise ValueError(f"{n} records but per-record topics or queue ids of another length")
    src_len, starts = len(req.batch.buf), req.batch.starts
    if (
        src_len < fmt.FIXED_OVERHEAD * n
        or starts[0] != 0
        or (starts[1:] <= starts[:-1]).any()
        or starts[-1] > src_len - fmt.FIXED_OVERHEAD
    ):
        raise fmt.CorruptRecordError("record starts do not fit the buffer")
