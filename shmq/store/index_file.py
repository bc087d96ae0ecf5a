"""Message-key index: RocketMQ's IndexFile (a hash table of chains on disk) and its folder.

One file = header, `slot_num` slots, `index_num` entries (layout in format.py). A slot holds
the number of the newest entry whose key hash maps to it; each entry holds the number of the
previous entry of the same slot, so a query walks one chain newest first. Entry numbers start
at 1 (0 = empty), so a file holds `index_num - 1` entries. Unlike RocketMQ, the header's index
count is the number of entries (0 for a new file), so an all-zero file is a valid empty one.

Writes go through one shared mmap in this order: entries, index count, slots, slots-used,
end phys offset, end timestamp. The end phys offset is the commit point of a put: after a
crash, `truncate` drops entries past it, repairs slots that point at dropped entries, and the
store re-dispatches those records. The record at the end itself may have only some of its keys
(the end moves with each key of a one-record put, and with each file a batch fills, also in the
middle of a record's keys): the re-dispatch adds the ones missing (`hashes_at` says which are there).
"""

from __future__ import annotations

import ctypes
import datetime
import errno
import mmap
import os
import struct
import threading
from collections.abc import Callable

import numpy as np

from shmq import _speedups
from shmq.codec.record import (
    INDEX_ENTRY_DTYPE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER,
    INDEX_HEADER_SIZE,
    INDEX_SLOT_DTYPE,
    INDEX_SLOT_SIZE,
    index_file_size,
    index_key_hash,
)
from shmq.errors import DiskFullError
from shmq.store import files, space
from shmq.store.mapped_file import NEVER, PAGE_SIZE, populate_write

_ENTRY = struct.Struct(">iqii")  # key hash, phys offset, time diff (s), prev entry number
assert _ENTRY.size == INDEX_ENTRY_SIZE
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
# Header field offsets (INDEX_HEADER order).
_H_BEGIN_TS, _H_END_TS, _H_BEGIN_PHYS, _H_END_PHYS, _H_SLOTS_USED, _H_COUNT = 0, 8, 16, 24, 32, 36
_MAX_DIFF = 0x7FFFFFFF
_NAME_FORMAT = "%Y%m%d%H%M%S%f"  # yyyyMMddHHmmssSSS once the microseconds are cut to 3 digits
_NAME_LEN = 17
_RESERVE_ENTRIES = 4096  # entries given disk blocks at a time ahead of the writer


