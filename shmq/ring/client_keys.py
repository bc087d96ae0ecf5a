"""Where a broker's clients take their liveness keys, so that the broker can find them all.

A client creates its liveness semaphore before it tells the broker the key (the attach
carries it). A client killed in between (or before the broker read its attach) leaves a
semaphore nobody knows of, and the kernel's table fills with them over time. So a client
takes its key among the 2**16 keys of its broker's family, derived from the broker's control
key (which both sides read exactly: the broker made it, the state segment publishes it), and
the broker removes the family's semaphores whose holder is gone: now and then while it
serves, and when it stops or starts (and whoever reclaims a dead broker's objects does too).

A semaphore of the family is left over when its last operation was made by a process that no
longer exists (the holder's take, or the kernel's undo when it died; watchers only read the
value, which leaves the pid as it was), or when no process ever set or took it (its creator
died between creating it and setting its value) and it is older than ``unborn_s``.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections.abc import Collection

import sysv_ipc

SEM_TABLE = "/proc/sysvipc/sem"
FAMILY_BITS = 16
_LOW = (1 << FAMILY_BITS) - 1


def family(control_key: int) -> int:
    """The base of the liveness keys of the clients of the broker whose control queue is ``control_key``."""
    digest = hashlib.blake2b(b"shmq-clients\0%d" % control_key, digest_size=4).digest()
    return (int.from_bytes(digest, "little") & 0x7FFFFFFF) & ~_LOW


def in_family(key: int, base: int) -> bool:
    return key & ~_LOW == base and key & _LOW != 0


def pick(base: int) -> int:
    """A random key of the family (never IPC_PRIVATE, 0)."""
    return base | random.randint(1, _LOW)


def is_leftover(last_pid: int, taken: float, changed: float, now: float, pid_alive: bool, unborn_s: float) -> bool:
    """Whether a family semaphore belongs to nobody (pure: the caller looks up ``pid_alive``).

    ``last_pid``: the process of its last operation, 0 if none that this process can see;
    ``taken``: when it was last taken (semop), 0 never; ``changed``: when it was created or set."""
    if last_pid == 0:
        return taken == 0 and now - changed >= unborn_s
    return not pid_alive


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def _rows(base: int) -> list[tuple[int, float, float]]:
    """(key, otime, ctime) of the single semaphores of the family that this user owns and created."""
    me = os.geteuid()
    try:
        with open(SEM_TABLE) as f:
            columns = f.readline().split()
            k, n, u, c, o, t = (columns.index(x) for x in ("key", "nsems", "uid", "cuid", "otime", "ctime"))
            rows = [line.split() for line in f]
    except (OSError, ValueError):  # no /proc (not Linux) or an unknown layout: nothing to find
        return []
    return [
        (int(r[k]), float(r[o]), float(r[t]))
        for r in rows
        if len(r) > t and in_family(int(r[k]), base) and int(r[n]) == 1 and int(r[u]) == me and int(r[c]) == me
    ]


def reap(base: int, unborn_s: float, watched: Collection[int] = ()) -> list[int]:
    """Remove the left-over semaphores of the family ``base`` (see the module); their keys.
    ``watched``: keys the caller watches itself (its attached clients), not looked at."""
    removed = []
    now = time.time()
    for key, taken, changed in _rows(base):
        if key in watched:
            continue
        try:
            sem = sysv_ipc.Semaphore(key)
            last_pid = int(sem.last_pid)
            if is_leftover(last_pid, taken, changed, now, last_pid != 0 and _pid_alive(last_pid), unborn_s):
                sem.remove()
                removed.append(key)
        except (sysv_ipc.ExistentialError, sysv_ipc.PermissionsError):  # gone meanwhile, or not ours to remove
            continue
    return removed
