"""Broker tests run real broker processes; each test gets unique names and must leave no IPC object."""
from __future__ import annotations

import itertools
import os

import pytest
import sysv_ipc

from shmq.ring import shm
from shmq.ring.control import sysv_key
from shmq.ring.liveness import Liveness
from shmq.store.message_store import MessageStore

_counter = itertools.count()
_names: list[str] = []
SMALL = {"mappedFileSizeCommitLog": 16 * 1024 * 1024, "mappedFileSizeConsumeQueue": 20 * 4096,
         "maxHashSlotNum": 1009, "maxIndexNum": 40000}


_stores: list[str] = []
_client_keys: list[int] = []


def _exists(kind: str, key: int) -> bool:
    try:
        (sysv_ipc.MessageQueue if kind == "msg" else sysv_ipc.Semaphore)(key)
    except sysv_ipc.ExistentialError:
        return False
    return True


def _made_by_test() -> list[tuple[str, int]]:
    """SysV objects of this test's brokers (keyed by store path) and in-process clients.

    Other sessions may run brokers on this machine at the same time, so a diff of the whole
    SysV table would blame them on us.
    """
    keys = [("msg", sysv_key(d, "control")) for d in _stores] + [("sem", sysv_key(d, "alive")) for d in _stores]
    keys += [("sem", k) for k in _client_keys]
    return [(kind, key) for kind, key in keys if _exists(kind, key)]


@pytest.fixture(autouse=True)
def _record_client_keys(monkeypatch):
    hold = Liveness.hold.__func__

    def recording(cls, key=None, mode=0o600):
        token = hold(cls, key, mode)
        _client_keys.append(token.key)
        return token
    monkeypatch.setattr(Liveness, "hold", classmethod(recording))


@pytest.fixture
def broker_name() -> str:
    name = f"b{os.getpid()}x{next(_counter)}"
    _names.append(name)
    return name


@pytest.fixture
def store_dir(tmp_path) -> str:
    path = str(tmp_path / "store")
    _stores.append(path)
    return path


@pytest.fixture
def config() -> dict:
    return dict(SMALL)


@pytest.fixture(autouse=True)
def nothing_left_behind():
    _names.clear()
    _stores.clear()
    _client_keys.clear()
    yield
    left = [entry for name in _names for entry in shm.leftovers(name)]
    for name in _names:
        shm.remove_leftovers(name)
    new = _made_by_test()
    for kind, key in new:
        try:
            (sysv_ipc.MessageQueue if kind == "msg" else sysv_ipc.Semaphore)(key).remove()
        except sysv_ipc.ExistentialError:
            pass
    assert not left, f"left in /dev/shm: {left}"
    assert not new, f"SysV objects left: {sorted(new)}"


def open_store(store_dir: str, config: dict) -> MessageStore:
    """The store a stopped broker left, opened directly to check what it holds."""
    return MessageStore(store_dir, config).start()
