"""Leak checks that blame a test only for the IPC objects it made itself.

Other sessions may run brokers and tests on this machine at the same time, so a diff of the
machine-wide SysV table would blame their objects on us, and removing the difference would
break them. A test's objects are known by construction instead: its /dev/shm entries carry its
broker names, a store's control queue and liveness semaphore have keys derived from the store
path, and every other liveness semaphore is recorded as it is taken.

A conftest imports ``ipc_tracker`` (autouse) and builds its ``broker_name`` and ``store_dir``
fixtures on ``IpcTracker.name`` and ``IpcTracker.store``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator

import pytest
import sysv_ipc

from shmq.namesrv.segment import namesrv_key, routes_name
from shmq.ring import client_keys, shm
from shmq.ring.control import sysv_key
from shmq.ring.liveness import Liveness

SysvObject = tuple[str, int]  # ("msg" or "sem", key)
_counter = itertools.count()


def store_objects(store_dir: str) -> list[SysvObject]:
    """The control queue and liveness semaphore of a broker on ``store_dir``."""
    return [("msg", sysv_key(store_dir, "control")), ("sem", sysv_key(store_dir, "alive"))]


def namesrv_objects(namesrv: str) -> list[SysvObject]:
    """The control queue and liveness semaphore of name server ``namesrv``."""
    return [("msg", namesrv_key(namesrv, "control")), ("sem", namesrv_key(namesrv, "alive"))]


def client_semaphores(store_dir: str) -> list[int]:
    """Keys of the liveness semaphores of the clients of the broker on ``store_dir`` that exist
    now (clients in other processes take them: ``IpcTracker`` does not see those)."""
    base = client_keys.family(sysv_key(store_dir, "control"))
    with open(client_keys.SEM_TABLE) as f:
        k = f.readline().split().index("key")
        return [int(row[k]) for row in map(str.split, f) if row and client_keys.in_family(int(row[k]), base)]


def _open(kind: str, key: int) -> sysv_ipc.MessageQueue | sysv_ipc.Semaphore:
    return (sysv_ipc.MessageQueue if kind == "msg" else sysv_ipc.Semaphore)(key)


def existing(objects: Iterable[SysvObject]) -> list[SysvObject]:
    """Those of ``objects`` that exist now."""
    found = set()
    for kind, key in objects:
        try:
            _open(kind, key)
        except sysv_ipc.ExistentialError:
            continue
        found.add((kind, key))
    return sorted(found)


def remove(objects: Iterable[SysvObject]) -> None:
    """Remove ``objects`` (only ever ones a test made); already gone is fine."""
    for kind, key in objects:
        try:
            _open(kind, key).remove()
        except sysv_ipc.ExistentialError:
            pass


class IpcTracker:
    """What one test made: broker names, store directories and the liveness keys taken."""

    def __init__(self, key_log: str) -> None:
        self.names: list[str] = []
        self.stores: list[str] = []
        self.namesrvs: list[str] = []
        self._key_log = key_log

    def name(self, prefix: str) -> str:
        """A broker name no other test (or test session) uses."""
        name = f"{prefix}{os.getpid()}x{next(_counter)}"
        self.names.append(name)
        return name

    def namesrv(self, prefix: str) -> str:
        """A name server name no other test uses; its segment, queue and semaphore are checked."""
        name = f"{prefix}{os.getpid()}x{next(_counter)}"
        self.namesrvs.append(name)
        return name

    def cluster(self, namesrv: str, root: str, brokers: int) -> list[str]:
        """Track the brokers ``shmq.Cluster(root, brokers, namesrv)`` starts; their names."""
        names = [f"{namesrv}-b{i}" for i in range(brokers)]
        self.names.extend(names)
        self.stores.extend(os.path.join(root, n) for n in names)
        return names

    def store(self, path: str) -> str:
        """Track the SysV objects of a broker (or test) using the store at ``path``."""
        self.stores.append(path)
        return path

    def record_key(self, key: int) -> None:
        """Appended to a file, so that keys taken in forked children count too."""
        with open(self._key_log, "a") as f:
            f.write(f"{key}\n")

    def _keys(self) -> list[int]:
        try:
            with open(self._key_log) as f:
                return [int(line) for line in f]
        except FileNotFoundError:
            return []

    def left(self) -> tuple[list[str], list[SysvObject]]:
        """What is still there: /dev/shm entries of the test's brokers, and SysV objects."""
        in_shm = [entry for name in self.names for entry in shm.leftovers(name)]
        in_shm += [routes_name(ns)[1:] for ns in self.namesrvs if os.path.exists(shm.SHM_DIR + routes_name(ns))]
        made = [o for store in self.stores for o in store_objects(store)] + [("sem", k) for k in self._keys()]
        made += [o for ns in self.namesrvs for o in namesrv_objects(ns)]
        return in_shm, existing(made)


@pytest.fixture(autouse=True)
def ipc_tracker(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[IpcTracker]:
    """Track the test's IPC objects; afterwards remove what is left and fail the test for it."""
    tracker = IpcTracker(str(tmp_path_factory.mktemp("ipc") / "keys"))
    hold = Liveness.hold.__func__

    def recording(cls: type[Liveness], *args: object, **kwargs: object) -> Liveness:
        token = hold(cls, *args, **kwargs)
        tracker.record_key(token.key)
        return token

    monkeypatch.setattr(Liveness, "hold", classmethod(recording))
    yield tracker
    in_shm, sysv = tracker.left()
    for name in tracker.names:
        shm.remove_leftovers(name)
    for ns in tracker.namesrvs:
        shm.unlink_segment(routes_name(ns))
    remove(sysv)
    assert not in_shm, f"left in /dev/shm: {in_shm}"
    assert not sysv, f"SysV objects left: {sysv}"
