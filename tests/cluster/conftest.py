"""Cluster tests run a real name server and brokers (``shmq.Cluster``) under names of their own,
and check that neither leaves anything behind (the leak checks of tests/process/broker)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import shmq
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
