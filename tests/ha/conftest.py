"""HA tests run real brokers and replicas on loopback TCP (``pair``: a master and a replica's
names and stores, on this host) or on two hosts linked only by TCP (``ha_hosts``, tests/ha/hosts.py);
each test gets unique names and must leave no IPC object behind."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

import shmq
from shmq.config import BrokerConfig
from shmq.ha.shared import HASegment
from tests.ha import hosts
from tests.ha.fake_master import TOKEN, FakeMaster
from tests.ipc_tracking import IpcTracker, ipc_tracker  # noqa: F401 (autouse fixture)

SEGMENT = 1024 * 1024
BASE = {
    "mappedFileSizeCommitLog": SEGMENT,
    "mappedFileSizeConsumeQueue": 20 * 4096,
    "maxHashSlotNum": 1009,
    "maxIndexNum": 40000,
    "haListenPort": 0,
    "flushConsumerOffsetInterval": 100,
}
REPLICA = {
    **BASE,
    "brokerRole": "SLAVE",
    "haReconnectInterval": 100,
    "haSendHeartbeatInterval": 200,
    "haAuthToken": TOKEN,
}


class Pair:
    """A real master broker (no HA sender: the tests stream its store with a FakeMaster) and the
    names and stores of a replica."""

    def __init__(self, tmp: str, tracker: IpcTracker) -> None:
        self.master_name = tracker.name("m")
        self.replica_name = tracker.name("r")
        self.master_store = tracker.store(os.path.join(tmp, "master"))
        self.replica_store = tracker.store(os.path.join(tmp, "replica"))
        self.tmp = tmp
        self.master = shmq.Broker(self.master_store, self.master_name, BASE)
        self._ha = HASegment.open(self.master_name, read_only=True)
        self.replicas: list[shmq.Broker] = []
        self.fakes: list[FakeMaster] = []

    def master_end(self) -> int:
        return self._ha.master_offset

    def fake(self, **kw: object) -> FakeMaster:
        f = FakeMaster(self.master_store, SEGMENT, self.master_end, **kw)  # type: ignore[arg-type]
        self.fakes.append(f)
        return f

    def config_file(self, address: str, **extra: object) -> str:
        path = os.path.join(self.tmp, f"replica{len(self.replicas)}.conf")
        with open(path, "w") as f:
            f.write(BrokerConfig.from_mapping({**REPLICA, "haMasterAddress": address, **extra}).to_properties())
        return path

    def replica(self, address: str, **extra: object) -> shmq.Broker:
        r = shmq.Broker(self.replica_store, self.replica_name, self.config_file(address, **extra))
        self.replicas.append(r)
        return r

    def close(self) -> None:
        for f in self.fakes:
            f.close()
        for r in self.replicas:
            r.stop()
        self._ha.close()
        self.master.stop()


@pytest.fixture
def pair(tmp_path, ipc_tracker: IpcTracker) -> Iterator[Pair]:  # noqa: F811
    p = Pair(str(tmp_path), ipc_tracker)
    try:
        yield p
    finally:
        p.close()


def stop_pid(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM a broker that is not our child (a promoted one) and wait until it is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def ha_hosts() -> Iterator[tuple[hosts.Host, hosts.Host]]:
    """A fresh (master, replica) pair for the test; skips when hosts cannot be made (not root, no iproute2)."""
    reason = hosts.unavailable()
    if reason:
        pytest.skip(reason)
    with hosts.pair() as pair:
        yield pair
