"""Every ring test gets unique broker names and must leave no IPC object behind."""
from __future__ import annotations

import itertools
import os

import pytest
import sysv_ipc

from shmq.ring import shm

_counter = itertools.count()
_names: list[str] = []


def _sysv_objects() -> set[tuple[str, int]]:
    found = set()
    for kind in ("msg", "sem"):
        with open(f"/proc/sysvipc/{kind}") as f:
            next(f)
            found.update((kind, int(line.split()[1])) for line in f if line.strip())
    return found


@pytest.fixture
def broker_name() -> str:
    """A broker name no other test (or test run) uses."""
    name = f"t{os.getpid()}x{next(_counter)}"
    _names.append(name)
    return name


@pytest.fixture
def store_dir(tmp_path) -> str:
    return str(tmp_path)


@pytest.fixture(autouse=True)
def nothing_left_behind():
    _names.clear()
    before = _sysv_objects()
    yield
    left = [entry for name in _names for entry in shm.leftovers(name)]
    for name in _names:
        shm.remove_leftovers(name)
    new = _sysv_objects() - before
    for kind, ident in new:
        try:
            (sysv_ipc.remove_message_queue if kind == "msg" else sysv_ipc.remove_semaphore)(ident)
        except sysv_ipc.ExistentialError:
            pass
    assert not left, f"left in /dev/shm: {left}"
    assert not new, f"SysV objects left: {sorted(new)}"
