"""Clients SIGKILLed at random points of attaching (and detaching) against a live broker leave
no liveness semaphore once the broker stops: the ones killed before the broker read their
attach included (the broker never heard of those keys). The autouse leak check knows every
key the forked clients took (``Liveness.hold`` is recorded across fork)."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time

import shmq
from shmq.ring import client_keys
from shmq.ring.control import sysv_key
from tests.ipc_tracking import IpcTracker
from tools.chaos.attach_kills import attach_forever

ctx = mp.get_context("fork")
KILLS = 80


def _kill_clients(broker: str, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(kills):
        p = ctx.Process(target=attach_forever, args=(broker,))
        p.start()
        time.sleep(rng.uniform(0.0, 0.03))
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)


def test_clients_killed_while_attaching_leave_no_semaphore(store_dir, broker_name, config, ipc_tracker: IpcTracker):
    with shmq.Broker(store_dir, broker_name, config):
        _kill_clients(broker_name, KILLS, seed=25)
    _, sysv = ipc_tracker.left()
    assert sysv == [], f"{len(sysv)} liveness semaphores of killed clients outlived the broker's stop"


def test_the_next_broker_removes_what_clients_of_a_killed_broker_left(
    store_dir, broker_name, config, ipc_tracker: IpcTracker
):
    """Clients killed while their broker is SIGKILLed too: the next start on the store removes them."""
    broker = shmq.Broker(store_dir, broker_name, config)
    try:
        _kill_clients(broker_name, 20, seed=7)
    finally:
        broker.kill()
    with shmq.Broker(store_dir, broker_name, config):
        pass
    _, sysv = ipc_tracker.left()
    assert sysv == []


def test_a_family_key_is_never_private_and_stays_in_its_family(store_dir):
    base = client_keys.family(sysv_key(store_dir, "control"))
    keys = {client_keys.pick(base) for _ in range(1000)}
    assert all(client_keys.in_family(k, base) and 0 < k < 2**31 for k in keys)


def test_leftover_rules():
    assert client_keys.is_leftover(123, 90.0, 90.0, 100.0, pid_alive=False, unborn_s=10)
    assert not client_keys.is_leftover(123, 90.0, 90.0, 100.0, pid_alive=True, unborn_s=10)
    assert not client_keys.is_leftover(0, 0.0, 100.0, 105.0, pid_alive=False, unborn_s=10)  # its creator may set it now
    assert client_keys.is_leftover(0, 0.0, 100.0, 111.0, pid_alive=False, unborn_s=10)
    # taken by a process this one cannot see (another pid namespace): never guessed dead
    assert not client_keys.is_leftover(0, 100.0, 100.0, 1000.0, pid_alive=False, unborn_s=0)
