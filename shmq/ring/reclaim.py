"""Removing what a broker that died without shutting down left behind.

A broker removes its IPC objects when it shuts down. One that crashed or was SIGKILLed leaves
its state segment, doorbells, client channels, control queue and liveness semaphores until the
next broker of its name starts, which for a one-off name (a benchmark's, a test's) never
happens. Whoever owns a dead broker (``shmq.Broker.stop``) removes them with this.
"""

from __future__ import annotations

import os

import sysv_ipc

from shmq.errors import ShmqError
from shmq.ring import client_keys, shm
from shmq.ring.control import sysv_key
from shmq.ring.liveness import Watch, remove_if_dead
from shmq.ring.owner import sysv_owner
from shmq.ring.state import StateReader


def _keys(name: str, store_dir: str) -> tuple[set[int], set[int], set[int]]:
    """Control-queue, broker-liveness and client-liveness keys: from the store path, plus those
    the state segment names (the clients' are only there)."""
    control, alive = {sysv_key(store_dir, "control")}, {sysv_key(store_dir, "alive")}
    clients: set[int] = set()
    try:
        reader = StateReader.open(name)
    except (ShmqError, ValueError, OSError):  # none, or torn: the store path's keys are all we know
        return control, alive, clients
    try:
        h = reader.view.header[0]
        control.add(int(h["control_key"]))
        alive.add(int(h["alive_key"]))
        table = reader.view.clients
        clients.update(int(k) for k in table["alive_key"][table["used"] != 0])
    finally:
        reader.close()
    return control, alive, clients


def remove_queue(key: int) -> bool:
    """Remove the SysV message queue `key` if there is one; whether there was."""
    try:
        sysv_ipc.MessageQueue(key).remove()
    except sysv_ipc.ExistentialError:
        return False
    return True


def reclaim_dead_broker(name: str, store_dir: str) -> list[str]:
    """Remove the IPC objects of the dead broker ``name`` that served ``store_dir``; what was removed.

    Does nothing while a live broker holds the name or the store (one started since), and
    leaves the semaphores of clients that are still alive to them, and every object another
    user owns (a squatter's, or that user's broker of the same name).
    """
    control, alive, clients = _keys(name, store_dir)
    if any(Watch(k).is_alive() for k in alive):
        return []
    me = os.geteuid()
    control = {k for k in control if _ours("msg", k, me)}
    sems = {k for k in alive | clients if _ours("sem", k, me)}
    removed = [f"control queue {k:#x}" for k in sorted(control) if remove_queue(k)]
    removed += [f"liveness semaphore {k:#x}" for k in sorted(sems) if remove_if_dead(k)]
    for k in sorted(control):  # clients that died before the broker knew their semaphore
        removed += [f"liveness semaphore {s:#x}" for s in client_keys.reap(client_keys.family(k), 0.0)]
    return removed + shm.remove_leftovers(name, owner=me)


def _ours(kind: str, key: int, me: int) -> bool:
    """True unless the SysV object exists and another user owns or made it: those are never
    removed here (root could; they may be another user's live broker or clients)."""
    owner = sysv_owner(kind, key)
    return owner is None or (owner[0] == me and owner[2] == me)
