"""A master and its replica in a cluster: the replica registers under the master's broker name
with its own id, and is where the broker name is read from once the master is gone."""

from __future__ import annotations

import os
import shutil
import socket

import shmq
from shmq.namesrv.segment import RouteReader
from tests.ipc_tracking import IpcTracker
from tests.namesrv.conftest import BASE, pids, table_when


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_replica_registers_under_its_masters_name(
    tmp_path: object, ipc_tracker: IpcTracker, ns_name: str, reader: RouteReader
) -> None:
    tmp = str(tmp_path)
    port = _free_port()
    m_name, r_name = ipc_tracker.name("m"), ipc_tracker.name("r")
    m_store = ipc_tracker.store(os.path.join(tmp, "master"))
    r_store = ipc_tracker.store(os.path.join(tmp, "replica"))
    with shmq.NameServer(ns_name):
        master = shmq.Broker(m_store, m_name, {**BASE, "haListenPort": port, "namesrvAddr": ns_name})
        replica = None
        try:
            os.makedirs(os.path.join(r_store, "config"), mode=0o700)
            shutil.copy(os.path.join(m_store, "config", "ha.token"), os.path.join(r_store, "config", "ha.token"))
            replica = shmq.Broker(
                r_store,
                r_name,
                {
                    **BASE,
                    "brokerRole": "SLAVE",
                    "haMasterAddress": f"127.0.0.1:{port}",
                    "namesrvAddr": ns_name,
                    "masterBrokerName": m_name,
                    "brokerId": 2,
                },
            )
            table = table_when(reader, lambda t: pids(t) == {master.pid, replica.pid})  # type: ignore[union-attr]
            entry = table.broker(m_name, 2)
            assert entry is not None and (entry.attach_name, entry.role) == (r_name, "SLAVE")
            assert table.masters() == [table.broker(m_name, 0)]
            assert table.clusters() == {"DefaultCluster": [m_name]}
            shmq.Admin(broker=m_name).create_topic("Pairs", 2)  # the replica takes it over HA
            table = table_when(reader, lambda t: len(t.topic_route("Pairs").brokers) == 2)
            assert table.topic_route("Pairs").read_from(m_name).attach_name == m_name  # type: ignore[union-attr]
            master.kill()
            table = table_when(reader, lambda t: pids(t) == {replica.pid})  # type: ignore[union-attr]
            assert [b.attach_name for b in table.replicas(m_name)] == [r_name] and table.masters() == []
            route = table.topic_route("Pairs")
            assert route.read_from(m_name).attach_name == r_name  # type: ignore[union-attr]
            assert route.write_queues() == [] and len(route.read_queues()) == 2
        finally:
            if replica is not None:
                replica.stop()
            master.stop()
