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

Draining is still O(posts): at ~130 ns a post, 2^31 posts would take minutes. So the broker's
bell rotates (``RotatingBell``): a waiter that still finds more than ``FLOOD_VALUE`` posts
after one bounded drain creates a new bell with the next generation in its name, tells its
peers (the broker stores the generation in every channel header and the state segment), waits
on the new one and unlinks the flooded one. The flood is left in a semaphore nobody waits on,
so the waiter's cost is O(1) whatever was posted. Peers post through a ``FollowingBell``, which
loads the generation after the parked flag (``wake``) and reopens the bell when it changed.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable, Sequence

import posix_ipc

from shmq.errors import ForeignOwnerError
from shmq.ring.framing import Ring, full_fence
from shmq.ring.shm import MODE, no_room

SPIN_SECONDS = 50e-6
# posts drained after one wake: at ~130 ns each, a flood is drained in slices of under 10 ms
# so the waiter serves its rings between slices
DRAIN_MAX = 65536
# posts still pending after a drain that make the waiter rotate its bell: far above what its
# peers post legitimately (one per park, and only while the parked flag is set)
FLOOD_VALUE = 1024
# next generations tried when a name is taken (another user's squatter: refuse_squatters only
# checks at start); all taken: the waiter keeps its bell and drains, and tries again next wake
ROTATE_TRIES = 8

log = logging.getLogger(__name__)


class Doorbell:
    """A named counting semaphore; ``ring()`` posts, ``wait()`` sleeps until posted."""

    gen = 0  # generation of its name: a plain doorbell never rotates (``RotatingBell``)

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

    def pending(self) -> int:
        """Posts not consumed yet (``sem_getvalue``: a read of the counter, no system call)."""
        return int(self._sem.value)

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


class RotatingBell(Doorbell):
    """The broker's bell: a ``Doorbell`` whose ``wait`` replaces a flooded semaphore by a new one.

    ``name_of(gen)`` names the bell of generation ``gen``; ``on_rotate(gen)`` runs after the new
    bell exists and before the old one is unlinked, and must publish ``gen`` to every peer.
    ``wait`` returns before the caller raises its parked flags again, so the generation is
    stored before the flag a peer loads first (``wake``): a peer that sees the raised flag sees
    the new generation (x86-64 keeps stores in order and loads in order). A peer that loaded the
    flag still raised from the park that is ending and posts the old bell loses nothing: it
    published its frame and fenced before that load, so the frame is visible to ``park``'s
    re-check after the waiter raises its flags again and fences. Should a wake-up still be lost
    (a stale generation on a weaker memory model, a peer that cannot open the new bell), the
    waiter's park timeout (the broker's 20 ms) bounds the delay.
    """

    def __init__(
        self,
        sem: posix_ipc.Semaphore,
        gen: int,
        name_of: Callable[[int], str],
        on_rotate: Callable[[int], None],
        mode: int,
    ) -> None:
        super().__init__(sem)
        self.gen = gen
        self.rotations = 0
        self._name_of = name_of
        self._on_rotate = on_rotate
        self._mode = mode

    @classmethod
    def create_rotating(
        cls, name_of: Callable[[int], str], on_rotate: Callable[[int], None], mode: int = MODE
    ) -> RotatingBell:
        """Create generation 0 (``Doorbell.create``'s errors)."""
        first = Doorbell.create(name_of(0), mode)
        return cls(first._sem, 0, name_of, on_rotate, mode)

    def wait(self, timeout: float | None) -> bool:
        """``Doorbell.wait``, then rotate if more than ``FLOOD_VALUE`` posts are still pending."""
        rung = super().wait(timeout)
        if rung and self._sem.value > FLOOD_VALUE:
            self.rotate()
        return rung

    def rotate(self) -> bool:
        """Switch to a new, empty bell of a later generation; False (and the old bell kept) if
        none could be created."""
        for gen in range(self.gen + 1, self.gen + 1 + ROTATE_TRIES):
            name = self._name_of(gen)
            try:
                sem = posix_ipc.Semaphore(name, posix_ipc.O_CREX, mode=self._mode, initial_value=0)
                break
            except posix_ipc.ExistentialError:
                continue
            except OSError as e:
                log.warning("doorbell %s is flooded and no new one can be made (%s); draining it", self.name, e)
                return False
        else:
            log.warning(
                "doorbell %s is flooded and generations %d-%d are taken; draining it",
                self.name,
                self.gen + 1,
                self.gen + ROTATE_TRIES,
            )
            return False
        old, old_name, flood = self._sem, self.name, self._sem.value
        self._sem, self.name, self.gen = sem, name, gen
        self._on_rotate(gen)
        self.rotations += 1
        try:
            posix_ipc.unlink_semaphore(old_name)
        except posix_ipc.ExistentialError:
            pass
        old.close()
        if self.rotations & (self.rotations - 1) == 0:  # the 1st, 2nd, 4th, ...: a follower's flood stays one line
            log.warning(
                "doorbell %s was flooded (%d posts pending): now waiting on %s (rotation %d)",
                old_name,
                flood,
                name,
                self.rotations,
            )
        return True


