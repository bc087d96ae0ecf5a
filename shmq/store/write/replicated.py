"""ReplicaAppender: a replica's one write path into its store (RocketMQ's slave side: HAClient
appends the master's commitlog bytes, the reput service dispatches them).

The bytes are the master's commitlog, written verbatim at the same offsets, so the replica's
segment files are byte-identical to the master's (records, BLANK fillers, the zeros after
them) and a replica store opens as a master store unchanged. Each run of bytes is checked
before it is written (``replica_scan``: magic, sizes, PHYSICALOFFSET, body CRC, topic), then
every record completed by it is dispatched into the replica's consume queues and index with
the store's own dispatchers; a record split across two runs is dispatched when its tail
arrives. Runs appended with ``dispatch=False`` are written first and checked with the next
dispatching call (checking 1 MiB costs little more than 32 KiB); what fails is cut then, so
the store never keeps bytes it refused. Crash safety is the store's: an abort marker, a torn
tail that recovery cuts, an idempotent re-dispatch.

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
from shmq.store.checkpoint import StoreCheckpoint
from shmq.store.config_files import write_json
from shmq.store.consume_queue import ConsumeQueue
from shmq.store.mapped_file import MappedFile
from shmq.store.replica_scan import Scan, scan
from shmq.store.write.dispatch import DispatchRequest, group_by_queue, requests_from_log
from shmq.store.write.log_writer import LogWriter

log = logging.getLogger(__name__)
_HIDDEN = fmt.TRANSACTION_PREPARED  # SYSFLAG bit of records without a consume-queue entry
_MESSAGE_MAGIC = fmt.MESSAGE_MAGIC.to_bytes(4, "big")
MAX_UNDISPATCHED = 1 << 20  # bytes append(dispatch=False) may leave unchecked


class ReplicaAppender:
    """Appends master commitlog bytes through a started store's ``LogWriter`` and dispatches
    them; ``checkpoint`` is the store's (a truncation moves its times back)."""

    def __init__(self, writer: LogWriter, checkpoint: StoreCheckpoint) -> None:
        self.writer = writer
        self.checkpoint = checkpoint
        # everything below is dispatched; from here to max_offset: the start of a record whose
        # tail has not arrived. Recovery dispatched all it kept and cut any torn tail.
        self._dispatched = writer.commitlog.max_offset

    @property
    def max_offset(self) -> int:
        """Where the next frame must start (what the replica reports to its master)."""
        return self.writer.commitlog.max_offset

    # ------------------------------------------------------------------ append

    def append(self, offset: int, data: bytes | memoryview, dispatch: bool = True) -> list[tuple[str, int]]:
        """Append master bytes at ``offset`` (== max_offset), check and dispatch the records
        they complete; returns the (topic, queue id) pairs that got entries.

        ``dispatch=False`` (the HA client has more frames at hand): the bytes are written and
        the checks and dispatch wait for the next call that dispatches (or ``dispatch()``), at
        most ``MAX_UNDISPATCHED`` bytes or a segment's end later: a check and a dispatch cost
        about the same for 32 KiB as for 1 MiB, the way RocketMQ's reput service lags behind
        its HAClient. Records found bad then are cut as below.

        ValueError: wrong offset, or a run crossing a segment end. CorruptRecordError: a record
        failed a check; the good records before it are kept and dispatched, nothing from it on
        (bytes of it written earlier are cut). DiskFullError: nothing of the run was written,
        or (behind bytes appended with dispatch=False, which a dispatching call writes first and
        checks in place with them) it waits unchecked, as those do, for the next call."""
        writer = self.writer
        if not writer.writable():
            writer.check_writable()
        cl = writer.commitlog
        n = len(data)
        seg = cl.segment_size
        with writer.put_lock:
            if not writer.accepting:
                raise StoreClosedError("the message store is shut down")
            end = cl.max_offset
            fresh = not cl.queue.files and offset % seg == 0  # an empty store starts at the master's min
            if offset != end and not fresh:
                raise ValueError(f"replica append at offset {offset}, but the store's max offset is {end}")
            if n == 0:
                return []
            if offset // seg != (offset + n - 1) // seg:
                raise ValueError(
                    f"replica append of {n} bytes at offset {offset} crosses the end of a {seg}-byte commitlog segment"
                )
            if fresh:
                self._dispatched = offset
            touched = self._settle(offset) if self._dispatched < offset - offset % seg else []
            mf = self._segment(offset)
            pos = offset - mf.file_from_offset
            new = np.frombuffer(data, np.uint8)
            if (
                self._dispatched >= offset + n
                or self._incomplete(mf, offset + n)
                or (not dispatch and offset + n - self._dispatched <= MAX_UNDISPATCHED)
            ):
                self._reserve(mf, pos + n, [])  # zeros after a BLANK filler, or checked later
                self._write(mf, pos, new, pos + n)
                return touched
            if self._dispatched < offset:  # behind unchecked bytes: written first, all checked in place
                self._reserve(mf, pos + n, [])  # (no copy of the unchecked MiB to join them)
                self._write(mf, pos, new, pos + n)
                return sorted(set(touched + self._process(mf, pos + n, new[:0])))
            return sorted(set(touched + self._process(mf, pos, new)))

    def _incomplete(self, mf: MappedFile, end: int) -> bool:
        """Whether the undispatched bytes are one record (its header checked when it arrived)
        that still does not end by ``end``: a 4 MiB record in 32 KiB frames is then checked
        once, not its growing head with every frame."""
        at = self._dispatched - mf.file_from_offset
        if at < 0 or at + 8 > mf.wrote_position or mf.view[at + 4 : at + 8] != _MESSAGE_MAGIC:
            return False  # a BLANK filler is seen at once (the segment's rest is then reserved)
        return self._dispatched + int.from_bytes(mf.view[at : at + 4], "big", signed=True) > end

    def dispatch(self) -> list[tuple[str, int]]:
        """Check and dispatch what ``append(..., dispatch=False)`` left (see ``append``)."""
        cl = self.writer.commitlog
        with cl.put_lock:
            end = cl.max_offset
            if self._dispatched >= end:
                return []
            mf = cl.queue.find(self._dispatched)
            assert mf is not None
            return self._process(mf, end - mf.file_from_offset, np.empty(0, np.uint8))

    def _settle(self, offset: int) -> list[tuple[str, int]]:
        """Dispatch the undispatched end of the segment before the one ``offset`` starts: it
        must end with a BLANK filler (the segment is full)."""
        cl = self.writer.commitlog
        mf = cl.queue.find(self._dispatched)
        assert mf is not None and mf.file_to_offset == offset
        touched = self._process(mf, mf.size, np.empty(0, np.uint8))
        if self._dispatched < offset:
            at = self._dispatched
            recovery.cut_log(cl, at)
            raise fmt.CorruptRecordError(
                f"replica: commitlog segment {mf.path} ends inside the record at {at}; "
                f"the commitlog ends at {cl.max_offset}"
            )
        return touched

    def _process(self, mf: MappedFile, pos: int, new: np.ndarray) -> list[tuple[str, int]]:
        """Check the undispatched bytes of ``mf`` (to ``pos``) followed by ``new`` (to be
        written at ``pos``); write what passes, dispatch its records."""
        cl = self.writer.commitlog
        base = self._dispatched
        offset = mf.file_from_offset + pos
        pending = mf.array[base - mf.file_from_offset : pos]
        buf = np.concatenate((pending, new)) if len(pending) and len(new) else (new if len(new) else pending)
        found = scan(buf, base, mf.file_to_offset - base)
        keep = len(new) if found.error is None else max(0, base + found.end - offset)
        reqs = self._requests(found, buf, base)
        self._reserve(mf, pos + keep if not found.blank else mf.size, reqs)
        self._write(mf, pos, new[:keep], pos + keep)
        touched = self._dispatch(reqs, found, base)
        if found.error is not None:
            if base + found.end < offset:  # bytes kept earlier that the check refused
                recovery.cut_log(cl, base + found.end)
            raise fmt.CorruptRecordError(f"replica: {found.error}; the commitlog ends at {cl.max_offset}")
        return touched

    def _segment(self, offset: int) -> MappedFile:
        try:
            return self.writer.commitlog.queue.last_file(offset)
        except DiskFullError as e:
            self.writer.space.refused(e)
            raise self.writer.space.error() from None

    def _requests(self, found: Scan, buf: np.ndarray, base: int) -> list[DispatchRequest]:
        """Dispatch requests for the scanned records: one for all (grouped by queue), or, when
        some queue's offsets are not consecutive in it, recovery's per-run requests."""
        if not len(found):
            return []
        f = found.fields
        phys = found.starts + base
        sizes, qoffs, qids, ts = f.total_size, f.queue_offset, f.queue_id, f.store_timestamp
        ent = np.flatnonzero((f.sysflag & _HIDDEN) == 0)
        keys_ts = ts[found.key_records]
        if not len(ent):
            return [
                DispatchRequest(
                    [], [], [], phys, sizes, found.tags_codes, int(ts[-1]), found.key_hashes, found.key_records, keys_ts
                )
            ]
        groups, gid, rank, rows = group_by_queue(found.topic_ids, qids, ent)
        firsts = np.array([qoffs[r[0]] for r in rows], np.int64)
        if not np.array_equal(qoffs[ent], firsts[gid] + rank):  # a gap or a step back inside a queue
            data = buf.tobytes()  # recovery's grouping of runs of consecutive offsets, from decoded records
            decoded = ((base + s, fmt.decode_record(data, s)) for s in found.starts.tolist())
            return list(requests_from_log(decoded, self.writer.queue))
        cqs = [self.writer.queue(found.topics[t], q) for t, q in groups]
        return [
            DispatchRequest(
                cqs,
                rows,
                firsts.tolist(),
                phys,
                sizes,
                found.tags_codes,
                int(ts[-1]),
                found.key_hashes,
                found.key_records,
                keys_ts,
            )
        ]

    def _reserve(self, mf: MappedFile, end: int, reqs: list[DispatchRequest]) -> None:
        """Disk blocks for everything the append writes before any byte is written (as the put path)."""
        self.writer.reserve_raw(mf, end, reqs)

    def _write(self, mf: MappedFile, pos: int, data: np.ndarray, wrote_to: int) -> None:
        self.writer.write_raw(mf, pos, data, wrote_to)

    def _dispatch(self, reqs: list[DispatchRequest], found: Scan, base: int) -> list[tuple[str, int]]:
        writer, cl = self.writer, self.writer.commitlog
        touched: list[tuple[str, int]] = []
        for req in reqs:
            writer.dispatch(req)
            touched += [(q.topic, q.queue_id) for q in req.queues if isinstance(q, ConsumeQueue)]
        if len(found):
            ts = int(found.fields.store_timestamp[-1])
            cl.last_store_timestamp = max(cl.last_store_timestamp, ts)
            writer.publish(base + found.end, ts)
        self._dispatched = base + found.end
        return sorted(set(touched))

    # ------------------------------------------------------------------ truncate

    def truncate(self, offset: int) -> int:
        """Cut the store back to ``offset`` (a record boundary at or below max_offset); the cut
        bytes go to DIR/diverged/<offset>.log first. Returns the bytes removed."""
        writer, cl = self.writer, self.writer.commitlog
        with writer.put_lock:
            if self._dispatched < cl.max_offset:  # check what append(dispatch=False) left first
                mf = cl.queue.find(self._dispatched)
                assert mf is not None
                try:
                    self._process(mf, cl.max_offset - mf.file_from_offset, np.empty(0, np.uint8))
                except fmt.CorruptRecordError as e:
                    log.warning("%s", e)  # cut already: the truncation goes on from there
            end = cl.max_offset
            if not cl.min_offset <= offset <= end:
                raise ValueError(f"truncate to {offset}: the commitlog holds [{cl.min_offset}, {end})")
            if offset == end:
                return 0
            if not self._is_boundary(offset):
                raise ValueError(f"truncate to {offset}: not the start of a record of the commitlog")
            self._save_diverged(offset, end)
            cuts = {(cq.topic, cq.queue_id): cq.dirty_from(offset) for cq in writer.consume_queues()}
            table: dict[str, dict[str, int]] = {}
            for (topic, qid), n in cuts.items():
                table.setdefault(topic, {})[str(qid)] = n
            write_json(queue_table.table_path(writer.store_dir), {"queueMaxOffsets": table})
            marker = recovery.cut_marker_path(cl)
            with open(files.open_file(marker, os.O_WRONLY | os.O_TRUNC)[0], "w", encoding="ascii") as f:
                f.write(str(offset))
                f.flush()
                os.fsync(f.fileno())
            recovery.sync_dir(writer.store_dir)
            recovery.finish_cut(cl)
            for cq in writer.consume_queues():
                cq.truncate_dirty(offset)
                cq.flush()
            if writer.index is not None:
                writer.index.truncate(offset)
                writer.index.flush()
            ts = self._last_timestamp(offset)
            cp = self.checkpoint
            cp.physic_msg_timestamp = min(cp.physic_msg_timestamp, ts)
            cp.logics_msg_timestamp = min(cp.logics_msg_timestamp, ts)
            cp.index_msg_timestamp = min(cp.index_msg_timestamp, ts)
            cp.flush()
            cl.last_store_timestamp = ts
            self.writer.publish(offset, ts)
            self._dispatched = offset
        log.warning(
            "replica store truncated from %d to %d (%d bytes kept in %s)",
            end,
            offset,
            end - offset,
            self.diverged_path(offset),
        )
        return end - offset

    def diverged_path(self, offset: int) -> str:
        return os.path.join(self.writer.store_dir, "diverged", f"{fmt.offset_file_name(offset)}.log")

    def _is_boundary(self, offset: int) -> bool:
        cl = self.writer.commitlog
        if offset > self._dispatched:
            return False  # inside a record whose tail has not arrived
        mf = cl.queue.find(offset)
        if mf is None or offset == mf.file_from_offset:
            return True
        status, _ = fmt.check_record(mf.view, offset - mf.file_from_offset, mf.size, offset, False)
        return status in (fmt.RECORD_OK, fmt.RECORD_BLANK)

    def _save_diverged(self, offset: int, end: int) -> None:
        cl = self.writer.commitlog
        path = self.diverged_path(offset)
        files.make_dirs(os.path.dirname(path))
        fd = files.open_file(path, os.O_WRONLY | os.O_TRUNC)[0]
        try:
            at = offset
            while at < end:
                mf = cl.queue.find(at)
                assert mf is not None
                stop = min(end, mf.file_from_offset + mf.wrote_position)
                view = mf.view[at - mf.file_from_offset : stop - mf.file_from_offset]
                while len(view):
                    view = view[os.write(fd, view) :]
                at = mf.file_to_offset
            os.fsync(fd)
        finally:
            os.close(fd)
        recovery.sync_dir(os.path.dirname(path))

    def _last_timestamp(self, offset: int) -> int:
        """Store timestamp of the last record before ``offset`` (0 if none in the kept segment)."""
        last = 0
        first = self.writer.commitlog.queue.find(max(offset - 1, 0))
        if first is not None:
            for mf, pos, _ in self.writer.commitlog.iter_records(first.file_from_offset):
                if mf.file_from_offset + pos >= offset:
                    break
                last = fmt.HEADER.unpack_from(mf.view, pos)[10]
        return last
