"""MessageStore: the facade the broker owns (RocketMQ's DefaultMessageStore).

It opens a store directory (lock, abort marker, checkpoint), recovers it, and serves puts,
reads, queries and cleanup; flush and cleanup run in background threads.
"""
from __future__ import annotations

import enum
import fcntl
import logging
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from shmq.config import SYNC_FLUSH, BrokerConfig
from shmq.errors import (BadTopicError, DiskFullError, MessageTooLargeError, StoreClosedError,
                         StoreLockedError)
from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.store import files, recovery
from shmq.store.checkpoint import StoreCheckpoint
from shmq.store.commitlog import CommitLog
from shmq.store.consume_queue import BLANK_SIZE, ConsumeQueue
from shmq.store.dispatch import DispatchRequest, dispatch, dispatch_queues, requests_from_log
from shmq.store.flush import FlushConsumeQueueService, FlushRealTimeService, GroupCommitService
from shmq.store.index_file import IndexService
from shmq.store.mapped_file import AllocateMappedFileService

log = logging.getLogger(__name__)
_I32 = struct.Struct(">i")
MAX_QUEUE_ID = 65535


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"


@dataclass(slots=True)
class PutMessageResult:
    status: PutStatus
    wrote_offset: int  # physical offset of the (first) record
    wrote_bytes: int
    queue_offset: int  # queue offset of the (first) record
    msg_num: int
    store_timestamp: int
    phys_offsets: np.ndarray | None = None  # per record, for a batch (records may straddle a segment end)
    queue_offsets: np.ndarray | None = None  # per record, for records of several queues (put_messages_multi)

    @property
    def end_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes


@dataclass(slots=True)
class GetMessageResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[fmt.StoredRecord] = field(default_factory=list)


