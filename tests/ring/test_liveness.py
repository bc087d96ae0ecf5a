"""Liveness semaphores survive nothing: a SIGKILLed holder reads as dead at once."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal

from shmq.ring import control
from shmq.ring.liveness import Liveness, Watch, remove_if_dead

ctx = mp.get_context("fork")


def _hold(key, conn) -> None:
    token = Liveness.hold(key)
    conn.send(token.key)
    conn.recv()


def test_sigkilled_holder_is_dead(store_dir):
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_hold, args=(control.sysv_key(store_dir, "alive"), child))
    proc.start()
    key = parent.recv()
    watch = Watch(key)
    assert watch.is_alive()
    assert not remove_if_dead(key)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    assert not watch.is_alive()
    assert remove_if_dead(key)
    assert not Watch(key).is_alive()


def test_random_key_clean_release():
    token = Liveness.hold()
    watch = Watch(token.key)
    assert watch.is_alive()
    token.release()
    assert not watch.is_alive()
    assert not watch.remove()
    token.release()


def test_holder_exit_without_release_reads_dead():
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_hold, args=(None, child))
    proc.start()
    watch = Watch(parent.recv())
    assert watch.is_alive()
    parent.send("exit")
    proc.join(10)
    assert not watch.is_alive()
    assert watch.remove()
