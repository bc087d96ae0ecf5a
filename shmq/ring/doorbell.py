"""Doorbells: a POSIX named semaphore a side sleeps on when its rings give it nothing to do.

Protocol (no system call on the hot path): the waiting side spins briefly polling its rings,
then raises its parked flag in each ring, fences, re-checks, and only then waits on its
semaphore. The other side, after publishing a head or tail, fences and posts only when it
sees the flag raised, clearing it first so a burst of frames costs one post. Both fences are
needed (store-then-load on each side, Dekker's pattern); without them a wake-up can be lost.

Any process that can open a doorbell can post it, and the count is what a waiter consumes: a
peer that posts millions of times (or up to SEM_VALUE_MAX) must not keep the waiter from
sleeping, nor make a post fail. A waiter that was woken drains the count (one wake means "look
at everything", and it re-checks its rings after the drain, so no wake-up is lost); a post on a
full semaphore is a wake already pending.
"""
from __future__ import annotations

import errno
import time
from typing import Callable, Sequence

import posix_ipc

from shmq.ring.framing import Ring, full_fence
from shmq.ring.shm import MODE, no_room

SPIN_SECONDS = 50e-6
# posts drained after one wake: at ~130 ns each, a flood is drained in slices of under 10 ms
# so the waiter serves its rings between slices
DRAIN_MAX = 65536


class Doorbell:
    """A named counting semaphore; ``ring()`` posts, ``wait()`` sleeps until posted."""

    def __init__(self, sem: posix_ipc.Semaphore) -> None:
        self._sem = sem
        self.name: str = sem.name

    @classmethod
    def create(cls, name: str, mode: int = MODE) -> Doorbell:
        """Create a new doorbell (value 0); ``posix_ipc.ExistentialError`` if it exists,
        ``SharedMemoryFullError`` if /dev/shm has no page left for it."""
        try:
            return cls(posix_ipc.Semaphore(name, posix_ipc.O_CREX, mode=mode, initial_value=0))
        except OSError as e:
            raise no_room(f"semaphore {name}", e) from None

    @classmethod
    def open(cls, name: str) -> Doorbell:
        """Open an existing doorbell; ``posix_ipc.ExistentialError`` if missing."""
        return cls(posix_ipc.Semaphore(name))

    def ring(self) -> None:
        """Wake the waiter (or make its next wait return at once)."""
        try:
            self._sem.release()
        except OSError as e:
            if e.errno != errno.EOVERFLOW:  # at SEM_VALUE_MAX the waiter is woken already
                raise

    def wait(self, timeout: float | None) -> bool:
        """Sleep until rung or ``timeout`` seconds pass (None: forever); True if rung.

        A wake drains the posts that piled up (up to ``DRAIN_MAX``), so spurious posts cost the
        waiter one pass per burst, not one per post."""
        sem = self._sem
        try:
            sem.acquire(timeout)
        except posix_ipc.BusyError:
            return False
        pending = min(sem.value, DRAIN_MAX)
        try:
            for _ in range(pending):
                sem.acquire(0)
        except posix_ipc.BusyError:
            pass
        return True

    def close(self) -> None:
        """Close this process's handle."""
        self._sem.close()

    def unlink(self) -> None:
        """Remove the name; handles already open keep working."""
        try:
            posix_ipc.unlink_semaphore(self.name)
        except posix_ipc.ExistentialError:
            pass


def park(ready: Callable[[], bool], flags: Sequence[tuple[Ring, int]], bell: Doorbell,
         timeout: float | None, spin: float = SPIN_SECONDS) -> bool:
    """Wait until ``ready()`` is true or ``timeout`` passes; return ``ready()``'s last answer.

    ``flags`` are the (ring, side) parked flags to raise while asleep: a consumer passes
    ``(ring, CONSUMER)``, a producer waiting for room ``(ring, PRODUCER)``, and a broker
    serving many channels passes one pair per ring so that any peer can wake it.
    """
    start = time.perf_counter()
    deadline = None if timeout is None else start + timeout
    spin_end = start + (spin if timeout is None else min(spin, timeout))
    while True:
        if ready():
            return True
        if time.perf_counter() >= spin_end:
            break
    while True:
        for ring, side in flags:
            ring.set_parked(side, True)
        full_fence()
        if ready():
            break
        remaining = None if deadline is None else deadline - time.perf_counter()
        if remaining is not None and remaining <= 0:
            break
        bell.wait(remaining)
        for ring, side in flags:
            ring.set_parked(side, False)
        if ready():
            return True
    for ring, side in flags:
        ring.set_parked(side, False)
    return ready()


def wake(ring: Ring, side: int, bell: Doorbell) -> bool:
    """Call after publishing into ``ring``: post ``bell`` if ``side`` is parked; True if posted."""
    full_fence()
    if ring.parked(side):
        ring.set_parked(side, False)
        bell.ring()
        return True
    return False
