"""ReplicaAppender: a replica's one write path into its store (RocketMQ's slave side: HAClient
appends the master's commitlog bytes, the reput service dispatches them).

The bytes are the master's commitlog, written verbatim at the same offsets, so the replica's
segment files are byte-identical to the master's (records, BLANK fillers, the zeros after
them) and a replica store opens as a master store unchanged. Each run of bytes is checked
before anything of it is kept (``replica_scan``: magic, sizes, PHYSICALOFFSET, body CRC,
topic), then every record completed by it is dispatched into the replica's consume queues and
index with the store's own dispatchers; a record split across two runs is dispatched when its
tail arrives. Crash safety is the store's: an abort marker, a torn tail that recovery cuts, an
idempotent re-dispatch.

``truncate`` cuts a replica that holds a tail its new master never had. The cut bytes are kept
in DIR/diverged/, and the cut is made crash-safe by recording the consume queues' new ends
(queue table) and the target offset (DIR/truncating, which recovery finishes) before anything
is removed.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from shmq.codec import record as fmt
from shmq.errors import DiskFullError, StoreClosedError
from shmq.store import files, queue_table, recovery
from shmq.store.config_files import write_json
from shmq.store.consume_queue import ConsumeQueue
from shmq.store.dispatch import DispatchRequest, group_by_queue, requests_from_log
from shmq.store.mapped_file import MappedFile
from shmq.store.message_store import MessageStore
from shmq.store.replica_scan import Scan, scan

log = logging.getLogger(__name__)
_HIDDEN = fmt.TRANSACTION_PREPARED  # SYSFLAG bit of records without a consume-queue entry


class ReplicaAppender:
    """Appends master commitlog bytes to a started ``MessageStore`` and dispatches them."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        # everything below is dispatched; from here to max_offset: the start of a record whose
        # tail has not arrived. Recovery dispatched all it kept and cut any torn tail.
        self._dispatched = store.commitlog.max_offset

    @property
    def max_offset(self) -> int:
        """Where the next frame must start (what the replica reports to its master)."""
        return self.store.commitlog.max_offset

    # ------------------------------------------------------------------ append

    def append(self, offset: int, data: bytes | memoryview) -> list[tuple[str, int]]:
        """Append master bytes at ``offset`` (== max_offset), dispatch the records they
        complete; returns the (topic, queue id) pairs that got entries.

        ValueError: wrong offset, or a run crossing a segment end. CorruptRecordError: a record
        failed a check; the good records before it are kept and dispatched, nothing from it on.
        DiskFullError: nothing of the run was written."""
        store = self.store
        if not store.running or store.space.full or store._redispatch_from is not None:
            store._check_writable()
        cl = store.commitlog
        n = len(data)
        seg = cl.segment_size
        with cl.put_lock:
            if not store.running:
                raise StoreClosedError("the message store is shut down")
            end = cl.max_offset
            fresh = not cl.queue.files and offset % seg == 0  # an empty store starts at the master's min
            if offset != end and not fresh:
                raise ValueError(f"replica append at offset {offset}, but the store's max offset is {end}")
            if n == 0:
                return []
            if offset // seg != (offset + n - 1) // seg:
                raise ValueError(f"replica append of {n} bytes at offset {offset} crosses the end of a "
                                 f"{seg}-byte commitlog segment")
            if fresh:
                self._dispatched = offset
            mf = self._segment(offset)
            pos = offset - mf.file_from_offset
            new = np.frombuffer(data, np.uint8)
            base = self._dispatched
            if base >= offset + n:  # inside the zeros after a BLANK filler: bytes only
                self._reserve(mf, pos + n, [])
                self._write(mf, pos, new, pos + n)
                return []
            pending = mf.array[base - mf.file_from_offset:pos]
            buf = np.concatenate((pending, new)) if len(pending) else new
            found = scan(buf, base, mf.file_to_offset - base)
            keep = n if found.error is None else max(0, base + found.end - offset)
            reqs = self._requests(found, buf, base)
            self._reserve(mf, pos + keep if not found.blank else mf.size, reqs)
            self._write(mf, pos, new[:keep], pos + keep)
            touched = self._dispatch(reqs, found, base)
            if found.error is not None:
                if base + found.end < offset:  # a kept record start that its tail proved bad
                    recovery.cut_log(cl, base + found.end)
                raise fmt.CorruptRecordError(f"replica: {found.error}; the commitlog ends at {cl.max_offset}")
            return touched

    def _segment(self, offset: int) -> MappedFile:
        try:
            return self.store.commitlog.queue.last_file(offset)
        except DiskFullError as e:
            self.store.space.refused(e)
            raise self.store.space.error() from None

    def _requests(self, found: Scan, buf: np.ndarray, base: int) -> list[DispatchRequest]:
        """Dispatch requests for the scanned records: one for all (grouped by queue), or, when
        some queue's offsets are not consecutive in it, recovery's per-run requests."""
        if not len(found):
            return []
        h = found.header
        store = self.store
        phys = found.starts + base
        sizes = h["total_size"].astype(np.int64)
        qoffs = h["queue_offset"].astype(np.int64)
        qids = h["queue_id"].astype(np.int64)
        ts = h["store_timestamp"].astype(np.int64)
        ent = np.flatnonzero((h["sysflag"] & _HIDDEN) == 0)
        keys_ts = ts[found.key_records]
        if not len(ent):
            return [DispatchRequest([], [], [], phys, sizes, found.tags_codes, int(ts[-1]), found.key_hashes,
                                    found.key_records, keys_ts)]
        groups, gid, rank, rows = group_by_queue(found.topic_ids, qids, ent)
        firsts = np.array([qoffs[r[0]] for r in rows], np.int64)
        if not np.array_equal(qoffs[ent], firsts[gid] + rank):  # a gap or a step back inside a queue
            data = buf.tobytes()  # recovery's grouping of runs of consecutive offsets, from decoded records
            decoded = ((base + s, fmt.decode_record(data, s)) for s in found.starts.tolist())
            return list(requests_from_log(decoded, store._queue))
        cqs = [store._queue(found.topics[t], q) for t, q in groups]
        return [DispatchRequest(cqs, rows, firsts.tolist(), phys, sizes, found.tags_codes, int(ts[-1]),
                                found.key_hashes, found.key_records, keys_ts)]

    def _reserve(self, mf: MappedFile, end: int, reqs: list[DispatchRequest]) -> None:
        """Disk blocks for everything the append writes before any byte is written (as the put path)."""
        store = self.store
        try:
            mf.reserve(end)
            for req in reqs:
                for q, r in zip(req.queues, req.rows or [np.arange(len(req.phys_offsets))] * len(req.queues)):
                    assert isinstance(q, ConsumeQueue)
                    q.reserve(len(r))
                if len(req.key_hashes) and store.index is not None:
                    store.index.reserve(len(req.key_hashes))
        except DiskFullError as e:
            store.space.refused(e)
            raise store.space.error() from None

    def _write(self, mf: MappedFile, pos: int, data: np.ndarray, wrote_to: int) -> None:
        if len(data):
            if self.store.commitlog.write_through:
                mf.write(data.data, pos)
            else:
                mf.array[pos:pos + len(data)] = data
        mf.wrote_position = max(mf.wrote_position, wrote_to)
        allocator = self.store.allocator
        if mf.wrote_position >= mf.warm_mark:
            allocator.keep_ahead(mf)

    def _dispatch(self, reqs: list[DispatchRequest], found: Scan, base: int) -> list[tuple[str, int]]:
        store, cl = self.store, self.store.commitlog
        touched: list[tuple[str, int]] = []
        for req in reqs:
            store._dispatch(req)
            touched += [(q.topic, q.queue_id) for q in req.queues if isinstance(q, ConsumeQueue)]
        if len(found):
            ts = int(found.header["store_timestamp"][-1])
            cl.last_store_timestamp = max(cl.last_store_timestamp, ts)
            cl.confirmed = (base + found.end, ts)
        self._dispatched = base + found.end
        return sorted(set(touched))

    # ------------------------------------------------------------------ truncate

    def truncate(self, offset: int) -> int:
        """Cut the store back to ``offset`` (a record boundary at or below max_offset); the cut
        bytes go to DIR/diverged/<offset>.log first. Returns the bytes removed."""
        store, cl = self.store, self.store.commitlog
        with cl.put_lock:
            end = cl.max_offset
            if not cl.min_offset <= offset <= end:
                raise ValueError(f"truncate to {offset}: the commitlog holds [{cl.min_offset}, {end})")
            if offset == end:
                return 0
            if not self._is_boundary(offset):
                raise ValueError(f"truncate to {offset}: not the start of a record of the commitlog")
            self._save_diverged(offset, end)
            cuts = {(cq.topic, cq.queue_id): cq.dirty_from(offset) for cq in store.consume_queues()}
            table: dict[str, dict[str, int]] = {}
            for (topic, qid), n in cuts.items():
                table.setdefault(topic, {})[str(qid)] = n
            write_json(queue_table.table_path(store.store_dir), {"queueMaxOffsets": table})
            marker = recovery.cut_marker_path(cl)
            with open(files.open_file(marker, os.O_WRONLY | os.O_TRUNC)[0], "w", encoding="ascii") as f:
                f.write(str(offset))
                f.flush()
                os.fsync(f.fileno())
            recovery.sync_dir(store.store_dir)
            recovery.finish_cut(cl)
            for cq in store.consume_queues():
                cq.truncate_dirty(offset)
                cq.flush()
            if store.index is not None:
                store.index.truncate(offset)
                store.index.flush()
            ts = self._last_timestamp(offset)
            cp = store.checkpoint
            cp.physic_msg_timestamp = min(cp.physic_msg_timestamp, ts)
            cp.logics_msg_timestamp = min(cp.logics_msg_timestamp, ts)
            cp.index_msg_timestamp = min(cp.index_msg_timestamp, ts)
            cp.flush()
            store._dispatched_ts = ts
            cl.last_store_timestamp = ts
            cl.confirmed = (offset, ts)
            self._dispatched = offset
        log.warning("replica store truncated from %d to %d (%d bytes kept in %s)", end, offset, end - offset,
                    self.diverged_path(offset))
        return end - offset

    def diverged_path(self, offset: int) -> str:
        return os.path.join(self.store.store_dir, "diverged", f"{fmt.offset_file_name(offset)}.log")

    def _is_boundary(self, offset: int) -> bool:
        cl = self.store.commitlog
        if offset > self._dispatched:
            return False  # inside a record whose tail has not arrived
        mf = cl.queue.find(offset)
        if mf is None or offset == mf.file_from_offset:
            return True
        status, _ = fmt.check_record(mf.view, offset - mf.file_from_offset, mf.size, offset, False)
        return status in (fmt.RECORD_OK, fmt.RECORD_BLANK)

    def _save_diverged(self, offset: int, end: int) -> None:
        cl = self.store.commitlog
        path = self.diverged_path(offset)
        files.make_dirs(os.path.dirname(path))
        fd = files.open_file(path, os.O_WRONLY | os.O_TRUNC)[0]
        try:
            at = offset
            while at < end:
                mf = cl.queue.find(at)
                assert mf is not None
                stop = min(end, mf.file_from_offset + mf.wrote_position)
                view = mf.view[at - mf.file_from_offset:stop - mf.file_from_offset]
                while len(view):
                    view = view[os.write(fd, view):]
                at = mf.file_to_offset
            os.fsync(fd)
        finally:
            os.close(fd)
        recovery.sync_dir(os.path.dirname(path))

    def _last_timestamp(self, offset: int) -> int:
        """Store timestamp of the last record before ``offset`` (0 if none in the kept segment)."""
        last = 0
        first = self.store.commitlog.queue.find(max(offset - 1, 0))
        if first is not None:
            for mf, pos, _ in self.store.commitlog.iter_records(first.file_from_offset):
                if mf.file_from_offset + pos >= offset:
                    break
                last = fmt.HEADER.unpack_from(mf.view, pos)[10]
        return last
