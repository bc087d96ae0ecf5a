"""Read-only access to the index/ folder of a store another process (the broker) writes.

`shmq admin msg query` and `msg view` look messages up by key while the broker runs: they map
the index files with ACCESS_READ and walk a key's chain themselves, so a lookup costs the
broker nothing (no control-queue request, no lock taken inside it). The writer's order
(entries, index count, slots; docs/FORMAT.md section 5.3) means a slot read *after* the count
may name an entry written after that count was read: the count is read after the slot, and
every entry number above it is ignored. Every number read from a file is bounded, so a torn or
hostile file yields fewer results, never an exception or a read outside the mapping.

An index file does not say which slot and entry counts it was made with (they are broker
settings, ``maxHashSlotNum`` and ``maxIndexNum``); ``IndexGeometry.detect`` finds them from the
file's size and its first and last entries.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from dataclasses import dataclass

import numpy as np

from shmq.codec.record import (
    INDEX_ENTRY_DTYPE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER,
    INDEX_HEADER_SIZE,
    INDEX_SLOT_SIZE,
    index_key_hash,
)

_ENTRY = struct.Struct(">iqii")  # key hash, phys offset, time diff (s), prev entry number
_I32 = struct.Struct(">i")
_H_COUNT = 36
_NAME_LEN = 17
DEFAULT_SLOT_NUM = 5_000_000  # BrokerConfig's max_hash_slot_num
DEFAULT_INDEX_NUM = 20_000_000  # BrokerConfig's max_index_num
_GEOMETRIES: dict[tuple[str, int, int, int], IndexGeometry] = {}  # (path, size, begin ts, begin phys)
_MAX_CACHED = 1024


@dataclass(frozen=True)
class IndexGeometry:
    """Slot and entry counts of one index file."""

    slot_num: int
    index_num: int

    @property
    def entry_base(self) -> int:
        return INDEX_HEADER_SIZE + self.slot_num * INDEX_SLOT_SIZE

    @staticmethod
    def for_entry_count(size: int, index_num: int) -> IndexGeometry | None:
        """The geometry of a ``size``-byte file holding ``index_num`` entries, if one fits."""
        rest = size - INDEX_HEADER_SIZE - index_num * INDEX_ENTRY_SIZE
        if index_num < 2 or rest <= 0 or rest % INDEX_SLOT_SIZE:
            return None
        return IndexGeometry(rest // INDEX_SLOT_SIZE, index_num)

    @classmethod
    def detect(cls, buf: bytes | mmap.mmap, tries: int = 3) -> IndexGeometry | None:
        """The geometry whose entry 1 and entry ``count`` agree with the header; None if the
        file has no entries (nothing to find in it) or no geometry fits.

        Entry 1 is the file's first put: phys offset = header begin phys offset, time diff 0,
        prev 0; the last entry holds the end phys offset and heads its slot's chain. The
        default settings are tried first; otherwise every entry count the size allows is
        tested at once with numpy (entries sit on a 20-byte grid counted from the file's end).
        A writer between a put's count and its end phys offset fails the test: the header is
        read again, up to ``tries`` times.
        """
        if len(buf) < INDEX_HEADER_SIZE + INDEX_SLOT_SIZE + 2 * INDEX_ENTRY_SIZE:
            return None
        for attempt in range(tries):
            _, _, begin_phys, end_phys, _, count = INDEX_HEADER.unpack_from(buf, 0)
            if count <= 0:
                return None
            found = cls._search(buf, count, begin_phys, end_phys)
            if found is not None:
                return found
            if attempt + 1 < tries:
                time.sleep(0.001)
        return None

    @classmethod
    def _search(cls, buf: bytes | mmap.mmap, count: int, begin_phys: int, end_phys: int) -> IndexGeometry | None:
        size = len(buf)
        defaults = cls.for_entry_count(size, DEFAULT_INDEX_NUM)
        if defaults is not None and cls._fits(buf, defaults, count, begin_phys, end_phys):
            return defaults
        grid = (size - INDEX_HEADER_SIZE - INDEX_SLOT_SIZE) // INDEX_ENTRY_SIZE  # largest index_num
        if count >= grid:
            return None
        rows = np.frombuffer(buf, INDEX_ENTRY_DTYPE, grid, size - grid * INDEX_ENTRY_SIZE)
        first, last = rows[: grid - count + 1], rows[count - 1 :]  # row j: entry 1 when index_num = grid - j + 1
        hits = np.flatnonzero(
            (first["phys_offset"] == begin_phys)
            & (first["time_diff"] == 0)
            & (first["prev"] == 0)
            & (last["phys_offset"] == end_phys)
        )
        del rows, first, last
        for j in hits[::-1]:  # the most slots first
            geometry = cls.for_entry_count(size, grid - int(j) + 1)
            if geometry is not None and cls._fits(buf, geometry, count, begin_phys, end_phys):
                return geometry
        return None

    @staticmethod
    def _fits(buf: bytes | mmap.mmap, g: IndexGeometry, count: int, begin_phys: int, end_phys: int) -> bool:
        if not 0 < count < g.index_num:
            return False
        h1, phys1, diff1, prev1 = _ENTRY.unpack_from(buf, g.entry_base + INDEX_ENTRY_SIZE)
        hn, physn, _, _ = _ENTRY.unpack_from(buf, g.entry_base + count * INDEX_ENTRY_SIZE)
        if (phys1, diff1, prev1) != (begin_phys, 0, 0) or physn != end_phys or h1 < 0 or hn < 0:
            return False
        (head,) = _I32.unpack_from(buf, INDEX_HEADER_SIZE + (hn % g.slot_num) * INDEX_SLOT_SIZE)
        answer: bool = head == count  # the newest entry heads its slot's chain
        return answer


class IndexFileReader:
    """One index file mapped read-only."""

    def __init__(self, path: str, mm: mmap.mmap) -> None:
        self.path = path
        self.mm = mm
        self.geometry: IndexGeometry | None = None

    @classmethod
    def open(cls, path: str) -> IndexFileReader | None:
        """Map ``path``; None if it is gone or empty."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            if os.fstat(fd).st_size < INDEX_HEADER_SIZE:
                return None
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        return cls(path, mm)

    def header(self) -> tuple[int, int, int, int, int, int]:
        """(begin ts, end ts, begin phys, end phys, slots used, index count)."""
        return INDEX_HEADER.unpack_from(self.mm, 0)

    def query(self, key_hash: int, begin_ts: int, end_ts: int, max_num: int) -> list[int]:
        """Phys offsets of published entries with this hash stored in [begin_ts, end_ts]
        (second precision), newest first (FORMAT.md 5.3's walk, bounded)."""
        g, mm = self.geometry, self.mm
        begin_file_ts, _, begin_phys = INDEX_HEADER.unpack_from(mm, 0)[:3]
        if g is None:
            g = self.geometry = _cached_geometry(self.path, mm, begin_file_ts, begin_phys)
            if g is None:
                return []
        (num,) = _I32.unpack_from(mm, INDEX_HEADER_SIZE + (key_hash % g.slot_num) * INDEX_SLOT_SIZE)
        (count,) = _I32.unpack_from(mm, _H_COUNT)  # after the slot: entries up to it are written
        count = min(count, g.index_num - 1)
        out: list[int] = []
        while 0 < num <= count and len(out) < max_num:
            h, phys, diff, prev = _ENTRY.unpack_from(mm, g.entry_base + num * INDEX_ENTRY_SIZE)
            ts = begin_file_ts + diff * 1000
            if ts < begin_ts - 999:  # diff is whole seconds, rounded down
                break
            if h == key_hash and ts <= end_ts:
                out.append(phys)
            num = prev if prev < num else 0  # chains only point back; anything else is damage
        return out

    def close(self) -> None:
        self.mm.close()


def _cached_geometry(path: str, mm: mmap.mmap, begin_ts: int, begin_phys: int) -> IndexGeometry | None:
    """``IndexGeometry.detect`` once per file for this process (a lookup maps the files anew
    each time, and detecting a non-default geometry reads the whole file)."""
    key = (path, len(mm), begin_ts, begin_phys)
    g = _GEOMETRIES.get(key)
    if g is None:
        g = IndexGeometry.detect(mm)
        if g is not None:
            if len(_GEOMETRIES) >= _MAX_CACHED:
                _GEOMETRIES.clear()
            _GEOMETRIES[key] = g
    return g


class IndexReader:
    """The index/ folder of a store, read-only; follows files the broker adds and deletes."""

    def __init__(self, store_dir: str) -> None:
        self.directory = os.path.join(store_dir, "index")
        self._files: dict[str, IndexFileReader] = {}

    def refresh(self) -> list[IndexFileReader]:
        """Map new files, let go of deleted ones; the files oldest first."""
        try:
            names = sorted(n for n in os.listdir(self.directory) if len(n) == _NAME_LEN and n.isdigit())
        except FileNotFoundError:
            names = []
        for gone in set(self._files) - set(names):
            self._files.pop(gone).close()
        for name in names:
            if name not in self._files:
                f = IndexFileReader.open(os.path.join(self.directory, name))
                if f is not None:
                    self._files[name] = f
        return [self._files[n] for n in names if n in self._files]

    def query(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[int]:
        """Phys offsets indexed under ``topic#key`` stored in [begin_ts, end_ts], newest first.

        Hashes collide and a file may be torn: callers read each record and check it."""
        key_hash = index_key_hash(topic, key)
        out: list[int] = []
        for f in reversed(self.refresh()):
            if len(out) >= max_num:
                break
            file_begin, file_end, _, _, _, count = f.header()
            if count > 0 and file_begin <= end_ts and file_end >= begin_ts:
                out += f.query(key_hash, begin_ts, end_ts, max_num - len(out))
        return out

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