class IndexFile:
    """One mmap'd index file; not thread-safe on its own (IndexService serialises access)."""

    # the header's fields, read with INDEX_HEADER.unpack_from
    _begin_ts: int
    _end_ts: int
    _begin_phys: int
    _end_phys: int
    _slots_used: int
    _count: int

    def __init__(self, path: str, slot_num: int, index_num: int) -> None:
        if slot_num <= 0 or index_num <= 1:
            raise ValueError(f"slot_num must be > 0 and index_num > 1, got {slot_num}, {index_num}")
        self.path = path
        self._slot_num = slot_num
        self._index_num = index_num
        size = index_file_size(slot_num, index_num)
        self._entry_base = INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE
        self._size = size
        self._reserved = 0  # bytes from 0 with disk blocks: writes past it could SIGBUS on a full disk
        # entries: past it the writer asks for the next reservation in the background (reserve_due)
        self.reserve_mark = NEVER
        # around each reservation: the writer's and the background one (reserve_ahead) must not
        # both write zeros over the same range, one of them after the other's data
        self._reserve_lock = threading.Lock()
        self._created = False
        fd = files.open_file(path)[0]
        try:
            actual = os.fstat(fd).st_size
            if actual == 0:  # new, or created by a run that died before ftruncate
                self._created = True
                os.ftruncate(fd, size)  # sparse: entry pages get their blocks as the writer nears them
            elif actual != size:
                raise ValueError(
                    f"{path}: {actual} bytes, expected {size} for slot_num={slot_num}, "
                    f"index_num={index_num}; was the index configured differently?"
                )
            self._mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        if self._created:
            try:  # header and slots (written anywhere) and the first entries, or no file
                self._reserve_to(self._entry_base + _RESERVE_ENTRIES * INDEX_ENTRY_SIZE)
            except BaseException:
                self._mm.close()
                os.close(fd)
                os.unlink(path)
                raise
        self._slots = np.frombuffer(self._mm, INDEX_SLOT_DTYPE, slot_num, INDEX_HEADER_SIZE)
        self._entries = np.frombuffer(self._mm, INDEX_ENTRY_DTYPE, index_num, self._entry_base)
        (self._begin_ts, self._end_ts, self._begin_phys, self._end_phys, self._slots_used, self._count) = (
            INDEX_HEADER.unpack_from(self._mm, 0)
        )
        if not 0 <= self._count < index_num:
            self.close()
            raise ValueError(f"{path}: header index count {self._count} outside [0, {index_num})")
        self._dirty = False

    # ------------------------------------------------------------------ header

    @property
    def index_count(self) -> int:
        return self._count

    @property
    def is_full(self) -> bool:
        return self._count >= self._index_num - 1

    @property
    def begin_timestamp(self) -> int:
        return self._begin_ts

    @property
    def end_timestamp(self) -> int:
        return self._end_ts

    @property
    def begin_phys_offset(self) -> int:
        return self._begin_phys

    @property
    def end_phys_offset(self) -> int:
        return self._end_phys

    def _set_begin(self, ts: int, phys: int) -> None:
        self._begin_ts, self._begin_phys = ts, phys
        _I64.pack_into(self._mm, _H_BEGIN_TS, ts)
        _I64.pack_into(self._mm, _H_BEGIN_PHYS, phys)

    def _set_end(self, ts: int, phys: int) -> None:
        """Commit point of a put: written last, end phys before end ts."""
        self._end_ts, self._end_phys = ts, phys
        _I32.pack_into(self._mm, _H_SLOTS_USED, self._slots_used)
        _I64.pack_into(self._mm, _H_END_PHYS, phys)
        _I64.pack_into(self._mm, _H_END_TS, ts)

    # ------------------------------------------------------------------ writes

    def reserve(self, count: int) -> None:
        """Give the header, the slots and the next ``count`` entries disk blocks (DiskFullError if
        the disk has none), ``_RESERVE_ENTRIES`` more at a time."""
        end = self._entry_base + (self._count + 1 + count) * INDEX_ENTRY_SIZE
        if end > self._reserved:
            with self._reserve_lock:
                if end > self._reserved:
                    self._reserve_to(max(end, self._reserved + _RESERVE_ENTRIES * INDEX_ENTRY_SIZE))

    def reserve_due(self) -> bool:
        """Whether the entries came within half a reserve step of the reserved end."""
        return self._count >= self.reserve_mark

    def reserve_ahead(self) -> None:
        """Reserve the next ``_RESERVE_ENTRIES`` entries and map their pages, in the allocator's
        thread (AllocateMappedFileService.keep_reserved): the plain put then finds them reserved.
        A full disk or a closed file stops it quietly; the writer's own reserve() reports it."""
        with self._reserve_lock:
            start = self._reserved
            # the first reservation (at creation) scans pages: not here
            if self._mm.closed or not start or start >= self._size:
                return
            try:
                self._reserve_to(start + _RESERVE_ENTRIES * INDEX_ENTRY_SIZE)
                first = start & ~(PAGE_SIZE - 1)
                address = ctypes.addressof(ctypes.c_char.from_buffer(self._mm))
                populate_write(address + first, self._reserved - first)  # a fault avoided, or nothing
            except OSError:
                return

    def reserved_for(self, count: int) -> bool:
        """True if the next ``count`` entries fit and have their blocks (the put path's check)."""
        return self._entry_base + (self._count + 1 + count) * INDEX_ENTRY_SIZE <= self._reserved

    def _reserve_to(self, stop: int) -> None:
        """fallocate, then zeros written through the descriptor (why: MappedFile.reserve).

        Above ``_reserved`` nothing is written yet. The first reservation of a file found at
        start covers slots and entries written anywhere: there only the pages that are all zeros
        (holes or never written) get zeros, which changes no byte."""
        start, stop = self._reserved, min(self._size, stop)
        space.reserve(self.path, start, stop - start)
        if start:
            space.write_zeros(self.path, start, stop)
        elif self._created:
            self._populate_new(stop)
        else:
            pages = np.frombuffer(self._mm, np.uint8, stop // PAGE_SIZE * PAGE_SIZE).reshape(-1, PAGE_SIZE)
            empty = np.flatnonzero(~pages.any(axis=1))
            del pages
            runs = np.split(empty, np.flatnonzero(np.diff(empty) != 1) + 1) if len(empty) else []
            for run in runs:  # each run of empty pages: one write
                space.write_zeros(self.path, int(run[0]) * PAGE_SIZE, (int(run[-1]) + 1) * PAGE_SIZE)
            full = stop // PAGE_SIZE * PAGE_SIZE  # a partial last page: zeros over it only if it is all zeros
            if full < stop and not np.frombuffer(self._mm, np.uint8, stop - full, full).any():
                space.write_zeros(self.path, full, stop)
        self._reserved = stop
        self.reserve_mark = (
            (stop - self._entry_base) // INDEX_ENTRY_SIZE - _RESERVE_ENTRIES // 2 if stop < self._size else NEVER
        )

    def _populate_new(self, stop: int) -> None:
        """A new file's header, slot table and first entries, fallocated: mapped writable here
        (MADV_POPULATE_WRITE), where a fault that finds no block is an error, not a SIGBUS.

        Zeros written through the descriptor would reserve them too, but each later write
        fault into such a page cost ~2 us more on ext4, and the slot table takes one write at a
        random page per key: ``IndexService.put`` 2.8 us with holes, 5.1 us after zeros, 3.0 us
        after this (docs/BENCHMARKS.md, issue 10). Kernels before 5.14 get the zeros."""
        err = populate_write(ctypes.addressof(ctypes.c_char.from_buffer(self._mm)), stop)
        if err == 0:
            return
        if err == errno.EINVAL:
            space.write_zeros(self.path, 0, stop)
            return
        full = DiskFullError(f"no space left for {self.path} ({stop} bytes of header and slots): {os.strerror(err)}")
        full.wanted = stop
        raise full

    @property
    def room(self) -> int:
        """Entries it can still take."""
        return self._index_num - 1 - self._count

    def put_batch(self, key_hashes: np.ndarray, phys_offsets: np.ndarray, store_timestamps: np.ndarray) -> int:
        """Index records in phys order (31-bit hashes, store timestamps in ms); returns how many fit."""
        n = min(len(key_hashes), self._index_num - 1 - self._count)
        if n <= 0:
            return 0
        hashes = np.asarray(key_hashes[:n], dtype=np.int64)
        phys = np.asarray(phys_offsets[:n], dtype=np.int64)
        ts = np.asarray(store_timestamps[:n], dtype=np.int64)
        self.reserve(n)  # IndexService.reserve came first: only a guard against SIGBUS
        if self._count == 0:
            self._set_begin(int(ts[0]), int(phys[0]))
        first = self._count + 1
        self._count = first + n - 1
        self._slots_used += put_entries(
            self._mm, self._slot_num, self._entry_base, first, self._begin_ts, hashes, phys, ts
        )
        self._set_end(int(ts[-1]), int(phys[-1]))
        self._dirty = True
        return n

    def plain_state(self) -> tuple[mmap.mmap, int, int, int, int, int, int]:
        """What the plain put (shmq.store.write.plain_put) writes from: the map, slot count, entry base,
        index count, begin timestamp, slots used and the reserved end."""
        return (
            self._mm,
            self._slot_num,
            self._entry_base,
            self._count,
            self._begin_ts,
            self._slots_used,
            self._reserved,
        )

    def note_plain(self, n: int, emptied: int) -> None:
        """The plain put wrote ``n`` entries (``emptied`` slots newly used) and the header as
        put_batch would: take the header's values as this file's own."""
        (self._begin_ts, self._end_ts, self._begin_phys, self._end_phys, _, _) = INDEX_HEADER.unpack_from(self._mm, 0)
        self._count += n
        self._slots_used += emptied
        self._dirty = True

    def put(self, key_hash: int, phys_offset: int, store_timestamp: int) -> bool:
        """Index one record (same layout as put_batch, without numpy's per-call cost)."""
        num = self._count + 1
        if num >= self._index_num:
            return False
        if self._entry_base + (num + 1) * INDEX_ENTRY_SIZE > self._reserved:  # a guard against SIGBUS
            self.reserve(1)
        if num == 1:
            self._set_begin(store_timestamp, phys_offset)
        mm = self._mm
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self._slot_num) * INDEX_SLOT_SIZE
        (old,) = _I32.unpack_from(mm, slot_pos)
        diff = (store_timestamp - self._begin_ts) // 1000
        if not 0 <= diff <= _MAX_DIFF:
            diff = 0 if diff < 0 else _MAX_DIFF
        _ENTRY.pack_into(mm, self._entry_base + num * INDEX_ENTRY_SIZE, key_hash, phys_offset, diff, old)
        self._count = num
        _I32.pack_into(mm, _H_COUNT, num)
        _I32.pack_into(mm, slot_pos, num)
        if old == 0:
            self._slots_used += 1
            _I32.pack_into(mm, _H_SLOTS_USED, self._slots_used)
        # _set_end inlined: this path is per record.
        self._end_ts, self._end_phys, self._dirty = store_timestamp, phys_offset, True
        _I64.pack_into(mm, _H_END_PHYS, phys_offset)
        _I64.pack_into(mm, _H_END_TS, store_timestamp)
        return True

    # ------------------------------------------------------------------ reads

    def query(self, key_hash: int, begin_ts: int, end_ts: int, max_num: int) -> list[int]:
        """Phys offsets of entries with this hash stored in [begin_ts, end_ts] (s precision), newest first.

        Stops at the first entry older than begin_ts, as RocketMQ does: a chain is in store order.
        """
        out: list[int] = []
        mm, count, base, begin = self._mm, self._count, self._entry_base, self._begin_ts
        (num,) = _I32.unpack_from(mm, INDEX_HEADER_SIZE + (key_hash % self._slot_num) * INDEX_SLOT_SIZE)
        while 0 < num <= count and len(out) < max_num:
            h, phys, diff, prev = _ENTRY.unpack_from(mm, base + num * INDEX_ENTRY_SIZE)
            ts = begin + diff * 1000
            if ts < begin_ts:
                break
            if h == key_hash and ts <= end_ts:
                out.append(phys)
            num = prev if prev < num else 0  # chains only point back; anything else is damage
        return out

    def hashes_at(self, phys_offset: int) -> np.ndarray:
        """Key hashes of this file's entries for the record at ``phys_offset`` (entries are in
        phys order)."""
        phys = self._entries["phys_offset"][1 : self._count + 1]
        lo = int(np.searchsorted(phys, phys_offset, "left"))
        hi = int(np.searchsorted(phys, phys_offset, "right"))
        del phys  # a view of the map: close() fails while one is alive
        return self._entries["key_hash"][1 + lo : 1 + hi].astype(np.int64)

    # ------------------------------------------------------------------ repair

    def truncate(self, phys_end: int) -> None:
        """Drop entries at phys >= phys_end or past the committed end; repair the slots.

        Also the crash sanitiser: entries written after the last committed end phys offset
        (and slots pointing at them or past the index count) are undone, so re-dispatching
        those records neither loses nor duplicates them.
        """
        old = self._count
        new = 0  # no committed put yet (end timestamp still 0): nothing survives
        if self._end_ts > 0:
            cut = min(phys_end, self._end_phys + 1)
            new = int(np.searchsorted(self._entries["phys_offset"][1 : old + 1], cut, side="left"))
        self._count = new
        _I32.pack_into(self._mm, _H_COUNT, new)

        slots, prev_of = self._slots, self._entries["prev"]
        bad = np.flatnonzero((slots > new) | (slots < 0))
        while bad.size:  # walk each damaged chain back, one step a round, until it is below the cut
            at = slots[bad].astype(np.int64)
            ok = (at > 0) & (at < self._index_num)
            back = np.zeros_like(at)
            back[ok] = prev_of[at[ok]]
            back[back >= at] = 0  # a link that does not go back ends the chain
            back[back < 0] = 0
            slots[bad] = back
            bad = bad[back > new]
        self._entries[new + 1 : old + 1] = 0

        self._slots_used = int(np.count_nonzero(slots))
        if new == 0:
            self._set_begin(0, 0)
            self._set_end(0, 0)
        elif new < old:
            last = self._entries[new]
            self._set_end(self._begin_ts + int(last["time_diff"]) * 1000, int(last["phys_offset"]))
        else:  # nothing dropped: keep the exact (ms) end timestamp; rounding it to s would change it
            _I32.pack_into(self._mm, _H_SLOTS_USED, self._slots_used)
        self._dirty = True

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        """fdatasync the file (it releases the GIL, mmap.flush does not); no-op if clean."""
        if self._dirty:
            self._dirty = False
            os.fdatasync(self._fd)

    def close(self) -> None:
        """Unmap and close; numpy views must go first or mmap.close raises BufferError."""
        with self._reserve_lock:  # not while reserve_ahead maps pages
            if self._mm.closed:
                return
            del self._slots, self._entries
            self._mm.close()
            os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        os.unlink(self.path)


