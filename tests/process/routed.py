"""Real brokers and a route table naming them, published by the test with ``RouteWriter``
(the name server's own writer) from what each broker publishes in its state segment: its pid,
liveness key, store and topics. ``publish()`` again after a topic change, as a name server does
when a broker re-registers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import shmq
from shmq.client.admin import Admin
from shmq.namesrv.routes import BrokerData, RouteTable, TopicData
from shmq.namesrv.segment import RouteWriter
from shmq.ring.state import StateReader
from tests.ipc_tracking import IpcTracker

SMALL = {
    "mappedFileSizeCommitLog": 4 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 4096,
    "maxHashSlotNum": 1009,
    "maxIndexNum": 4000,
}


class Routed:
    """Brokers ``brokers`` (started) and name server name ``namesrv`` whose routes name them."""

    def __init__(self, namesrv: str, brokers: list[shmq.Broker]) -> None:
        self.namesrv = namesrv
        self.brokers = brokers
        self.writer = RouteWriter.create(namesrv, control_key=1)
        self.version = 0

    def publish(self) -> RouteTable:
        """Publish the live brokers (a killed one is left out) with their topics as they are now."""
        entries = []
        for b in self.brokers:
            if b.process.poll() is not None:
                continue
            reader = StateReader.open(b.name)
            try:
                header = reader.view.header[0]
                pid, alive = int(header["broker_pid"]), int(header["alive_key"])
            finally:
                reader.close()
            topics = tuple(
                TopicData(t.name, t.read_queue_nums, t.write_queue_nums, t.perm)
                for t in sorted(Admin(b.name).topics().values(), key=lambda t: t.name)
            )
            entries.append(
                BrokerData(
                    b.name,
                    b.name,
                    "DefaultCluster",
                    0,
                    "ASYNC_MASTER",
                    pid,
                    alive,
                    b.store_dir,
                    int(time.time() * 1000),
                    topics,
                )
            )
        self.version += 1
        table = RouteTable(self.namesrv, self.writer.incarnation, self.version, tuple(entries))
        self.writer.publish(table)
        return table

    def close(self) -> None:
        self.writer.unlink()
        self.writer.close()


@contextmanager
def routed_brokers(ipc_tracker: IpcTracker, tmp_path: object, n: int = 2) -> Iterator[Routed]:
    """``n`` brokers with their routes published under a fresh name server name."""
    started: list[shmq.Broker] = []
    routed = None
    try:
        for i in range(n):
            name = ipc_tracker.name(f"c{i}")
            started.append(shmq.Broker(ipc_tracker.store(f"{tmp_path}/{name}"), name=name, config=SMALL))
        routed = Routed(ipc_tracker.name("ns"), started)
        routed.publish()
        yield routed
    finally:
        if routed is not None:
            routed.close()
        for b in reversed(started):
            b.stop()  # a killed one: its leftovers are removed
