"""Fixed-size mmap'd segment files named by their 20-digit start offset (RocketMQ's MappedFile).

The commitlog and every consume queue are a MappedFileQueue: a list of equal-size segments,
the last one being written. The commitlog's next segment is created in a background thread
before it is needed, and its pages are brought into memory a bounded distance
(``warmAheadSize``) ahead of the writer, so the writer does not stall on page faults and a
small store does not hold a whole segment of memory and disk.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from shmq.codec import record as fmt
from shmq.codec.buffers import ReadBuffer
from shmq.errors import DiskFullError
from shmq.store import files, space

if TYPE_CHECKING:
    from shmq.store.index_file import IndexFile

log = logging.getLogger(__name__)
PAGE_SIZE = mmap.PAGESIZE
MADV_POPULATE_WRITE = 23  # Linux 5.14+; Python 3.11's mmap module does not name it
_WARM_CHUNK = 1 << 20  # populated at a time ahead of the writer
_FIRST_BYTES = 64 << 10  # written through the descriptor when a segment is created
_WARM_STEP = 4 << 20  # populated (GIL held) and synced at a time
MS_SYNC = 4
_libc = ctypes.CDLL(None, use_errno=True)
_msync = _libc.msync  # through ctypes: the GIL is released while the disk works (mmap.flush keeps it)
_msync.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_msync.restype = ctypes.c_int
_madvise = _libc.madvise  # through ctypes: populating pages ahead of the writer runs without the GIL
_madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_madvise.restype = ctypes.c_int
NEVER = 1 << 62  # a warm mark no writer reaches
RESERVE_STEP = 64 << 10  # default bytes of disk reserved at a time ahead of a writer


def sync_range(address: int, length: int) -> None:
    """msync(MS_SYNC) of mapped memory: writes back and waits for the dirty pages of that range only."""
    if _msync(address, length, MS_SYNC) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"msync: {os.strerror(err)}")


def populate_write(address: int, length: int) -> int:
    """MADV_POPULATE_WRITE over mapped memory: 0, or the errno (EINVAL: a kernel before 5.14;
    EFAULT: a page could not be made writable, e.g. no block on a full disk; never a SIGBUS)."""
    return 0 if _madvise(address, length, MADV_POPULATE_WRITE) == 0 else ctypes.get_errno()


class MappedFile:
    """One segment: the whole file mapped shared, written at `wrote_position`."""

    def __init__(self, path: str, size: int, create: bool = True, reserve_step: int = RESERVE_STEP) -> None:
        self.path = path
        self.size = size
        self.reserve_step = reserve_step
        # bytes from 0 with disk blocks: a write through the mapping past it could SIGBUS on a full
        # disk. No data is ever above it (see reserve): a loaded file starts at its size, never
        # reserved again, until recovery sets it at the end of its data (zero_from).
        self.reserved_position = size
        # the writer asks for the next step in the background once wrote_position reaches this
        # (AllocateMappedFileService.keep_reserved): set by each reservation, half a step before its end
        self.reserve_mark = NEVER
        self._reserve_lock = threading.Lock()
        start = fmt.parse_offset_file_name(os.path.basename(path))
        if start is None:
            raise ValueError(f"{path}: segment names are 20-digit offsets")
        self.file_from_offset: int = start
        # The descriptor is closed once mapped (mmap keeps a duplicate): a broker with 10,000
        # queues holds one descriptor per segment, not two. flush and warm open their own.
        fd = files.open_file(path)[0] if create else os.open(path, os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            self.created = actual == 0 and create
            if self.created:
                self.reserved_position = 0
                os.ftruncate(fd, size)
                # The first write into a brand-new sparse file costs ~1.7 ms on ext4 (its first
                # block allocation, measured); reserving its blocks through the descriptor first
                # (fallocate, then zeros) costs ~0.1 ms. Matters with thousands of consume queues,
                # each created on its first message. A disk that cannot give them refuses the file.
                try:
                    self.reserve(min(_FIRST_BYTES, size))
                except BaseException:
                    os.unlink(path)
                    raise
            elif actual != size:
                raise ValueError(f"{path} is {actual} bytes, expected segment size {size}")
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.array = np.frombuffer(self.mm, dtype=np.uint8)
        self.view = memoryview(self.mm)
        self._address = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))  # for msync; 0 once closed
        self.wrote_position = 0
        self.flushed_position = 0
        self.warmed_position = 0  # pages below are in memory (warm() or populate())
        self.warm_mark = NEVER  # the writer asks for more warming once wrote_position reaches this
        self._write_fd = -1  # opened by the first write(), closed by end_writes() or close()
        self._fd_lock = threading.Lock()  # a flush thread may sync it while the writer closes it
        self._map_lock = threading.Lock()  # the warm-ahead thread may populate it while it is closed

    @property
    def file_to_offset(self) -> int:
        return self.file_from_offset + self.size

    def data_end(self) -> int:
        """Where the file's first hole starts (its size if none): what recovery may read of it.

        On tmpfs even a read through a shared mapping gives a hole a page, and on a full tmpfs
        that read is a SIGBUS; bytes past the first hole were never written anyway."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return min(self.size, os.lseek(fd, 0, os.SEEK_HOLE))
        except OSError:  # a file system without SEEK_HOLE: all of it
            return self.size
        finally:
            os.close(fd)

    def reserve(self, end: int, step: bool = True) -> None:
        """Make sure bytes up to ``end`` have disk blocks, reserving ``reserve_step`` ahead at a
        time unless ``step`` is False (one fallocate per step, not per write); DiskFullError,
        with nothing written, if the disk has none. Any thread may call it.

        fallocate, not only zeros written through a descriptor: on an almost full ext4 a write
        fault into a page whose blocks were only reserved by a buffered write (delayed
        allocation) still died with SIGBUS (measured on an 80 MB image); into fallocated blocks
        it never did. Then zeros are written over the range (space.write_zeros: a fault into a
        fallocated, "unwritten" ext4 page could still need a block; it also cost a journal
        transaction, 1.3 ms on a busy journal, against 4 us into a page-cache page). Safe: no
        data is ever above ``reserved_position`` (writers write only below it; it only rises,
        under the lock, except in recovery, which runs alone).
        """
        with self._reserve_lock:
            start = self.reserved_position
            if end <= start:
                return
            stop = min(self.size, max(end, start + self.reserve_step * step) + PAGE_SIZE - 1 & ~(PAGE_SIZE - 1))
            try:
                space.reserve(self.path, start, stop - start)
            except DiskFullError:  # the last bit of a disk still takes what fits
                stop = min(self.size, end + PAGE_SIZE - 1 & ~(PAGE_SIZE - 1))
                space.reserve(self.path, start, stop - start)
            space.write_zeros(self.path, start, stop)
            self.reserved_position = stop
            self.reserve_mark = stop - self.reserve_step // 2 if stop < self.size else NEVER

    def reserve_due(self) -> bool:
        """Whether the writer came within half a reserve step of the reserved end."""
        return self.wrote_position >= self.reserve_mark

    def reserve_ahead(self) -> None:
        """Reserve the next step past the writer and map its pages, off the writer's thread (the
        allocator's): the writer then finds the room reserved and its pages present. A full disk
        or a closed file stops it quietly; the writer's own reservation reports it."""
        self.populate(min(self.size, max(self.reserved_position, self.wrote_position) + self.reserve_step))

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.size

    @property
    def remaining(self) -> int:
        return self.size - self.wrote_position

    def warm(
        self,
        stop: Callable[[], bool] = lambda: False,
        sync: bool = False,
        rest: Callable[[float], object] | None = None,
        end: int | None = None,
    ) -> None:
        """Get the pages up to ``end`` (default: all) of a segment nobody writes yet into the page
        cache and this mapping, so appends there never fault.

        A new file is filled with zeros through a descriptor (pwrite releases the GIL and costs
        about an eighth of the CPU of faulting fresh pages in one by one through the mapping,
        measured on the dev VMs), then MADV_POPULATE_WRITE maps the pages; kernels without it
        get one touch per page. Works in chunks, so the GIL (held by madvise) is never held
        long. With ``sync`` (SYNC_FLUSH stores) each chunk is synced, as RocketMQ does with
        flushLeastPagesWhenWarmMapedFile: otherwise the first fdatasync of data in this segment
        could have to write every zero page too. ``stop()`` ends it between chunks; ``rest(t)``
        is called after each synced chunk that took ``t`` seconds (the allocator pauses there,
        so the writer's own fdatasyncs do not queue behind a stream of zero pages).
        """
        limit = self.size if end is None else min(end, self.size)
        fd = os.open(self.path, os.O_WRONLY) if self.created and sync else -1
        try:
            for start in range(0, limit, _WARM_STEP):
                if stop():
                    return
                stop_at = min(start + _WARM_STEP, limit)
                began = time.monotonic()
                self.reserve(stop_at, step=False)  # and zeros written through a descriptor (a new file)
                try:
                    self.mm.madvise(MADV_POPULATE_WRITE, start, stop_at - start)
                except OSError:  # kernels before 5.14
                    self.array[start:stop_at:PAGE_SIZE] = self.array[start:stop_at:PAGE_SIZE]
                self.warmed_position = stop_at
                if sync and fd >= 0:
                    os.fdatasync(fd)
                    if rest is not None:
                        rest(time.monotonic() - began)
        finally:
            if fd >= 0:
                os.close(fd)

    def populate(self, end: int) -> bool:
        """Fault the pages from ``warmed_position`` to ``end`` into this mapping while the writer
        may be writing below them; False if the kernel cannot (before 5.14) or the file is closed.

        The blocks are reserved first (reserve() writes zeros only above every written byte);
        then only MADV_POPULATE_WRITE is safe: it maps pages without changing a byte, whereas
        warm()'s fallback touches pages, which could overwrite a record being appended.
        """
        end = min(end, self.size)
        try:
            self.reserve(end, step=False)
        except OSError:  # a full disk (the writer gets the error when it gets there) or a closed file
            return False
        while self.warmed_position < end:
            start = self.warmed_position & ~(PAGE_SIZE - 1)  # madvise takes page-aligned addresses
            stop_at = min(start + _WARM_CHUNK, end)
            with self._map_lock:
                if not self._address:
                    return False
                if _madvise(self._address + start, stop_at - start, MADV_POPULATE_WRITE) != 0:
                    return False
            self.warmed_position = stop_at
        return True

    def write(self, data: ReadBuffer, pos: int) -> None:
        """Write ``data`` at ``pos`` through the file (pwrite), not the mapping; the mapping sees
        it at once (one page cache).

        For stores that fdatasync before they answer: on ext4 an fdatasync after writes through
        a mapping cost ~1 ms here (each write fault journals the inode), after pwrite into the
        same allocated blocks ~0.14 ms (measured on the dev VM, 300 syncs of 200 bytes each).
        """
        if self._write_fd < 0:
            self._write_fd = os.open(self.path, os.O_WRONLY)
        view = memoryview(data).cast("B")
        self.reserve(pos + len(view))
        while len(view):
            n = os.pwrite(self._write_fd, view, pos)
            view, pos = view[n:], pos + n

    def flush(self, datasync: bool = False) -> int:
        """Make everything written so far durable; returns the flushed position.

        Syncs only the pages from the last flush to ``wrote_position`` (msync of that range),
        not the whole file (fdatasync). Writing a page back write-protects it in every mapping,
        and the next store into it faults (~10 us per 4 KiB page on ext4, measured): an
        fdatasync also cleaned the warmed pages ahead of the writer, so every page it later
        filled faulted once, which made a 370 KB batch copy take ~0.9 ms instead of ~55 us.

        ``datasync``: a segment written through its descriptor (``write``: the SYNC_FLUSH
        commitlog, whose writer never stores through the mapping, so nothing faults) is synced
        with fdatasync on that descriptor instead. The same durability: on Linux
        ``msync(MS_SYNC)`` of a shared file mapping is ``vfs_fsync_range(file, start, end, 1)``
        (mm/msync.c), and ``fdatasync(fd)`` is that call over the whole file
        (``vfs_fsync_range(file, 0, LLONG_MAX, 1)``, fs/sync.c); a file has one page cache, so
        the pages ``pwrite`` dirtied and those stored through any MAP_SHARED mapping of it are
        the same pages, and fdatasync(2) writes every dirty one back, flushes the disk's cache
        and the metadata needed to read them (the segment's size is fixed when it is created).
        Measured with 8 SYNC_FLUSH senders on the 2-core VM (three interleaved pairs): a group
        flush of ~1.5 ms (msync) took ~1.05 ms, and the broker loop's CPU per send fell ~10 %.
        A segment whose descriptor is closed (filled, ``end_writes``) takes the msync.
        """
        pos = self.wrote_position
        if pos > self.flushed_position:
            start = self.flushed_position & ~(PAGE_SIZE - 1)
            with self._fd_lock:
                if datasync and self._write_fd >= 0:
                    os.fdatasync(self._write_fd)
                elif self._address:
                    sync_range(self._address + start, pos - start)
            self.flushed_position = pos
        return pos

    def zero_from(self, pos: int) -> None:  # recovery: no other thread uses the file yet
        """Clear the bytes from `pos` to the end: a truncated tail must not look like records later.

        Recovery calls it, also on a full disk, so it writes only pages that hold data (they
        have their blocks): never a hole, whose write (and on tmpfs even its read) is a SIGBUS
        there. Holes are found with SEEK_DATA. Punching the tail out instead was tried: on a
        full 1 KiB-block ext4 the next write into the page before the punched range faulted."""
        first_page = min(self.size, pos + PAGE_SIZE - 1 & ~(PAGE_SIZE - 1))
        self.array[pos:first_page] = 0
        fd = os.open(self.path, os.O_RDONLY)
        try:
            at = first_page
            while at < self.size:
                try:
                    data = os.lseek(fd, at, os.SEEK_DATA) & ~(PAGE_SIZE - 1)
                except OSError:  # ENXIO: no data after `at`
                    break
                end = min(self.size, os.lseek(fd, data, os.SEEK_HOLE))
                for chunk in range(data, end, _WARM_CHUNK):
                    part = self.array[chunk : min(chunk + _WARM_CHUNK, end)]
                    whole = len(part) // PAGE_SIZE * PAGE_SIZE
                    pages = part[:whole].reshape(-1, PAGE_SIZE)
                    pages[np.flatnonzero(pages.any(axis=1))] = 0
                    if whole < len(part) and part[whole:].any():  # the file's partial last page
                        part[whole:] = 0
                at = end
        finally:
            os.close(fd)
        self.reserved_position = first_page  # the data ends below: the rest is reserved when written

    def end_writes(self) -> None:
        """Close the descriptor write() opened (the segment is full): a long-lived log holds one."""
        with self._fd_lock:
            if self._write_fd >= 0:
                os.close(self._write_fd)
                self._write_fd = -1

    def close(self) -> None:
        """Unmap and close; a view still held by a reader keeps the mapping alive until it is dropped."""
        self.end_writes()
        with self._fd_lock, self._map_lock:
            self._address = 0  # flush and warm-ahead threads must not touch memory that may be unmapped next
        self.array = None  # type: ignore[assignment]
        self.view.release()
        try:
            self.mm.close()
        except BufferError:
            log.debug("%s: mapping still exported; it is released when the last view goes", self.path)

    def destroy(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class AllocateMappedFileService:
    """Creates the next segment in the background and keeps pages warm ``ahead`` bytes in front
    of the writer (RocketMQ's AllocateMappedFileService, with a bound on the warming).

    A prepared segment gets its first ``ahead`` bytes warmed (zeros written, so disk blocks
    exist; the rest of the file stays sparse); from then on, whenever the writer gets within
    ``ahead / 2`` of the warmed end, one background thread populates up to ``ahead`` past the
    writer. ``ahead`` of a segment size or more warms whole segments ahead of time.
    """

    def __init__(self, warm: bool = True, sync_warm: bool = False, ahead: int = NEVER) -> None:
        self._warm = warm and ahead > 0
        self._sync_warm = sync_warm
        self._ahead = ahead
        self._jobs: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._warmer: threading.Thread | None = None
        self._lock = threading.Lock()
        self._ready: dict[str, MappedFile] = {}
        self._pending: dict[str, threading.Thread] = {}
        self._closed = False
        # Synced warming rests as long as each chunk took (half the disk's time at most)
        # unless a writer waits for the segment or the store shuts down: then it hurries.
        self._hurry = threading.Event()

    def request(self, path: str, size: int) -> None:
        """Start preparing `path` unless it is already prepared or in progress."""
        with self._lock:
            if self._closed or path in self._ready or path in self._pending:
                return
            t = threading.Thread(target=self._prepare, args=(path, size), name="AllocateMappedFile", daemon=True)
            self._pending[path] = t
        t.start()

    def _prepare(self, path: str, size: int) -> None:
        mf: MappedFile | None = None
        try:
            mf = MappedFile(path, size)
            if self._warm:
                rest = self._hurry.wait if self._sync_warm else None
                # shutdown does not wait for a whole segment
                mf.warm(lambda: self._closed, self._sync_warm, rest, end=self._ahead)
                self._set_mark(mf)
        except OSError as e:
            log.warning("pre-allocating %s failed: %s", path, e)
            if mf is not None:  # a loaded file is never reserved again: take() makes it anew
                mf.destroy()
            with self._lock:
                self._pending.pop(path, None)
            return
        with self._lock:
            self._pending.pop(path, None)
            if self._closed:
                mf.destroy()
            else:
                self._ready[path] = mf

    def take(self, path: str, size: int) -> MappedFile:
        """The prepared segment for `path`, waiting for one in progress, else created now."""
        with self._lock:
            t = self._pending.get(path)
        if t is not None:
            self._hurry.set()
            t.join()
        with self._lock:
            mf = self._ready.pop(path, None)
            if not self._pending:
                self._hurry.clear()
        return mf if mf is not None else MappedFile(path, size)

    def _set_mark(self, mf: MappedFile) -> None:
        """Ask for more warming when the writer is within half of ``ahead`` of the warmed end."""
        mf.warm_mark = mf.warmed_position - self._ahead // 2 if mf.warmed_position < mf.size else NEVER

    def keep_ahead(self, mf: MappedFile) -> None:
        """The writer reached ``mf.warm_mark``: warm up to ``ahead`` past it, in the background."""
        mf.warm_mark = NEVER  # one request in flight per segment
        end = mf.wrote_position + self._ahead
        self._submit(lambda: self._populate(mf, end))

    def keep_reserved(self, *files: MappedFile | IndexFile | None) -> None:
        """Reserve the next step of each file whose writer passed its ``reserve_mark``, in the
        background (one request in flight per file: the mark is NEVER until it is done).

        The plain put (shmq.store.write.plain_put) calls it after each put it takes: a file short of
        reserved room would send the next put down the reference path, which reserves (zeros
        written, a fallocate, then first-touch page faults) on the serving thread."""
        for f in files:
            if f is not None and f.reserve_due():
                f.reserve_mark = NEVER
                self._submit(f.reserve_ahead)

    def _submit(self, job: Callable[[], object]) -> None:
        with self._lock:
            if self._closed:
                return
            if self._warmer is None:
                self._warmer = threading.Thread(target=self._warm_ahead, name="WarmAhead", daemon=True)
                self._warmer.start()
        self._jobs.put(job)

    def _populate(self, mf: MappedFile, end: int) -> None:
        if mf.populate(end) and not self._closed:  # else (kernel before 5.14, file closed) stop
            self._set_mark(mf)

    def _warm_ahead(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception:  # the writer reserves for itself if this failed; the thread lives on
                log.exception("reserving ahead failed")

    def shutdown(self) -> None:
        """Stop preparing and delete prepared-but-unused segments (they hold no data)."""
        with self._lock:
            self._closed = True
            pending = list(self._pending.values())
            warmer, self._warmer = self._warmer, None
        self._hurry.set()
        for t in pending:
            t.join()
        if warmer is not None:
            self._jobs.put(None)
            warmer.join()
        with self._lock:
            ready, self._ready = self._ready, {}
        for mf in ready.values():
            mf.destroy()


class MappedFileQueue:
    """The segments of one log (commitlog, or one consume queue), oldest first."""

    def __init__(
        self,
        directory: str,
        file_size: int,
        allocator: AllocateMappedFileService | None = None,
        reserve_step: int = RESERVE_STEP,
    ) -> None:
        self.directory = directory
        self.file_size = file_size
        self.allocator = allocator
        self.reserve_step = reserve_step
        self.files: list[MappedFile] = []
        # the segments after the last one, made (and reserved) by reserve() for a write that
        # will roll into them: last_file() takes them in order
        self.spares: list[MappedFile] = []
        # called before a file is created (the store's disk check); raises to refuse it
        self.before_new_file: Callable[[], None] | None = None

    def load(self) -> None:
        """Open every existing segment; wrote positions are set later by recovery."""
        if not os.path.isdir(self.directory):
            return
        names = sorted(n for n in os.listdir(self.directory) if fmt.parse_offset_file_name(n) is not None)
        # A crash between creating a segment and sizing it (MappedFile: open O_CREAT, then
        # ftruncate) leaves an empty file at the end; it never held data, so drop it.
        while names and os.path.getsize(os.path.join(self.directory, names[-1])) == 0:
            os.unlink(os.path.join(self.directory, names.pop()))
        for name in names:
            mf = MappedFile(
                os.path.join(self.directory, name), self.file_size, create=False, reserve_step=self.reserve_step
            )
            mf.wrote_position = mf.flushed_position = self.file_size
            self.files.append(mf)
        if self.files:  # recovery scans the last one up to its end: not into its holes
            last = self.files[-1]
            last.wrote_position = last.flushed_position = last.data_end()
        for a, b in zip(self.files, self.files[1:]):
            if b.file_from_offset != a.file_to_offset:
                raise ValueError(f"{self.directory}: segment {b.path} does not follow {a.path}")

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        """End of written data."""
        if not self.files:
            return 0
        last = self.files[-1]
        return last.file_from_offset + last.wrote_position

    @property
    def flushed_offset(self) -> int:
        for mf in reversed(self.files):
            if mf.flushed_position:
                return mf.file_from_offset + mf.flushed_position
        return self.min_offset

    def last_file(self, start_offset: int = 0) -> MappedFile:
        """The segment to write to, creating the next (or the first, at `start_offset`) if needed."""
        if self.files and not self.files[-1].is_full:
            return self.files[-1]
        start = self.files[-1].file_to_offset if self.files else start_offset - start_offset % self.file_size
        mf = self.spares.pop(0) if self.spares and self.spares[0].file_from_offset == start else self._new_file(start)
        if self.allocator is not None:
            # prepare the segment after every one already made: a spare is in use, and a second
            # preparation of its path would be deleted, data and all, as unused at shutdown
            after = self.spares[-1].file_to_offset if self.spares else mf.file_to_offset
            self.allocator.request(os.path.join(self.directory, fmt.offset_file_name(after)), self.file_size)
        self.files.append(mf)
        return mf

    def _new_file(self, start: int) -> MappedFile:
        if self.before_new_file is not None:
            self.before_new_file()
        files.make_dirs(self.directory)
        path = os.path.join(self.directory, fmt.offset_file_name(start))
        mf = (
            self.allocator.take(path, self.file_size)
            if self.allocator is not None
            else MappedFile(path, self.file_size)
        )
        mf.reserve_step = self.reserve_step
        return mf

    def reserve(self, nbytes: int, start_offset: int = 0, room: int = 0, loss: int = 0) -> None:
        """Give the next ``nbytes`` appended bytes disk blocks before any is written, making the
        segments they will roll into (kept in ``spares``); DiskFullError if the disk cannot.

        ``room``: bytes a segment must keep free after the data (the commitlog's blank); ``loss``:
        at most how many bytes of a segment's end an append can leave unused when it rolls.
        """
        mf = self.last_file(start_offset)
        if nbytes + room <= mf.remaining:
            mf.reserve(mf.wrote_position + nbytes + room)
            return
        mf.reserve(mf.size)
        left = nbytes - max(0, mf.remaining - loss)
        k = 0
        while left > 0:
            if k == len(self.spares):
                last = self.spares[-1] if self.spares else mf
                self.spares.append(self._new_file(last.file_to_offset))
            spare = self.spares[k]
            spare.reserve(min(spare.size, left + room + loss))
            left -= spare.size - room - loss
            k += 1

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding `offset`, or None if it is outside the queue."""
        if not self.files or offset < self.files[0].file_from_offset:
            return None
        i = (offset - self.files[0].file_from_offset) // self.file_size
        if i >= len(self.files):
            return None
        return self.files[i]

    def flush(self, least_pages: int = 0, datasync: bool = False) -> bool:
        """Flush dirty segments if at least `least_pages` pages are dirty; True if it did.
        ``datasync``: segments written through their descriptor are fdatasync'd (``MappedFile.flush``)."""
        if least_pages and self.dirty_pages() < least_pages:
            return False
        for mf in self.files:
            if mf.wrote_position > mf.flushed_position:
                mf.flush(datasync)
        return True

    def dirty_pages(self) -> int:
        return sum((mf.wrote_position - mf.flushed_position) // PAGE_SIZE for mf in self.files[-2:])

    def truncate(self, offset: int) -> None:
        """Cut the queue at `offset`: later segments deleted, the tail of the last one zeroed."""
        keep = []
        for mf in self.files:
            if mf.file_from_offset > offset:
                mf.destroy()
                continue
            if offset < mf.file_to_offset:
                pos = offset - mf.file_from_offset
                mf.zero_from(pos)
                mf.wrote_position = mf.flushed_position = pos
            keep.append(mf)
        self.files = keep

    def delete_first(self, count: int = 1) -> list[str]:
        """Remove the oldest `count` segments (never the last one); returns their paths."""
        removed = []
        while count > 0 and len(self.files) > 1:
            mf = self.files.pop(0)
            mf.destroy()
            removed.append(mf.path)
            count -= 1
        return removed

    def __iter__(self) -> Iterator[MappedFile]:
        return iter(self.files)

    def close(self) -> None:
        for mf in self.files:
            mf.close()
        self.files = []
        for mf in self.spares:  # made ahead, never written: no data
            mf.destroy()
        self.spares = []
