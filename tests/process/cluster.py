"""A real cluster for tests: a name server and brokers started by ``shmq.Cluster``, tracked by
``ipc_tracker`` (names, stores, the name server's objects), stopped whatever the test did."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import shmq
from shmq.namesrv.segment import RouteReader
from tests.ipc_tracking import IpcTracker
from tests.waiting import wait_for

SMALL = {
    "mappedFileSizeCommitLog": 4 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 4096,
    "maxHashSlotNum": 1009,
    "maxIndexNum": 4000,
    "haListenPort": 0,  # no HA sender per broker: these tests never use one, and ports 10912+i may be taken
}


class TestCluster:
    """``cluster`` with its name server's name and its brokers at hand."""

    def __init__(self, cluster: shmq.Cluster) -> None:
        self.cluster = cluster
        self.namesrv = cluster.namesrv.name
        self.brokers = cluster.brokers

    def wait_route(self, topic: str) -> None:
        """Wait until the routes show ``topic`` on every running broker (a broker re-registers
        its topics on its next tick after a change)."""
        reader = RouteReader(self.namesrv)
        want = {b.name for b in self.brokers if b.process.poll() is None}
        try:
            assert wait_for(lambda: {b.attach_name for b in reader.read().topic_route(topic).brokers} == want, 30)
        finally:
            reader.close()


@contextmanager
def running_cluster(ipc_tracker: IpcTracker, tmp_path: object, brokers: int = 2) -> Iterator[TestCluster]:
    """A name server and ``brokers`` brokers registered with it, under fresh names."""
    ns = ipc_tracker.namesrv("ns")
    root = os.path.join(str(tmp_path), "cluster")
    ipc_tracker.cluster(ns, root, brokers)
    with shmq.Cluster(root, brokers=brokers, namesrv=ns, config=SMALL) as cluster:
        yield TestCluster(cluster)
