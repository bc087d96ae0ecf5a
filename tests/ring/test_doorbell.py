"""Doorbells stay doorbells under spurious posts: a flood costs the waiter one wake, a post on a
full semaphore is not an error."""
from __future__ import annotations

import posix_ipc

from shmq.ring.doorbell import DRAIN_MAX, Doorbell
from shmq.ring.shm import ipc_name


def test_wake_drains_the_posts_that_piled_up(broker_name):
    bell = Doorbell.create(ipc_name(broker_name, "bell"))
    try:
        for _ in range(DRAIN_MAX // 2):
            bell.ring()
        assert bell.wait(0.5)
        assert not bell.wait(0.01), "one wake took every pending post"
        for _ in range(DRAIN_MAX + 5):
            bell.ring()
        assert bell.wait(0.5) and bell.wait(0.5), "a flood is drained in slices of DRAIN_MAX"
        assert not bell.wait(0.01)
    finally:
        bell.close()
        bell.unlink()


def test_ring_on_a_semaphore_at_its_maximum_is_a_pending_wake(broker_name):
    """Anyone who can open a doorbell can post it up to SEM_VALUE_MAX; the next post (the broker
    waking that client) must not raise."""
    name = ipc_name(broker_name, "bell")
    sem = posix_ipc.Semaphore(name, posix_ipc.O_CREX, mode=0o600, initial_value=posix_ipc.SEMAPHORE_VALUE_MAX)
    bell = Doorbell(sem)
    try:
        bell.ring()
        assert bell.wait(0)
    finally:
        bell.close()
        bell.unlink()