def _next_file_name(last: str | None) -> str:
    """Creation time as yyyyMMddHHmmssSSS (RocketMQ's name), forced above the last name so that
    name order stays creation order through clock steps and several rolls in one millisecond."""
    name = datetime.datetime.now().strftime(_NAME_FORMAT)[:_NAME_LEN]
    if last is not None and name <= last:
        bumped = datetime.datetime.strptime(last + "000", _NAME_FORMAT) + datetime.timedelta(milliseconds=1)
        name = bumped.strftime(_NAME_FORMAT)[:_NAME_LEN]
    return name


def _check_entries(size: int, slot_num: int, entry_base: int, first: int, n: int, n_phys: int, n_ts: int) -> None:
    """The bounds ``put_entries`` needs (its compiled twin raises the same errors)."""
    if n < 1 or n_phys != n or n_ts != n:
        raise ValueError(f"put_entries: {n} hashes, {n_phys} phys offsets, {n_ts} timestamps")
    if (
        slot_num < 1
        or first < 1
        or INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE > entry_base
        or entry_base + (first + n) * INDEX_ENTRY_SIZE > size
    ):
        raise ValueError(
            f"put_entries: entries {first}..{first + n - 1} at {entry_base} or {slot_num} slots "
            f"do not fit a file of {size} bytes"
        )


