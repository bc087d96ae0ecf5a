"""POSIX shared-memory segments named ``/shmq.<broker>.<what>``, and clean-up of leftovers.

Every shmq segment and named semaphore carries its broker's name as a prefix, so a broker
(or a test) can find and remove what a crashed predecessor left in /dev/shm.
"""

from __future__ import annotations

import errno
import mmap
import os
import re

import posix_ipc

from shmq.errors import SharedMemoryFullError

SHM_DIR = "/dev/shm"
MODE = 0o600
_BROKER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_WHAT = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def check_broker_name(broker: str) -> str:
    """Return ``broker`` if usable in IPC names (letters, digits, ``_``, ``-``; no dots)."""
    if not isinstance(broker, str) or not _BROKER_NAME.fullmatch(broker):
        raise ValueError(f"bad broker name {broker!r}: use 1-64 letters, digits, '_' or '-'")
    return broker


def ipc_name(broker: str, what: str) -> str:
    """The POSIX IPC name of object ``what`` of ``broker``: ``/shmq.<broker>.<what>``."""
    if not _WHAT.fullmatch(what):
        raise ValueError(f"bad IPC object name {what!r}")
    return f"/shmq.{check_broker_name(broker)}.{what}"


def no_room(what: str, e: OSError) -> OSError:
    """``SharedMemoryFullError`` for an ``OSError`` that says /dev/shm is full, else ``e`` itself."""
    if e.errno not in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
        return e
    return SharedMemoryFullError(f"no room in {SHM_DIR} for {what} ({e.strerror}); free some space there")


class Segment:
    """A mapped POSIX shared-memory segment; ``buf`` is a memoryview of all of it."""

    def __init__(self, name: str, mm: mmap.mmap, read_only: bool, owner: tuple[int, int]) -> None:
        self.name = name
        self.read_only = read_only
        self._mm = mm
        self.buf = memoryview(mm)
        self.size = len(mm)
        self.owner = owner  # (uid, gid) of the segment, from fstat when it was mapped

    @classmethod
    def create(cls, name: str, size: int, mode: int = MODE) -> Segment:
        """Create a new zero-filled segment; fails with ``posix_ipc.ExistentialError`` if it exists.

        Every page is allocated before the mapping is used (``posix_fallocate``): a segment
        merely sized with ftruncate is sparse, and the first write to a page /dev/shm has no
        room for kills the process with SIGBUS. ``SharedMemoryFullError`` if there is no room.
        """
        shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=mode)
        try:
            try:
                os.posix_fallocate(shm.fd, 0, size)
            except OSError as e:
                raise no_room(f"{size} bytes of {name}", e) from None
            mm = mmap.mmap(shm.fd, size)
            st = os.fstat(shm.fd)
        except BaseException:
            shm.close_fd()
            posix_ipc.unlink_shared_memory(name)
            raise
        shm.close_fd()
        return cls(name, mm, read_only=False, owner=(st.st_uid, st.st_gid))

    @classmethod
    def open(cls, name: str, read_only: bool = False) -> Segment:
        """Map an existing segment (whole size); ``posix_ipc.ExistentialError`` if missing.

        A segment of size 0 counts as missing: its creator has made the name but not yet
        sized it (``shm_open`` and ``ftruncate`` are two steps).
        """
        shm = posix_ipc.SharedMemory(name, read_only=read_only)
        if shm.size == 0:
            shm.close_fd()
            raise posix_ipc.ExistentialError(f"shared memory {name} is still being created")
        try:
            access = mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE
            mm = mmap.mmap(shm.fd, shm.size, access=access)
            st = os.fstat(shm.fd)
        finally:
            shm.close_fd()
        return cls(name, mm, read_only, owner=(st.st_uid, st.st_gid))

    def close(self) -> None:
        """Unmap, or leave unmapping to the garbage collector if views of it are still alive."""
        try:
            self.buf.release()
            self._mm.close()
        except BufferError:
            pass

    def unlink(self) -> None:
        """Remove the name (mappings stay valid until closed)."""
        unlink_segment(self.name)

    def __enter__(self) -> Segment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unlink_segment(name: str) -> bool:
    """Remove a segment name; False if it was already gone."""
    try:
        posix_ipc.unlink_shared_memory(name)
    except posix_ipc.ExistentialError:
        return False
    return True


def leftovers(broker: str) -> list[str]:
    """Entries of /dev/shm that belong to ``broker`` (segments and ``sem.`` semaphores)."""
    prefix = f"shmq.{check_broker_name(broker)}."
    try:
        entries = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return []
    mine = (e for e in entries if e.startswith((prefix, "sem." + prefix)))
    # a broker named "ns" shares its prefix with the name servers' route segments
    # (``/shmq.ns.<NS>.routes``), which are never a broker's
    return sorted(e for e in mine if not (broker == "ns" and e.endswith(".routes")))


def remove_leftovers(broker: str, owner: int | None = None) -> list[str]:
    """Unlink every segment and named semaphore of ``broker`` (only those of user ``owner`` if
    given); return what was removed."""
    removed = []
    for entry in leftovers(broker):
        try:
            if owner is not None and os.lstat(f"{SHM_DIR}/{entry}").st_uid != owner:
                continue
            if entry.startswith("sem."):
                posix_ipc.unlink_semaphore("/" + entry[4:])
            else:
                posix_ipc.unlink_shared_memory("/" + entry)
        except (posix_ipc.ExistentialError, FileNotFoundError):
            continue
        removed.append(entry)
    return removed
