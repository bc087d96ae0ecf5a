"""Cluster tests run real processes under names of their own: a name server and brokers
(``shmq.Cluster``), or brokers behind a route segment the test writes itself (``routes``), and
check that nothing is left behind (the leak checks of tests/process/broker)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import shmq
from shmq.namesrv.routes import BrokerData, RouteTable
from shmq.namesrv.segment import RouteWriter
from shmq.ring.state import StateReader
from tests.ipc_tracking import IpcTracker, ipc_tracker  # noqa: F401 (autouse fixture)
from tests.process.broker.conftest import SMALL

CONFIG = {**SMALL, "haListenPort": 0}  # no HA sender: ports 10912+i may be taken, and each is a process


@pytest.fixture
def namesrv(ipc_tracker: IpcTracker) -> str:  # noqa: F811
    return ipc_tracker.namesrv("ns")


@pytest.fixture
def make_cluster(tmp_path, ipc_tracker: IpcTracker, namesrv: str) -> Iterator[Callable[..., shmq.Cluster]]:  # noqa: F811
    """``make_cluster(brokers, **config)``: a name server and its brokers, stopped after the test."""
    made: list[shmq.Cluster] = []

    def make(brokers: int = 2, **config: Any) -> shmq.Cluster:
        root = tmp_path / "cluster"
        ipc_tracker.cluster(namesrv, str(root), brokers)
        c = shmq.Cluster(str(root), brokers=brokers, namesrv=namesrv, config={**CONFIG, **config})
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def restart(cluster: shmq.Cluster, i: int, **config: Any) -> shmq.Broker:
    """Start broker ``i`` of ``cluster`` again (after a kill) and wait until it is routed."""
    old = cluster.brokers[i]
    cluster.brokers[i] = shmq.Broker(old.store_dir, old.name, {**CONFIG, **config, "namesrvAddr": cluster.namesrv.name})
    cluster.wait_registered()
    return cluster.brokers[i]


class Routes:
    """A route segment written by the test itself, the way a name server publishes its table:
    ``publish`` names the brokers that are registered now (a master, or a replica with its
    master's broker name and an id >= 1)."""

    def __init__(self, tracker: IpcTracker) -> None:
        self.namesrv = tracker.namesrv("ns")
        self.writer = RouteWriter.create(self.namesrv, control_key=1)
        self.version = 0

    def publish(self, *brokers: tuple[shmq.Broker, str, int]) -> None:
        """(process, broker name, broker id) of each registered broker."""
        entries = []
        for b, broker_name, broker_id in brokers:
            state = StateReader.open(b.name)
            try:
                h = state.view.header[0]
                pid, alive = int(h["broker_pid"]), int(h["alive_key"])
            finally:
                state.close()
            entries.append(
                BrokerData(
                    broker_name=broker_name,
                    attach_name=b.name,
                    cluster="DefaultCluster",
                    broker_id=broker_id,
                    role="ASYNC_MASTER" if broker_id == 0 else "SLAVE",
                    pid=pid,
                    alive_key=alive,
                    store_dir=b.store_dir,
                    registered_ms=int(time.time() * 1000),
                    topics=(),
                )
            )
        self.version += 1
        entries.sort(key=lambda d: (d.broker_name, d.broker_id))
        self.writer.publish(RouteTable(self.namesrv, self.writer.incarnation, self.version, tuple(entries)))

    def restart(self) -> None:
        """The name server process dies and another starts under its name: a new incarnation
        whose table is empty until the brokers register again (``publish``)."""
        self.writer.close()
        self.writer = RouteWriter.create(self.namesrv, control_key=1)

    def close(self) -> None:
        self.writer.unlink()
        self.writer.close()


@pytest.fixture
def routes(ipc_tracker: IpcTracker) -> Iterator[Routes]:  # noqa: F811
    r = Routes(ipc_tracker)
    try:
        yield r
    finally:
        r.close()


class Brokers:
    """Masters started with ``shmq.Broker`` under unique names, stores under ``root``."""

    def __init__(self, root: str, tracker: IpcTracker) -> None:
        self.root = root
        self.tracker = tracker
        self.running: list[shmq.Broker] = []

    def start(self, name: str | None = None, config: dict | None = None) -> shmq.Broker:
        name = name or self.tracker.name("cb")
        store = self.tracker.store(os.path.join(self.root, name))
        b = shmq.Broker(store, name, {**SMALL, **(config or {})})
        self.running.append(b)
        return b

    def stop_all(self) -> None:
        for b in reversed(self.running):
            if b.process.poll() is None:
                b.stop()


@pytest.fixture
def brokers(tmp_path, ipc_tracker: IpcTracker) -> Iterator[Brokers]:  # noqa: F811
    bs = Brokers(str(tmp_path), ipc_tracker)
    try:
        yield bs
    finally:
        bs.stop_all()