class FollowingBell:
    """A peer's handle on a ``RotatingBell``: ``ring`` reopens the bell when its generation changed.

    ``gen_of()`` loads the current generation (the channel header's word); ``check(name)``
    raises if the new bell's owner is not trusted. The generation is loaded on each post, after
    ``wake`` loaded the parked flag, never per frame. A bell that cannot be opened (gone again,
    untrusted) leaves the old handle in use: that post is lost, and the waiter's park timeout
    covers it. The lock keeps one thread from closing a handle another is posting on.
    """

    def __init__(
        self,
        sem: posix_ipc.Semaphore,
        gen: int,
        name_of: Callable[[int], str],
        gen_of: Callable[[], int],
        check: Callable[[str], None] | None = None,
    ) -> None:
        self._sem = sem
        self.name: str = sem.name
        self.gen = gen
        self._name_of = name_of
        self._gen_of = gen_of
        self.check = check
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls, name_of: Callable[[int], str], gen_of: Callable[[], int], check: Callable[[str], None] | None = None
    ) -> FollowingBell:
        """Open the current generation (its owner is the caller's to check, by ``name``);
        ``posix_ipc.ExistentialError`` if it is missing, also after a rotation raced the open."""
        for _ in range(3):
            gen = gen_of()
            try:
                return cls(posix_ipc.Semaphore(name_of(gen)), gen, name_of, gen_of, check)
            except posix_ipc.ExistentialError:
                if gen_of() == gen:
                    raise
        raise posix_ipc.ExistentialError(f"doorbell {name_of(gen_of())} keeps rotating away")

    def ring(self) -> None:
        """Post the current generation's bell (``Doorbell.ring``)."""
        with self._lock:
            gen = self._gen_of()
            if gen != self.gen:
                self._follow(gen)
            try:
                self._sem.release()
            except OSError as e:
                if e.errno != errno.EOVERFLOW:
                    raise

    def _follow(self, gen: int) -> None:
        name = self._name_of(gen)
        try:
            sem = posix_ipc.Semaphore(name)
        except (posix_ipc.ExistentialError, posix_ipc.PermissionsError, ValueError) as e:
            log.debug("cannot follow doorbell generation %d: %s", gen, e)
            return
        try:
            if self.check is not None:
                self.check(name)
        except (ForeignOwnerError, OSError) as e:  # an untrusted owner, or gone again: keep the old bell
            sem.close()
            log.warning("not following doorbell %s: %s", name, e)
            return
        self._sem.close()
        self._sem, self.name, self.gen = sem, name, gen

    def close(self) -> None:
        """Close this process's handle."""
        with self._lock:
            self._sem.close()


def park(
    ready: Callable[[], bool],
    flags: Sequence[tuple[Ring, int]],
    bell: Doorbell,
    timeout: float | None,
    spin: float = SPIN_SECONDS,
    ring_ends: bool = False,
) -> bool:
    """Wait until ``ready()`` is true or ``timeout`` passes; return ``ready()``'s last answer.

    ``flags`` are the (ring, side) parked flags to raise while asleep: a consumer passes
    ``(ring, CONSUMER)``, a producer waiting for room ``(ring, PRODUCER)``, and a broker
    serving many channels passes one pair per ring so that any peer can wake it.
    ``ring_ends``: a post on the bell ends the wait even if ``ready()`` is false. The broker
    needs it: a client that sent a control request (attach, admin) rings the bell, and the
    control queue is not among the rings ``ready()`` looks at (it served such requests only
    when its 20 ms park timed out).
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
        rung = bell.wait(remaining)
        for ring, side in flags:
            ring.set_parked(side, False)
        if ready():
            return True
        if rung and ring_ends:
            return False
    for ring, side in flags:
        ring.set_parked(side, False)
    return ready()


def wake(ring: Ring, side: int, bell: Doorbell | FollowingBell) -> bool:
    """Call after publishing into ``ring``: post ``bell`` if ``side`` is parked; True if posted.

    A ``FollowingBell`` loads the generation of the bell after this loads the parked flag."""
    full_fence()
    if ring.parked(side):
        ring.set_parked(side, False)
        bell.ring()
        return True
    return False