def put_entries(
    mm: mmap.mmap | bytearray,
    slot_num: int,
    entry_base: int,
    first: int,
    begin_ts: int,
    hashes: np.ndarray,
    phys: np.ndarray,
    ts: np.ndarray,
) -> int:
    """Write entries ``first``.. for a batch (int64 arrays, phys order), then the header's
    index count, then the slots; returns how many slots were empty before (slots used grows by
    that). The order is the crash contract of the module docstring: a slot never points at an
    entry that is not written yet. The compiled twin (shmq._speedups._store) does the same in
    one pass without numpy's temporaries."""
    n = len(hashes)
    _check_entries(len(mm), slot_num, entry_base, first, n, len(phys), len(ts))
    # Group the batch by slot (stable, so entry numbers rise within a group): a group's
    # first entry links to the slot's old head, each later one to its predecessor.
    all_slots = np.frombuffer(mm, INDEX_SLOT_DTYPE, slot_num, INDEX_HEADER_SIZE)
    slots = hashes % slot_num
    order = np.argsort(slots, kind="stable")
    s_sorted = slots[order]
    head = np.empty(n, dtype=bool)
    head[0] = True
    np.not_equal(s_sorted[1:], s_sorted[:-1], out=head[1:])
    old_heads = all_slots[s_sorted[head]]
    nums_sorted = order + first
    prev_sorted = np.empty(n, dtype=np.int64)
    prev_sorted[1:] = nums_sorted[:-1]
    prev_sorted[head] = old_heads
    prev = np.empty(n, dtype=np.int64)
    prev[order] = prev_sorted

    diff = ts - begin_ts
    diff //= 1000
    np.maximum(diff, 0, out=diff)  # a clock that stepped back must not wrap (np.clip is 2x slower)
    np.minimum(diff, _MAX_DIFF, out=diff)

    block = np.frombuffer(mm, INDEX_ENTRY_DTYPE, n, entry_base + first * INDEX_ENTRY_SIZE)
    block["key_hash"] = hashes
    block["phys_offset"] = phys
    block["time_diff"] = diff
    block["prev"] = prev
    _I32.pack_into(mm, _H_COUNT, first + n - 1)
    tail = np.empty(n, dtype=bool)
    tail[-1] = True
    tail[:-1] = head[1:]
    all_slots[s_sorted[tail]] = nums_sorted[tail]
    return int(np.count_nonzero(old_heads == 0))