class MessageStore:
    """A store directory: commitlog, consume queues, index, checkpoint, config files."""

    def __init__(self, store_dir: str, config: BrokerConfig | Mapping[str, Any] | str | None = None) -> None:
        self.store_dir = os.path.abspath(store_dir)
        self.config = BrokerConfig.load(config)
        self._lock_fd = -1
        self.running = False
        self.disk_full = False
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._queues_lock = threading.Lock()
        self._valid_topics: set[str] = set()
        self._dispatched_ts = 0  # store ts of the last record dispatched (for the checkpoint)
        sync_flush = self.config.flush_disk_type == SYNC_FLUSH
        self.allocator = AllocateMappedFileService(self.config.warm_mapped_file_enable, sync_warm=sync_flush,
                                                   ahead=self.config.warm_ahead_size)
        self.commitlog = CommitLog(self.store_dir, self.config.mapped_file_size_commit_log,
                                   self.config.store_host, self.allocator, write_through=sync_flush)
        self.index: IndexService | None = None
        self.checkpoint: StoreCheckpoint | None = None
        self._services: list = []
        self.group_commit: GroupCommitService | None = None
        self.clean_service = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def abort_path(self) -> str:
        return os.path.join(self.store_dir, "abort")

    def start(self) -> "MessageStore":
        """Lock the directory, recover it, and start the flush services."""
        files.prepare_root(self.store_dir, self.config.group_id())
        self._lock()
        try:
            self._load_and_recover()
        except BaseException:
            self._unlock()
            raise
        os.close(files.open_file(self.abort_path)[0])
        self._start_services()
        self.running = True
        return self

    def _lock(self) -> None:
        self._lock_fd = files.open_file(os.path.join(self.store_dir, "lock"))[0]
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise StoreLockedError(f"store {self.store_dir} is already open by another broker (lock held)") from None
        os.ftruncate(self._lock_fd, 0)
        os.write(self._lock_fd, f"{os.getpid()}\n".encode())

    def _unlock(self) -> None:
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _load_and_recover(self) -> None:
        cfg = self.config
        abnormal = os.path.exists(self.abort_path)
        cq_dir = os.path.join(self.store_dir, "consumequeue")
        index_dir = os.path.join(self.store_dir, "index")
        cq_lost = not os.path.isdir(cq_dir)
        index_lost = not os.path.isdir(index_dir)
        self.checkpoint = StoreCheckpoint(os.path.join(self.store_dir, "checkpoint"))
        self.commitlog.queue.load()
        self._load_consume_queues(cq_dir)
        if cfg.message_index_enable:
            self.index = IndexService(index_dir, cfg.max_hash_slot_num, cfg.max_index_num)
        end = recovery.recover_commitlog(self.commitlog, abnormal,
                                         self.checkpoint.min_timestamp(self.index is not None))
        for cq in self._queues.values():
            cq.recover()
            cq.truncate_dirty(end)
        if self.index is not None:
            self.index.truncate(end)
        start = self._redispatch_start(abnormal, cq_lost or (self.index is not None and index_lost))
        self._redispatch(start)
        for cq in self._queues.values():
            cq.delete_expired(self.commitlog.min_offset)

    def _load_consume_queues(self, cq_dir: str) -> None:
        if not os.path.isdir(cq_dir):
            return
        for topic in sorted(os.listdir(cq_dir)):
            tdir = os.path.join(cq_dir, topic)
            if not os.path.isdir(tdir) or not fmt.TOPIC_PATTERN.match(topic):
                continue
            for qid in sorted(os.listdir(tdir)):
                if qid.isdigit():
                    cq = ConsumeQueue(self.store_dir, topic, int(qid), self.config.mapped_file_size_consume_queue)
                    cq.load()
                    self._queues[(topic, int(qid))] = cq

    def _redispatch_start(self, abnormal: bool, rebuild: bool) -> int:
        """Where re-dispatch starts: everything for a lost folder, the checkpoint after a crash."""
        if rebuild or not self.commitlog.queue.files:
            return self.commitlog.min_offset
        if abnormal:
            i = recovery.abnormal_start_file(self.commitlog, self.checkpoint.min_timestamp(self.index is not None))
            return self.commitlog.queue.files[i].file_from_offset
        # clean shutdown: dispatch is synchronous and in log order, so everything before the
        # most advanced queue's last entry is dispatched (RocketMQ's reput offset likewise)
        ends = [cq.max_phys_end for cq in self._queues.values() if cq.max_phys_end >= 0]
        if self.index is not None and self.index.end_phys_offset >= 0:
            ends.append(self.index.end_phys_offset + 1)
        return max(ends) if ends else self.commitlog.min_offset

    def _redispatch(self, start: int) -> None:
        count = 0
        for req in requests_from_log(recovery.decoded_records(self.commitlog, start)):
            dispatch(req, self._queue(req.topic, req.queue_id) if req.enters_consume_queue else None, self.index)
            self._dispatched_ts = req.store_timestamp
            count += len(req.phys_offsets)
        if count:
            log.info("re-dispatched %d records from commitlog offset %d", count, start)

    def _start_services(self) -> None:
        cfg = self.config
        if cfg.flush_disk_type == SYNC_FLUSH:
            self.group_commit = GroupCommitService(self.commitlog.flush, self._on_commitlog_flushed)
            self._services.append(self.group_commit)
        else:
            self._services.append(FlushRealTimeService(
                self.commitlog.flush, self._on_commitlog_flushed, cfg.flush_interval_commit_log,
                cfg.flush_commit_log_least_pages, cfg.flush_commit_log_thorough_interval))
        self._services.append(FlushConsumeQueueService(
            self._flush_logics, cfg.flush_interval_consume_queue, cfg.flush_consume_queue_least_pages,
            cfg.flush_consume_queue_thorough_interval))
        from shmq.store.cleanup import CleanupService
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
        for cq in queues:
            cq.flush(least_pages)
        if self.index is not None:
            self.index.flush()
        if least_pages:
            return
        if self.index is not None:
            self.checkpoint.index_msg_timestamp = max(self.checkpoint.index_msg_timestamp, ts)
        self.checkpoint.logics_msg_timestamp = max(self.checkpoint.logics_msg_timestamp, ts)
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
            for cq in self._queues.values():
                cq.close()
            if self.index is not None:
                self.index.close()
            self.commitlog.close()
            self.checkpoint.close()
        os.unlink(self.abort_path)
        self._unlock()

    def __enter__(self) -> "MessageStore":
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
                    self._queues[(topic, queue_id)] = cq
        return cq

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def consume_queues(self) -> list[ConsumeQueue]:
        with self._queues_lock:
            return list(self._queues.values())

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, qid in sorted(self._queues):
            out.setdefault(topic, []).append(qid)
        return out

    # ------------------------------------------------------------------ put

    def _check_queue(self, topic: str, queue_id: int) -> None:
        """Topic names become folder names: only RocketMQ's characters; queue ids 0..65535."""
        if topic not in self._valid_topics:
            fmt.check_topic(topic)
            self._valid_topics.add(topic)
        if not 0 <= queue_id <= MAX_QUEUE_ID:
            raise ValueError(f"queue id {queue_id} is outside 0..{MAX_QUEUE_ID}")

    def _check_writable(self) -> None:
        if not self.running:
            raise StoreClosedError("the message store is shut down")
        if self.disk_full:
            raise DiskFullError(f"disk of {self.store_dir} is over {self.config.disk_space_warning_level_ratio:.0%} "
                                "used; writes are refused until cleanup frees space")

    def put_message(self, topic: str, queue_id: int, record: bytes | memoryview, tags_code: int | None = None,
                    key_hashes: list[int] | None = None, wait_flush: bool = True) -> PutMessageResult:
        """Append one encoded record (see format.encode_message) to `topic`/`queue_id`.

        `tags_code` and `key_hashes` are what the producer precomputed; None means decode the
        record to find them. With SYNC_FLUSH the call returns once the record is on disk, unless
        `wait_flush` is False (the broker then waits on `group_commit` itself).
        """
        self._check_writable()
        self._check_queue(topic, queue_id)
        size = len(record)
        sysflag = self._validate_record(topic, record, size)
        if tags_code is None or key_hashes is None:
            rec = fmt.decode_record(record)
            tags_code = fmt.tags_code(rec.tags) if tags_code is None else tags_code
            if key_hashes is None:
                key_hashes = fmt.record_key_hashes(topic, rec.uniq_key, rec.properties.get(fmt.PROPERTY_KEYS))
        enters = fmt.enters_consume_queue(sysflag)
        with self.commitlog.put_lock:
            if not self.running:
                raise StoreClosedError("the message store is shut down")
            cq = self._queue(topic, queue_id)
            qoff = cq.max_offset if enters else 0
            ts = self.commitlog.next_store_timestamp()
            phys = self.commitlog.append(record, qoff, queue_id, ts)
            if enters:
                cq.put(phys, size, tags_code, qoff)
            if key_hashes and self.index is not None:
                self.index.put(key_hashes, phys, ts)
            self._dispatched_ts = ts
        result = PutMessageResult(PutStatus.PUT_OK, phys, size, qoff, 1, ts)
        return self._await_flush(result) if wait_flush else result

    def put_messages(self, topic: str, queue_id: int, batch: fmt.EncodedBatch,
                     wait_flush: bool = True) -> PutMessageResult:
        """Append a batch of records of one topic to one queue (RocketMQ's MessageExtBatch)."""
        self._check_writable()
        self._check_queue(topic, queue_id)
        if len(batch) == 0:
            raise ValueError("empty batch")
        sizes, missing_crc = self._validate_batch([topic], None, batch)
        with self.commitlog.put_lock:
            if not self.running:
                raise StoreClosedError("the message store is shut down")
            cq = self._queue(topic, queue_id)
            qoff = cq.max_offset
            ts = self.commitlog.next_store_timestamp()
            res = self.commitlog.append_batch(batch.buf, batch.starts, sizes, qoff, queue_id, ts, missing_crc)
            dispatch(DispatchRequest(topic, queue_id, qoff, res.phys_offsets, sizes, batch.tags_codes, ts,
                                     batch.key_hashes, batch.key_records), cq, self.index)
            self._dispatched_ts = ts
        result = PutMessageResult(PutStatus.PUT_OK, res.wrote_offset, res.wrote_bytes, qoff, len(sizes), ts,
                                  res.phys_offsets)
        return self._await_flush(result) if wait_flush else result

    def put_messages_multi(self, topics: Sequence[str], queue_ids: Sequence[int], batch: fmt.EncodedBatch,
                           wait_flush: bool = True) -> PutMessageResult:
        """Append records of several topics and queues with one commitlog write: record i to
        ``topics[i]``/``queue_ids[i]``. For many topics each sent rarely, where one put per record
        cost ~35 us. ``result.queue_offsets`` and ``result.phys_offsets`` are per record; the
        records of one queue keep their order."""
        self._check_writable()
        n = len(batch)
        if n == 0:
            raise ValueError("empty batch")
        if len(topics) != n or len(queue_ids) != n:
            raise ValueError(f"{n} records but {len(topics)} topics and {len(queue_ids)} queue ids")
        groups: dict[tuple[str, int], int] = {}
        gid = np.fromiter((groups.setdefault(k, len(groups)) for k in zip(topics, queue_ids)), np.int64, n)
        names: dict[str, int] = {}
        for topic, qid in groups:
            self._check_queue(topic, qid)
            names.setdefault(topic, len(names))
        topic_ids = np.fromiter((names[t] for t in topics), np.int64, n)
        sizes, missing_crc = self._validate_batch(list(names), topic_ids, batch, per_record_limit=True)
        # rank of each record within its queue, in log order
        order = np.argsort(gid, kind="stable")
        counts = np.bincount(gid, minlength=len(groups))
        group_start = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.empty(n, np.int64)
        rank[order] = np.arange(n) - np.repeat(group_start, counts)
        ends = np.cumsum(counts).tolist()
        rows = [order[a:b] for a, b in zip([0, *ends[:-1]], ends)]  # np.split costs ~3x as much
        with self.commitlog.put_lock:
            if not self.running:
                raise StoreClosedError("the message store is shut down")
            cqs = [self._queue(topic, qid) for topic, qid in groups]
            bases = np.fromiter((cq.max_offset for cq in cqs), np.int64, len(cqs))
            qoffs = bases[gid] + rank
            ts = self.commitlog.next_store_timestamp()
            res = self.commitlog.append_batch(batch.buf, batch.starts, sizes, qoffs,
                                              np.asarray(queue_ids, np.int64), ts, missing_crc)
            dispatch_queues(cqs, rows, bases.tolist(), res.phys_offsets, sizes, batch.tags_codes, batch.key_hashes,
                            batch.key_records, ts, self.index)
            self._dispatched_ts = ts
        result = PutMessageResult(PutStatus.PUT_OK, res.wrote_offset, res.wrote_bytes, int(qoffs[0]), n, ts,
                                  res.phys_offsets, qoffs)
        return self._await_flush(result) if wait_flush else result

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

    def _validate_record(self, topic: str, record, size: int) -> int:
        """Check one encoded record before it touches the log; returns its SYSFLAG."""
        if size > self._max_record:
            raise MessageTooLargeError(f"record of {size} bytes is over maxMessageSize {self.config.max_message_size}")
        try:
            (total, magic, _, _, _, _, _, sysflag, _, _, _, _, _, _, body_len) = fmt.HEADER.unpack_from(record, 0)
        except struct.error:
            raise fmt.CorruptRecordError(f"record of {size} bytes is shorter than a header") from None
        if total != size or magic != fmt.MESSAGE_MAGIC or not 0 <= body_len <= size - fmt.FIXED_OVERHEAD:
            raise fmt.CorruptRecordError("record header does not match its length or magic")
        if body_len > self.config.max_message_size:
            raise MessageTooLargeError(f"message body of {body_len} bytes is over maxMessageSize "
                                       f"{self.config.max_message_size}")
        p = fmt.OFF_BODY + body_len
        topic_b = topic.encode("ascii", "replace")
        if record[p] != len(topic_b) or bytes(record[p + 1:p + 1 + len(topic_b)]) != topic_b:
            raise BadTopicError(f"record's topic does not match {topic!r}")
        if fmt.record_size(body_len, len(topic_b), _U16(record, p + 1 + len(topic_b))) != size:
            raise fmt.CorruptRecordError("record's field lengths do not add up to its TOTALSIZE")
        return sysflag

    @property
    def _max_record(self) -> int:
        """The largest record a message of maxMessageSize can make (header, topic, properties)."""
        return self.config.max_message_size + fmt.FIXED_OVERHEAD + fmt.MAX_TOPIC_LENGTH + fmt.MAX_PROPERTIES_LENGTH

    def _validate_batch(self, topics: list[str], topic_ids: np.ndarray | None, batch: fmt.EncodedBatch,
                        per_record_limit: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """Vectorised checks of every record's size, magic, topic and transaction flag; record i
        must be of ``topics[topic_ids[i]]`` (of ``topics[0]`` when ``topic_ids`` is None).

        A user's batch is held to maxMessageSize in total, as RocketMQ holds a MessageBatch;
        with ``per_record_limit`` (separate sends stored together) each record is held to the
        single-message limit instead.
        Returns the record sizes and the records whose BODYCRC the client left 0 (None if none).
        """
        src = np.frombuffer(batch.buf, np.uint8)
        if not per_record_limit and len(src) > self.config.max_message_size:
            raise MessageTooLargeError(f"batch of {len(src)} bytes is over maxMessageSize {self.config.max_message_size}; "
                                       "split it (a single message may be sent alone)")
        starts = batch.starts
        if len(src) < fmt.FIXED_OVERHEAD * len(starts) or starts[0] != 0 or (starts[1:] <= starts[:-1]).any() \
                or starts[-1] > len(src) - fmt.FIXED_OVERHEAD:
            raise fmt.CorruptRecordError("batch record starts do not fit the buffer")
        fields = fmt.gather_header_fields(src, starts)
        sizes, magic, crc, sysflag, body_len = fields.T
        if sizes[-1] != len(src) - starts[-1] or not np.array_equal(sizes[:-1], np.diff(starts)):
            raise fmt.CorruptRecordError("batch record sizes do not tile the buffer")
        if per_record_limit and sizes.max() > self._max_record:
            raise MessageTooLargeError(f"record of {int(sizes.max())} bytes is over maxMessageSize "
                                       f"{self.config.max_message_size}")
        if (magic != fmt.MESSAGE_MAGIC).any():
            raise fmt.CorruptRecordError("batch record with a bad magic code")
        if (sysflag & fmt.TRANSACTION_MASK).any():
            raise ValueError("transactional records cannot be sent in a batch")
        if (body_len < 0).any() or (body_len > sizes - fmt.FIXED_OVERHEAD).any():
            raise fmt.CorruptRecordError("batch record body length out of range")
        # Each record's topic field (length byte + name) against its topic's row of a table; the
        # window is as wide as the longest name and is masked past each record's own.
        names = [t.encode("ascii") for t in topics]
        width = max(map(len, names)) + 1
        table = np.zeros((len(names), width), np.uint8)
        for row, name in zip(table, names):
            row[0] = len(name)
            row[1:len(name) + 1] = np.frombuffer(name, np.uint8)
        ids = np.zeros(len(starts), np.int64) if topic_ids is None else topic_ids
        t = table[ids, 0].astype(np.int64)
        topic_pos = starts + fmt.OFF_BODY + body_len
        window = src[np.minimum(topic_pos[:, None] + np.arange(width), len(src) - 1)]
        if not ((window == table[ids]) | (np.arange(width) > t[:, None])).all():
            raise BadTopicError(f"batch records must be of their declared topic ({', '.join(map(repr, topics[:3]))})")
        props_at = np.minimum(topic_pos + t + 1, len(src) - 2)
        props_len = src[props_at].astype(np.int64) * 256 + src[props_at + 1]
        if not np.array_equal(fmt.FIXED_OVERHEAD + body_len + t + props_len, sizes):
            raise fmt.CorruptRecordError("batch record field lengths do not add up to TOTALSIZE")
        missing = np.flatnonzero(crc == 0)
        return sizes, (missing if len(missing) else None)

    # ------------------------------------------------------------------ read

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset stored at or after `timestamp` (ms); max offset if none."""
        cq = self.find_consume_queue(topic, queue_id)
        return cq.offset_for_timestamp(timestamp, self.commitlog.store_timestamp_at) if cq is not None else 0

    def get_message(self, topic: str, queue_id: int, offset: int, max_num: int = 32,
                    tags: set[str] | None = None) -> GetMessageResult:
        """Up to `max_num` messages from `offset`, filtered by tag (None = all), RocketMQ's statuses."""
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = cq.min_offset, cq.max_offset
        if hi == 0:
            return GetMessageResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetMessageResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetMessageResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetMessageResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        entries = cq.get_range(offset, max_num)
        next_offset = offset + len(entries)
        keep = entries["size"] != BLANK_SIZE
        if tags is not None:
            keep &= np.isin(entries["tags_code"], [fmt.tags_code(t) for t in tags])
        messages = []
        for e in entries[keep]:
            rec = self.commitlog.read(int(e["offset"]))
            if rec is not None and (tags is None or rec.tags in tags):
                messages.append(rec)
        status = GetStatus.FOUND if messages else GetStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, next_offset, lo, hi, messages)

    def look_message_by_offset(self, phys_offset: int) -> fmt.StoredRecord | None:
        """The record at a commitlog offset (from an offset msg id)."""
        if phys_offset < self.commitlog.min_offset:
            return None
        return self.commitlog.read(phys_offset)

    def view_message_by_id(self, offset_msg_id: str) -> fmt.StoredRecord | None:
        _, phys = ids.parse_offset_msg_id(offset_msg_id)
        return self.look_message_by_offset(phys)

    def query_message(self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0,
                      end_ts: int | None = None) -> list[fmt.StoredRecord]:
        """Messages of `topic` with `key` among their KEYS or as their UNIQ_KEY, newest first."""
        if self.index is None:
            return []
        end_ts = int(time.time() * 1000) + 1 if end_ts is None else end_ts
        out: list[fmt.StoredRecord] = []
        seen = set()
        for phys in self.index.query(topic, key, max_num * 2, begin_ts, end_ts):
            if phys in seen:
                continue
            seen.add(phys)
            rec = self.look_message_by_offset(phys)
            if rec is not None and rec.topic == topic and (key in rec.keys or rec.uniq_key == key):
                out.append(rec)
                if len(out) >= max_num:
                    break
        return out

    def query_by_uniq_key(self, topic: str, uniq_key: str) -> fmt.StoredRecord | None:
        found = self.query_message(topic, uniq_key, max_num=1)
        return found[0] if found else None


def _U16(buf, pos: int) -> int:
    return (buf[pos] << 8) | buf[pos + 1]
