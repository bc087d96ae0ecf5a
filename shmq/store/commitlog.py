"""The commitlog: every message of every topic, appended to one log of mmap'd segments.

Single writer (callers hold `put_lock`). A record arrives already encoded by the client; the
commitlog copies it (one copy per batch) and patches the fields the store owns. The
PHYSICALOFFSET field is patched last: recovery accepts a record only if that field equals the
record's position, so a record whose patching was cut short by a crash is never accepted.

With ``write_through`` (SYNC_FLUSH stores) records are patched in a scratch copy and written
with pwrite instead of through the mapping: an fdatasync after mapped writes cost ~7x more on
ext4 (see ``MappedFile.write``), and SYNC_FLUSH pays one before every answer. A record cut
short by a crash mid-pwrite fails its body CRC, which recovery after a crash checks.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import numpy as np

from shmq.codec import record as fmt
from shmq.codec.buffers import ReadBuffer
from shmq.store.mapped_file import AllocateMappedFileService, MappedFile, MappedFileQueue

log = logging.getLogger(__name__)
_TS_HOST = struct.Struct(">qq")  # STORETIMESTAMP, STOREHOST (adjacent)
_QOFF_PHYS = struct.Struct(">qq")  # QUEUEOFFSET, PHYSICALOFFSET (adjacent, physical written last)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
RESERVE_STEP = 1 << 20  # disk reserved at a time ahead of the writer when warming is behind or off


@dataclass(slots=True)
class AppendResult:
    """Where a record or batch landed."""

    wrote_offset: int  # physical offset of the first record
    wrote_bytes: int  # bytes of records (blank fillers excluded)
    phys_offsets: np.ndarray | None  # per record, batch appends only
    store_timestamp: int


class CommitLog:
    """Append and read commitlog records across segments."""

    def __init__(
        self,
        store_dir: str,
        segment_size: int,
        store_host: int = 0,
        allocator: AllocateMappedFileService | None = None,
        write_through: bool = False,
    ) -> None:
        self.directory = os.path.join(store_dir, "commitlog")
        self.write_through = write_through
        self.queue = MappedFileQueue(self.directory, segment_size, allocator, RESERVE_STEP)
        self._allocator = allocator
        self.segment_size = segment_size
        self.store_host = store_host
        self.put_lock = threading.Lock()
        self.last_store_timestamp = 0
        # (end offset, store timestamp of the record ending there): what a flush covers; moved
        # only by the store's writer once records and their entries are written (LogWriter.publish)
        self.confirmed = (0, 0)
        # (offset, length) of each damaged range the last recovery stepped over (kept in place)
        self.damaged: list[tuple[int, int]] = []

    # ------------------------------------------------------------------ writing

    def next_store_timestamp(self) -> int:
        """Wall-clock ms, never going backwards, so consume-queue time search stays sorted."""
        ts = int(time.time() * 1000)
        if ts < self.last_store_timestamp:
            ts = self.last_store_timestamp
        self.last_store_timestamp = ts
        return ts

    def reserve(self, nbytes: int, sizes: np.ndarray | int) -> None:
        """Give the next ``nbytes`` of records (of ``sizes`` bytes each) disk blocks before any is
        written, so a put on a full disk fails whole with DiskFullError instead of faulting on
        a hole (SIGBUS) or stopping between two segments. One comparison when the current
        segment has them already."""
        files = self.queue.files
        if files:
            mf = files[-1]
            end = mf.wrote_position + nbytes
            if end + fmt.MIN_BLANK <= mf.size and end <= mf.reserved_position:
                return
        self.queue.reserve(nbytes, self.queue.max_offset, fmt.MIN_BLANK, fmt.MIN_BLANK + int(np.max(sizes)))

    def _segment_for(self, size: int) -> MappedFile:
        """The segment with room for `size` bytes plus a blank, rolling (with a blank filler) if needed."""
        mf = self.queue.last_file(self.queue.max_offset)
        if size + fmt.MIN_BLANK > mf.remaining:
            if mf.remaining:
                blank = fmt.BLANK.pack(mf.remaining, fmt.BLANK_MAGIC)
                mf.reserve(mf.wrote_position + len(blank))
                if self.write_through:
                    mf.write(blank, mf.wrote_position)
                else:
                    mf.view[mf.wrote_position : mf.wrote_position + len(blank)] = blank
                mf.wrote_position = mf.size
            mf.end_writes()
            mf = self.queue.last_file()
            if size + fmt.MIN_BLANK > mf.remaining:
                raise ValueError(f"record of {size} bytes does not fit a {self.segment_size}-byte segment")
        return mf

    def append(self, record: ReadBuffer, queue_offset: int, queue_id: int, store_timestamp: int) -> int:
        """Append one encoded record; returns its physical offset."""
        size = len(record)
        mf = self._segment_for(size)
        pos = mf.wrote_position
        view: bytearray | memoryview  # a private copy to patch and pwrite, or the mapping itself
        if self.write_through:
            view, at = bytearray(record), 0
        else:
            if pos + size > mf.reserved_position:  # reserve() came first: only a guard against SIGBUS
                mf.reserve(pos + size)
            view, at = mf.view, pos
            view[pos : pos + size] = record
        _I32.pack_into(view, at + fmt.OFF_QUEUEID, queue_id)
        _TS_HOST.pack_into(view, at + fmt.OFF_STORETIMESTAMP, store_timestamp, self.store_host)
        if _I32.unpack_from(view, at + fmt.OFF_BODYCRC)[0] == 0:
            (body_len,) = _I32.unpack_from(view, at + fmt.OFF_BODYLEN)
            _I32.pack_into(
                view,
                at + fmt.OFF_BODYCRC,
                fmt.body_crc(memoryview(view)[at + fmt.OFF_BODY : at + fmt.OFF_BODY + body_len]),
            )
        phys = mf.file_from_offset + pos
        _QOFF_PHYS.pack_into(view, at + fmt.OFF_QUEUEOFFSET, queue_offset, phys)
        if self.write_through:
            mf.write(view, pos)
        mf.wrote_position = pos + size
        if mf.wrote_position >= mf.warm_mark and self._allocator is not None:
            self._allocator.keep_ahead(mf)
        return phys

    def append_batch(
        self,
        buf: ReadBuffer,
        starts: np.ndarray,
        sizes: np.ndarray,
        first_queue_offset: int | np.ndarray,
        queue_id: int | np.ndarray,
        store_timestamp: int,
        missing_crc: np.ndarray | None = None,
    ) -> AppendResult:
        """Append records packed back to back in `buf` (record i: `sizes[i]` bytes at `starts[i]`).

        One copy per segment touched, then one vectorised scatter patches the owned fields of
        all records; `missing_crc` lists records whose BODYCRC the client left 0. A batch that
        crosses a segment end is split there. Records of several queues pass `queue_id` and
        `first_queue_offset` as per-record arrays.
        """
        per_record = isinstance(queue_id, np.ndarray)
        src = np.frombuffer(buf, dtype=np.uint8)
        n = len(starts)
        ends = starts + sizes
        phys_all = np.empty(n, dtype=np.int64)
        i = 0
        while i < n:
            mf = self._segment_for(int(sizes[i]))
            # records i..j-1 fit in this segment, leaving room for the blank filler
            j = i + int(np.searchsorted(ends[i:] - starts[i], mf.remaining - fmt.MIN_BLANK, side="right"))
            lo, hi = int(starts[i]), int(ends[j - 1])
            pos = mf.wrote_position
            rel = starts[i:j] + (pos - lo)
            phys_all[i:j] = rel + mf.file_from_offset
            if self.write_through:  # patch a copy, then one pwrite
                dst, at = src[lo:hi].copy(), starts[i:j] - lo
            else:
                if pos + hi - lo > mf.reserved_position:  # reserve() came first: only a guard against SIGBUS
                    mf.reserve(pos + hi - lo)
                dst, at = mf.array, rel
                dst[pos : pos + hi - lo] = src[lo:hi]
            if missing_crc is not None:
                self._fill_crc(dst, at, missing_crc[(missing_crc >= i) & (missing_crc < j)] - i)
            if per_record:  # then both are per-record arrays (see above)
                fmt.patch_owned_fields(
                    dst,
                    at,
                    cast(np.ndarray, queue_id)[i:j],
                    store_timestamp,
                    self.store_host,
                    cast(np.ndarray, first_queue_offset)[i:j],
                    mf.file_from_offset + pos,
                )
            else:
                fmt.patch_owned_fields(
                    dst,
                    at,
                    queue_id,
                    store_timestamp,
                    self.store_host,
                    first_queue_offset + i,
                    mf.file_from_offset + pos,
                )
            if self.write_through:
                mf.write(dst.data, pos)
            mf.wrote_position = pos + hi - lo
            if mf.wrote_position >= mf.warm_mark and self._allocator is not None:
                self._allocator.keep_ahead(mf)
            i = j
        end = int(phys_all[-1] + sizes[-1])
        return AppendResult(int(phys_all[0]), end - int(phys_all[0]), phys_all, store_timestamp)

    @staticmethod
    def _fill_crc(dst: np.ndarray, rel: np.ndarray, which: np.ndarray) -> None:
        view = dst.data
        for p in rel[which].tolist():
            (body_len,) = _I32.unpack_from(view, p + fmt.OFF_BODYLEN)
            _I32.pack_into(
                view, p + fmt.OFF_BODYCRC, fmt.body_crc(view[p + fmt.OFF_BODY : p + fmt.OFF_BODY + body_len])
            )

    # ------------------------------------------------------------------ reading

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    def data(self, offset: int, size: int) -> memoryview | None:
        """A view of `size` bytes at `offset`, or None if they are not (all) written."""
        mf = self.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + size > mf.wrote_position:
            return None
        return mf.view[pos : pos + size]

    def size_at(self, offset: int) -> int:
        view = self.data(offset, 4)
        return _I32.unpack_from(view)[0] if view is not None else -1

    def read(self, offset: int) -> fmt.StoredRecord | None:
        """Decode the record at `offset` (None if nothing is written there)."""
        size = self.size_at(offset)
        if size < fmt.FIXED_OVERHEAD:
            return None
        view = self.data(offset, size)
        return fmt.decode_record(view) if view is not None else None

    def store_timestamp_at(self, offset: int) -> int:
        view = self.data(offset + fmt.OFF_STORETIMESTAMP, 8)
        return _I64.unpack_from(view)[0] if view is not None else -1

    def iter_records(
        self, offset: int, verify_crc: bool = False, damaged: list[tuple[int, int]] | None = None
    ) -> Iterator[tuple[MappedFile, int, int]]:
        """(segment, position, size) of every valid record from `offset` to the end of the log.

        Damage in the middle of the log is stepped over, never taken for its end: a range of
        bad bytes with a valid record after it in its segment (``fmt.scan_segment``), or the
        unreadable rest of a segment when the next segment starts with a valid record. Each
        such range goes to ``damaged`` as (commitlog offset, length) when a list is given."""
        mf = self.queue.find(offset)
        while mf is not None:
            for status, pos, size in fmt.scan_segment(
                mf.view, offset - mf.file_from_offset, mf.wrote_position, mf.file_from_offset, verify_crc
            ):
                if status == fmt.RECORD_END:
                    nxt = self.queue.find(mf.file_to_offset)
                    if nxt is None or not self._starts_well(nxt):
                        return
                    status, size = fmt.RECORD_DAMAGED, mf.size - pos
                if status == fmt.RECORD_DAMAGED:
                    if damaged is not None and size > 0:
                        damaged.append((mf.file_from_offset + pos, size))
                    continue
                if status == fmt.RECORD_BAD_CRC:
                    log.warning(
                        "commitlog record at %d fails its body CRC; kept, later records follow it",
                        mf.file_from_offset + pos,
                    )
                if status != fmt.RECORD_BLANK:
                    yield mf, pos, size
            offset = mf.file_to_offset
            mf = self.queue.find(offset)

    @staticmethod
    def _starts_well(mf: MappedFile) -> bool:
        """The segment begins with a record whose checks (body CRC included) all pass."""
        if mf.wrote_position < fmt.MIN_BLANK:
            return False
        status, _ = fmt.check_record(mf.view, 0, mf.wrote_position, mf.file_from_offset, True)
        return status == fmt.RECORD_OK

    def flush(self, least_pages: int = 0) -> tuple[int, int]:
        """Flush dirty segments if at least `least_pages` pages are dirty; returns the covered (offset, ts)."""
        covered = self.confirmed
        return covered if self.queue.flush(least_pages, datasync=self.write_through) else (-1, 0)

    def close(self) -> None:
        self.queue.close()
