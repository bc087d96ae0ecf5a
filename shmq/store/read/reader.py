"""Read-only access to a store directory that another process (the broker) is writing.

Consumers, the HA sender and tools map the commitlog and consume-queue files with
ACCESS_READ: they read the broker's pages with no copy and no broker hop, and cannot change a
byte. A reader follows new segments as they appear and lets go of deleted ones (a deleted
file's mapping stays valid until it is closed, and views already handed out keep it mapped).
Bytes past the offsets the broker publishes may still be being written, so every read here
takes the published max offset from its caller and never goes past it.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import struct
from typing import NamedTuple

import numpy as np

from shmq.codec import record as fmt
from shmq.store.consume_queue import BLANK_SIZE

log = logging.getLogger(__name__)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class ReadOnlySegment:
    """One offset-named file mapped whole with ACCESS_READ."""

    __slots__ = ("path", "start", "size", "mm", "array")

    def __init__(self, path: str, start: int, mm: mmap.mmap) -> None:
        self.path = path
        self.start = start
        self.size = len(mm)
        self.mm = mm
        self.array = np.frombuffer(mm, dtype=np.uint8)  # read-only: the mapping is ACCESS_READ

    @classmethod
    def open(cls, path: str) -> ReadOnlySegment | None:
        """Map `path`; None if it is gone or still empty (created, not yet sized by the writer)."""
        start = fmt.parse_offset_file_name(os.path.basename(path))
        if start is None:
            raise ValueError(f"{path}: segment names are 20-digit offsets")
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            if os.fstat(fd).st_size == 0:
                return None
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        return cls(path, start, mm)

    @property
    def end(self) -> int:
        return self.start + self.size

    def close(self) -> None:
        self.array = None  # type: ignore[assignment]
        try:
            self.mm.close()
        except BufferError:
            log.debug("%s: views still exported; unmapped when the last one goes", self.path)


class SegmentQueue:
    """The offset-named files of one folder, mapped read-only, oldest first."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.segments: list[ReadOnlySegment] = []
        self._starts: list[int] = []

    def refresh(self) -> None:
        """Map files that appeared after the last one mapped; close those that were deleted."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            names = []
        offsets = sorted(o for o in map(fmt.parse_offset_file_name, names) if o is not None)
        if offsets:
            self.release_below(offsets[0])
        last_end = self.segments[-1].end if self.segments else -1
        for off in offsets:
            if off < last_end:
                continue
            if self.segments and off != self.segments[-1].end:
                break  # the writer creates files in order: a gap means the next one is on its way
            seg = ReadOnlySegment.open(os.path.join(self.directory, fmt.offset_file_name(off)))
            if seg is None:
                break
            self.segments.append(seg)
            self._starts.append(off)
            last_end = seg.end

    def release_below(self, offset: int) -> None:
        """Close mappings that end at or below `offset` (the log's min offset after a cleanup)."""
        drop = 0
        while drop < len(self.segments) and self.segments[drop].end <= offset:
            self.segments[drop].close()
            drop += 1
        if drop:
            del self.segments[:drop]
            del self._starts[:drop]

    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    def find(self, offset: int) -> ReadOnlySegment | None:
        """The segment holding `offset`; maps new files once if it lies past the last one."""
        if not self.segments or offset >= self.segments[-1].end:
            self.refresh()
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0 or offset >= self.segments[i].end:
            return None
        return self.segments[i]

    def starts(self) -> np.ndarray:
        return np.asarray(self._starts, dtype=np.int64)

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        self.segments = []
        self._starts = []


class CommitLogReader:
    """The commitlog segments of a store, read-only."""

    def __init__(self, store_dir: str) -> None:
        self.files = SegmentQueue(os.path.join(store_dir, "commitlog"))

    @property
    def min_offset(self) -> int:
        """First offset still mapped (the log's min offset as of the last refresh)."""
        return self.files.min_offset

    def refresh(self) -> None:
        self.files.refresh()

    def release_below(self, offset: int) -> None:
        self.files.release_below(offset)

    def segment(self, offset: int) -> ReadOnlySegment | None:
        return self.files.find(offset)

    def data(self, offset: int, size: int) -> memoryview | None:
        """A zero-copy view of `size` bytes at `offset`, or None if that segment is not mapped."""
        seg = self.files.find(offset)
        if seg is None or offset + size > seg.end:
            return None
        pos = offset - seg.start
        return memoryview(seg.mm)[pos : pos + size]

    def record(self, offset: int) -> fmt.StoredRecord | None:
        """Decode the record at `offset` (a consume-queue entry's offset, so it is published)."""
        head = self.data(offset, 4)
        if head is None:
            return None
        (size,) = _I32.unpack_from(head)
        view = self.data(offset, size) if size >= fmt.FIXED_OVERHEAD else None
        if view is None:
            raise fmt.CorruptRecordError(f"commitlog offset {offset} holds no record (TOTALSIZE {size})")
        return fmt.decode_record(view)

    def store_timestamp_at(self, offset: int) -> int:
        """STORETIMESTAMP of the record at `offset`; -1 if its segment is gone."""
        view = self.data(offset + fmt.OFF_STORETIMESTAMP, 8)
        return _I64.unpack_from(view)[0] if view is not None else -1

    def close(self) -> None:
        self.files.close()


class EntryRange(NamedTuple):
    """Consume-queue entries for queue offsets start, start + 1, ..."""

    start: int
    entries: np.ndarray

    @property
    def next_offset(self) -> int:
        return self.start + len(self.entries)


_EMPTY_ENTRIES = np.empty(0, dtype=fmt.CQ_DTYPE)


class ConsumeQueueReader:
    """One topic/queue's consume queue, read-only, up to the max offset the caller passes."""

    def __init__(self, store_dir: str, topic: str, queue_id: int, commitlog: CommitLogReader | None = None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.files = SegmentQueue(os.path.join(store_dir, "consumequeue", topic, str(queue_id)))
        self.commitlog = commitlog
        self._min_cache: tuple[int, int, int] | None = None  # (first file start, commitlog min, min offset)

    def refresh(self) -> None:
        self.files.refresh()

    def _entries_of(self, seg: ReadOnlySegment) -> np.ndarray:
        return seg.array.view(fmt.CQ_DTYPE)

    def min_offset(self, max_offset: int) -> int:
        """First readable queue offset: the first entry that is neither a blank pre-fill nor
        pointing below the commitlog's min offset (when a commitlog is attached)."""
        if not self.files.segments:
            self.refresh()
        segments = self.files.segments
        if not segments:
            return 0
        cl_min = self.commitlog.min_offset if self.commitlog is not None else 0
        cached = self._min_cache
        if cached is not None and cached[0] == segments[0].start and cached[1] == cl_min:
            return cached[2]
        for seg in segments:
            base = seg.start // fmt.CQ_ENTRY_SIZE
            if base >= max_offset:
                break
            entries = self._entries_of(seg)[: max_offset - base]
            stale = entries["size"] == BLANK_SIZE
            if cl_min:
                stale |= entries["offset"] < cl_min
            good = np.flatnonzero(~stale)
            if len(good):
                result = base + int(good[0])
                self._min_cache = (segments[0].start, cl_min, result)
                return result
        return max_offset

    def entries(self, offset: int, max_num: int, max_offset: int) -> EntryRange:
        """Up to `max_num` entries from `offset` (moved up to the min offset), below `max_offset`.

        A view of the mapped file when the range lies in one file, a copy when it spans two.
        """
        start = max(offset, self.min_offset(max_offset))
        count = min(max_num, max_offset - start)
        parts = []
        pos = start
        while count > 0:
            seg = self.files.find(pos * fmt.CQ_ENTRY_SIZE)
            if seg is None:
                break
            i = (pos * fmt.CQ_ENTRY_SIZE - seg.start) // fmt.CQ_ENTRY_SIZE
            part = self._entries_of(seg)[i : i + count]
            parts.append(part)
            pos += len(part)
            count -= len(part)
        if not parts:
            return EntryRange(start, _EMPTY_ENTRIES)
        return EntryRange(start, parts[0] if len(parts) == 1 else np.concatenate(parts))

    def offset_for_timestamp(self, timestamp: int, max_offset: int) -> int:
        """First queue offset stored at or after `timestamp` (ms); `max_offset` if all are older.

        Binary search: store timestamps never decrease along the log. Needs a commitlog.
        """
        if self.commitlog is None:
            raise ValueError("offset_for_timestamp needs a ConsumeQueueReader with a commitlog")
        lo, hi = self.min_offset(max_offset), max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entries(mid, 1, max_offset).entries
            ts = self.commitlog.store_timestamp_at(int(e[0]["offset"])) if len(e) and e[0]["size"] != BLANK_SIZE else -1
            if ts < timestamp:  # -1: the record is gone, so it is older
                lo = mid + 1
            else:
                hi = mid
        return lo

    def close(self) -> None:
        self.files.close()


class StoreReader:
    """A store directory opened read-only: the commitlog and consume queues on demand.

    Not thread-safe (refresh changes the segment lists): one reader per pulling thread, or a lock.
    """

    def __init__(self, store_dir: str) -> None:
        self.store_dir = os.path.abspath(store_dir)
        self.commitlog = CommitLogReader(self.store_dir)
        self._queues: dict[tuple[str, int], ConsumeQueueReader] = {}

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueueReader:
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            fmt.check_topic(topic)
            cq = self._queues[key] = ConsumeQueueReader(self.store_dir, topic, queue_id, self.commitlog)
        return cq

    def refresh(self) -> None:
        """Map new files and drop deleted ones everywhere (cleanup moved the min offsets)."""
        self.commitlog.refresh()
        for cq in self._queues.values():
            cq.refresh()

    def close(self) -> None:
        for cq in self._queues.values():
            cq.close()
        self._queues.clear()
        self.commitlog.close()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
