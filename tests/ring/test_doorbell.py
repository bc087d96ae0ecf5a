"""Doorbells stay doorbells under spurious posts: a flood costs the waiter one wake, a post on a
full semaphore is not an error."""

from __future__ import annotations

import posix_ipc

from shmq.errors import ForeignOwnerError
from shmq.ring import shm
from shmq.ring.channel import broker_bell_name
from shmq.ring.doorbell import DRAIN_MAX, FLOOD_VALUE, Doorbell, FollowingBell, RotatingBell
from shmq.ring.shm import ipc_name
from tools.bench.wakeup_bench import flood


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


def test_a_flooded_rotating_bell_moves_to_a_new_generation_that_followers_post(broker_name):
    """After one bounded drain a bell still holding more than FLOOD_VALUE posts is replaced: the
    flood is left behind (O(1) for the waiter), the old name is gone, and a follower that loads
    the new generation wakes the waiter while the flooder's old handle no longer does."""
    header = bytearray(8)
    published: list[int] = []

    def on_rotate(gen: int) -> None:
        header[:] = gen.to_bytes(8, "little")
        published.append(gen)

    bell = RotatingBell.create_rotating(lambda gen: broker_bell_name(broker_name, gen), on_rotate)
    follower = FollowingBell.open(
        lambda gen: broker_bell_name(broker_name, gen), lambda: int.from_bytes(header, "little")
    )
    flooder = posix_ipc.Semaphore(broker_bell_name(broker_name))
    try:
        for _ in range(DRAIN_MAX + FLOOD_VALUE // 2):
            flooder.release()
        assert bell.wait(0.5) and bell.gen == 0, "a flood the drain covers does not rotate"
        flood(broker_bell_name(broker_name), DRAIN_MAX + 2 * FLOOD_VALUE)
        assert bell.wait(0.5)
        assert (bell.gen, published, bell.name) == (1, [1], broker_bell_name(broker_name, 1))
        assert bell.pending() == 0 and not bell.wait(0.01), "the flood stayed in the old bell"
        assert shm.leftovers(broker_name) == ["sem." + broker_bell_name(broker_name, 1)[1:]]
        flooder.release()  # still open, unlinked: nobody waits on it
        assert not bell.wait(0.01)
        follower.ring()
        assert follower.gen == 1 and bell.wait(0.5), "the follower reopened the new generation"
    finally:
        flooder.close()
        follower.close()
        bell.close()
        bell.unlink()


def test_rotation_skips_a_taken_name_and_followers_refuse_an_untrusted_one(broker_name):
    """Another user may pre-create the next generation's name: the bell skips it. A follower
    whose owner check fails keeps posting its old handle (the waiter's park timeout covers it)."""
    header = bytearray(8)
    squat = Doorbell.create(broker_bell_name(broker_name, 1))
    bell = RotatingBell.create_rotating(
        lambda gen: broker_bell_name(broker_name, gen),
        lambda gen: header.__setitem__(slice(None), gen.to_bytes(8, "little")),
    )
    refused: list[str] = []

    def distrust(name: str) -> None:
        refused.append(name)
        raise ForeignOwnerError(f"{name} is not ours")

    follower = FollowingBell.open(
        lambda gen: broker_bell_name(broker_name, gen), lambda: int.from_bytes(header, "little"), distrust
    )
    try:
        assert bell.rotate() and bell.gen == 2 and int.from_bytes(header, "little") == 2
        follower.ring()
        assert refused == [broker_bell_name(broker_name, 2)] and follower.gen == 0
        assert not bell.wait(0.01), "the post went to the old, unlinked bell"
    finally:
        follower.close()
        bell.close()
        bell.unlink()
        squat.close()
        squat.unlink()
