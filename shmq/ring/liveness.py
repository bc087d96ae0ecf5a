"""Liveness through SysV semaphores held with SEM_UNDO.

The holder creates a semaphore with value 1 and takes it with SEM_UNDO, leaving 0. When the
holder exits for any reason, SIGKILL included, the kernel undoes the take and the value is 1
again. A watcher reads the value without blocking: 0 means alive. No pid polling, so pid
reuse cannot fool it. sysv_ipc makes one-semaphore sets, so each holder has its own key:
the broker's is derived from the store path, a client's is a random one of its broker's
family (``client_keys``) and sent in its attach.
"""

from __future__ import annotations

import sysv_ipc

from shmq.errors import ShmqError
from shmq.ring import client_keys
from shmq.ring.shm import MODE

CREATE_TRIES = 64


class Liveness:
    """A holder's token: alive while this object's process lives and has not ``release()``d."""

    def __init__(self, sem: sysv_ipc.Semaphore) -> None:
        self._sem = sem
        self.key: int = sem.key

    @classmethod
    def hold(cls, key: int | None = None, mode: int = MODE, family: int | None = None) -> Liveness:
        """Create the semaphore and take it with SEM_UNDO. Its key: ``key``, else a free one of
        ``family`` (``client_keys``: a client's, which its broker can find), else a random one."""
        if key is None and family is not None:
            sem = _create_in(family, mode)
        else:
            sem = sysv_ipc.Semaphore(key, sysv_ipc.IPC_CREX, mode=mode, initial_value=1)
        sem.undo = True
        try:
            sem.acquire(0)
        except BaseException:
            sem.remove()
            raise
        return cls(sem)

    def release(self) -> None:
        """Clean exit: give the semaphore back and remove it."""
        try:
            self._sem.release()
            self._sem.remove()
        except sysv_ipc.ExistentialError:
            pass


def _create_in(family: int, mode: int) -> sysv_ipc.Semaphore:
    """A new semaphore (value 1) under a random free key of ``family``. A key taken is tried
    again with another; so is one whose semaphore the broker removed between its creation and
    its value being set (it took it for a dead client's)."""
    for _ in range(CREATE_TRIES):
        try:
            return sysv_ipc.Semaphore(client_keys.pick(family), sysv_ipc.IPC_CREX, mode=mode, initial_value=1)
        except sysv_ipc.ExistentialError:
            continue
    raise ShmqError(
        f"no free liveness semaphore key among {CREATE_TRIES} tries in family {family:#x}: "
        "the SysV semaphore table is crowded"
    )


class Watch:
    """A watcher's view of someone else's liveness semaphore."""

    def __init__(self, key: int) -> None:
        try:
            self._sem: sysv_ipc.Semaphore | None = sysv_ipc.Semaphore(key)
        except sysv_ipc.ExistentialError:
            self._sem = None
        self.key = key

    def is_alive(self) -> bool:
        """True while the holder lives (never blocks); a missing semaphore counts as dead."""
        if self._sem is None:
            return False
        try:
            answer: bool = self._sem.value == 0
            return answer
        except sysv_ipc.ExistentialError:
            return False

    def holder_pid(self) -> int:
        """The pid of the last process that operated on the semaphore: its holder took it and
        watchers only read it, so a client claiming another process's semaphore is caught.
        0 if it is gone."""
        if self._sem is None:
            return 0
        try:
            return int(self._sem.last_pid)
        except sysv_ipc.ExistentialError:
            return 0

    def remove(self) -> bool:
        """Remove the semaphore of a holder found dead (or detached); False if already gone."""
        if self._sem is None:
            return False
        try:
            self._sem.remove()
        except sysv_ipc.ExistentialError:
            return False
        return True


def remove_if_dead(key: int) -> bool:
    """Remove a leftover semaphore whose holder is gone; True if it was removed."""
    watch = Watch(key)
    return not watch.is_alive() and watch.remove()