put_entries = _speedups.pick("_store", "put_entries", put_entries)


class IndexService:
    """The index/ folder: a list of IndexFiles, newest last; rolls to a new file when full.

    `_lock` serialises puts, queries and file removal, so a query never walks a closed map;
    removal also takes `_remove_lock`, which flush holds instead so fdatasync never blocks puts.
    """

    def __init__(self, index_dir: str, slot_num: int, index_num: int) -> None:
        self._dir = index_dir
        self._slot_num = slot_num
        self._index_num = index_num
        self._lock = threading.Lock()
        self._remove_lock = threading.Lock()
        files.make_dirs(index_dir)
        names = sorted(n for n in os.listdir(index_dir) if len(n) == _NAME_LEN and n.isdigit())
        self._files: list[IndexFile] = []
        self._spare: IndexFile | None = None  # the next file, made ahead by reserve() for a put that rolls
        self.before_new_file: Callable[[], None] | None = None  # the store's disk check
        try:
            for name in names:
                self._files.append(IndexFile(os.path.join(index_dir, name), slot_num, index_num))
        except BaseException:
            self.close()
            raise

    @property
    def files(self) -> list[IndexFile]:
        """A snapshot of the files, oldest first."""
        return list(self._files)

    def _writable(self) -> IndexFile:
        if not self._files or self._files[-1].is_full:
            if self._spare is None:
                self._spare = self._new_file()
            self._files.append(self._spare)
            self._spare = None
        return self._files[-1]

    def _new_file(self) -> IndexFile:
        if self.before_new_file is not None:
            self.before_new_file()
        last = self._files[-1] if self._files else None
        path = os.path.join(self._dir, _next_file_name(os.path.basename(last.path) if last else None))
        return IndexFile(path, self._slot_num, self._index_num)

    def reserve(self, count: int) -> None:
        """Give the next ``count`` entries disk blocks before anything is written, making the
        next file now if they will roll into it (DiskFullError if the disk cannot)."""
        newest = self._files[-1] if self._files else None
        if newest is not None and newest.reserved_for(count):
            return
        with self._lock:
            f = self._writable()
            f.reserve(min(count, f.room))
            if count > f.room:
                if self._spare is None:
                    self._spare = self._new_file()
                self._spare.reserve(min(count - f.room, self._spare.room))

    def put_batch(self, key_hashes: np.ndarray, phys_offsets: np.ndarray, store_timestamps: np.ndarray) -> None:
        """Index all of them, rolling to new files as they fill."""
        hashes = np.asarray(key_hashes, dtype=np.int64)
        phys = np.asarray(phys_offsets, dtype=np.int64)
        ts = np.asarray(store_timestamps, dtype=np.int64)
        done = 0
        with self._lock:
            while done < len(hashes):
                done += self._writable().put_batch(hashes[done:], phys[done:], ts[done:])

    @property
    def lock(self) -> threading.Lock:
        """Held by every put and query (the plain put holds it around its index writes)."""
        return self._lock

    def newest_writable(self) -> IndexFile | None:
        """The newest file if it can take an entry (the plain put's file), else None."""
        return self._files[-1] if self._files and not self._files[-1].is_full else None

    def put(self, key_hashes: list[int], phys_offset: int, store_timestamp: int) -> None:
        """Index the keys of one record (the single-message path: no numpy per-call cost)."""
        with self._lock:
            for h in key_hashes:
                self._writable().put(h, phys_offset, store_timestamp)  # _writable never returns a full file

    def query(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[int]:
        """Phys offsets of records indexed under topic#key, newest first, at most max_num.

        Hashes collide: callers must read each record and check its key.
        """
        key_hash = index_key_hash(topic, key)
        out: list[int] = []
        with self._lock:
            for f in reversed(self._files):
                if len(out) >= max_num:
                    break
                if f.index_count and f.begin_timestamp <= end_ts and f.end_timestamp >= begin_ts:
                    out += f.query(key_hash, begin_ts, end_ts, max_num - len(out))
        return out

    def hashes_at(self, phys_offset: int) -> np.ndarray:
        """Key hashes indexed for the record at ``phys_offset``, looked up in the two newest files
        that hold entries: enough for the index's last record (``end_phys_offset``), the one a
        crash may have left with only some of its keys (in one file, or split over two)."""
        with self._lock:
            used = [f for f in self._files if f.index_count][-2:]
            parts = [f.hashes_at(phys_offset) for f in used]
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    def _newest_used(self) -> IndexFile | None:
        return next((f for f in reversed(self._files) if f.index_count), None)

    @property
    def end_phys_offset(self) -> int:
        """Phys offset of the last indexed record, -1 if none: dispatch skips records below it."""
        f = self._newest_used()
        return f.end_phys_offset if f else -1

    @property
    def last_store_timestamp(self) -> int:
        """Store timestamp of the last indexed record (the checkpoint's index field), 0 if none."""
        f = self._newest_used()
        return f.end_timestamp if f else 0

    def truncate(self, phys_end: int) -> None:
        """Forget records at phys >= phys_end: delete whole (and empty) files, cut the one that
        straddles. The newest remaining file always goes through IndexFile.truncate, which also
        sanitises it after a crash.
        """
        with self._remove_lock, self._lock:
            while self._files and (not self._files[-1].index_count or self._files[-1].begin_phys_offset >= phys_end):
                self._files.pop().destroy()
            if self._files:
                self._files[-1].truncate(phys_end)

    def delete_files_below(self, min_phys_offset: int) -> int:
        """Delete the oldest files whose records all lie below min_phys_offset (never the newest)."""
        deleted = 0
        with self._remove_lock, self._lock:
            while len(self._files) > 1 and self._files[0].end_phys_offset < min_phys_offset:
                self._files.pop(0).destroy()
                deleted += 1
        return deleted

    def flush(self) -> None:
        with self._remove_lock:
            for f in self.files:
                f.flush()

    def close(self) -> None:
        with self._remove_lock, self._lock:
            for f in self._files:
                f.close()
            self._files = []
            if self._spare is not None:  # made ahead, never written
                self._spare.destroy()
                self._spare = None
