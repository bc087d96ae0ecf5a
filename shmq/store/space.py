"""Disk space: block reservation for mapped files, and the store's disk-full state.

A write through a shared mapping into a page that has no disk block behind it (a hole of a
sparse file) is a SIGBUS once the file system is full: the process dies, there is no error to
catch. So every byte the store writes through a mapping is reserved first with fallocate
(``reserve``), in chunks, never per message; a failed reservation is a DiskFullError, raised
before anything is written. ``DiskSpace`` holds the resulting state: puts check one bool, and
only while writes are refused is the disk measured again (statvfs, at most every
``PROBE_INTERVAL``), so writes resume by themselves once space is freed.
"""

from __future__ import annotations

import errno
import logging
import os
import time

from shmq.errors import DISK_FULL, DiskFullError

log = logging.getLogger(__name__)
PROBE_INTERVAL = 0.1  # s between two measurements while writes are refused
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_ZEROS = bytes(1 << 20)


def reserve(path: str, offset: int, length: int) -> None:
    """Give ``path``'s bytes [offset, offset + length) disk blocks (posix_fallocate; blocks
    already there cost nothing); DiskFullError when the file system has none left."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:
        if e.errno in _NO_SPACE:
            err = DiskFullError(f"no space left for {path} ({length} bytes at {offset})")
            err.wanted = length
            raise err from None
        raise
    finally:
        os.close(fd)


def write_zeros(path: str, start: int, stop: int) -> None:
    """Write zeros over ``path``'s bytes [start, stop), already fallocated (callers make sure
    nothing there is data); DiskFullError if even that needs a block the disk has not.

    ext4 keeps fallocated blocks "unwritten": the first write fault into one converts (and may
    split) its extent, which can need a block of its own, and on a full disk that fault is a
    SIGBUS (measured on an 80 MB image). Written through the descriptor the conversion happens
    here, where a full disk is an error, and the pages are then in the page cache too."""
    fd = os.open(path, os.O_WRONLY)
    try:
        while start < stop:
            start += os.pwrite(fd, _ZEROS[: min(len(_ZEROS), stop - start)], start)
    except OSError as e:
        if e.errno in _NO_SPACE:
            err = DiskFullError(f"no space left for {path} ({stop - start} bytes at {start})")
            err.wanted = stop - start
            raise err from None
        raise
    finally:
        os.close(fd)


def used_ratio(path: str) -> float:
    """Used share of the file system holding ``path`` (RocketMQ's getDiskPartitionSpaceUsedPercent)."""
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    return (total - st.f_bfree * st.f_frsize) / total if total else 0.0


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


class DiskSpace:
    """Whether the store refuses writes for lack of disk, and when it stops refusing.

    Two causes: the disk is over ``warning_ratio`` used (measured before each new file, each
    cleanup round, and while refusing), or a reservation failed (ENOSPC): then writes wait
    until the disk has the refused amount free again.
    """

    def __init__(self, path: str, warning_ratio: float) -> None:
        self.path = path
        self.warning_ratio = warning_ratio
        self.full = False  # read by every put: no syscall unless it is set
        self._wanted = 0  # bytes the last failed reservation asked for
        self._next_probe = 0.0
        self.reason = ""

    def error(self) -> DiskFullError:
        return DiskFullError(
            f"{DISK_FULL}: {self.reason}; writes are refused until space is freed on the disk of "
            f"{self.path} (reads go on)"
        )

    def _set(self, full: bool, reason: str) -> None:
        if full != self.full:
            if full:
                log.error("disk of %s is full (%s): refusing writes, reads go on", self.path, reason)
            else:
                log.warning("disk of %s has room again: accepting writes", self.path)
        self.reason = reason
        self.full = full

    def measure(self) -> float:
        """Measure the disk now and set ``full``; returns the used ratio."""
        ratio = used_ratio(self.path)
        if ratio > self.warning_ratio:
            self._set(True, f"{ratio:.1%} used, over diskSpaceWarningLevelRatio {self.warning_ratio:.0%}")
        elif self._wanted and free_bytes(self.path) < self._wanted:
            self._set(True, self.reason or f"less than {self._wanted} bytes free")
        else:
            self._wanted = 0
            self._set(False, "")
        return ratio

    def recheck(self) -> None:
        """While refusing: measure again if the last measurement is ``PROBE_INTERVAL`` old."""
        now = time.monotonic()
        if now >= self._next_probe:
            self._next_probe = now + PROBE_INTERVAL
            self.measure()

    def refused(self, e: DiskFullError) -> None:
        """A reservation failed: refuse writes until as much as it asked for is free. ``e`` may be
        this state's own refusal (``check_new_file`` raised it under the reservation): then the
        state stands as it is, and its reason does not become ``disk full: disk full: ...``."""
        if self.full and str(e) == str(self.error()):
            return
        self._wanted = max(e.wanted, 1)
        self._next_probe = time.monotonic() + PROBE_INTERVAL
        self._set(True, str(e))

    def check_new_file(self) -> None:
        """Before a new segment, consume-queue or index file: refuse past the warning ratio."""
        self.measure()
        if self.full:
            raise self.error()
