"""`shmq exporter --namesrv` as a user runs it: every broker of the routes in one scrape, each
sample labelled with its broker, each metric declared once; a killed broker leaves the scrape;
a name server that does not run is ``shmq_namesrv_up 0``."""

from __future__ import annotations

from contextlib import AbstractContextManager

import shmq
from shmq import Message, Producer
from tests.cli.test_exporter import _scrape, _value, exporter_process
from tests.ipc_tracking import IpcTracker
from tests.process.cluster import SMALL, running_cluster
from tests.waiting import wait_for


def exporter(namesrv: str) -> AbstractContextManager[str]:
    return exporter_process(["--namesrv", namesrv], f"serving the brokers of name server {namesrv!r}")


def _brokers_in(samples: dict, metric: str) -> set[str]:
    return {dict(labels)["broker"] for name, labels in samples if name == metric}


def test_every_broker_labelled_then_one_after_a_kill(ipc_tracker: IpcTracker, tmp_path) -> None:
    with running_cluster(ipc_tracker, tmp_path) as cluster:
        names = sorted(b.name for b in cluster.brokers)
        shmq.Admin(namesrv=cluster.namesrv).create_topic("Orders", queues=2)
        with Producer("pg", broker=names[1]) as p:
            for _ in range(3):
                p.send(Message("Orders", b"x"))
        with exporter(cluster.namesrv) as url:
            samples = _scrape(url)  # parsed strictly: each family's HELP and TYPE once
            assert _value(samples, "shmq_namesrv_up", namesrv=cluster.namesrv) == 1
            assert _value(samples, "shmq_namesrv_brokers", namesrv=cluster.namesrv) == 2
            for metric in ("shmq_up", "shmq_broker_info", "shmq_broker_messages_in_total"):
                assert _brokers_in(samples, metric) == set(names), metric
            assert all("broker" in dict(labels) for name, labels in samples if not name.startswith("shmq_namesrv"))
            assert wait_for(
                lambda: _value(_scrape(url), "shmq_broker_messages_in_total", broker=names[1]) == 3, timeout=10
            )
            assert _value(samples, "shmq_broker_messages_in_total", broker=names[0]) == 0

            next(b for b in cluster.brokers if b.name == names[0]).kill()
            assert wait_for(lambda: _brokers_in(_scrape(url), "shmq_up") == {names[1]}, timeout=10)
            assert _value(_scrape(url), "shmq_namesrv_brokers", namesrv=cluster.namesrv) == 1


def test_a_name_server_that_does_not_run_is_up_0(ipc_tracker: IpcTracker) -> None:
    ns = ipc_tracker.name("ns")
    with exporter(ns) as url:
        samples = _scrape(url)
        assert _value(samples, "shmq_namesrv_up", namesrv=ns) == 0
        assert not _brokers_in(samples, "shmq_up")


def test_rocketmq5_names_label_each_broker_with_its_cluster(ipc_tracker: IpcTracker, tmp_path) -> None:
    """``--names rocketmq5 --namesrv``: ``cluster`` is the cluster each broker registered with
    (not the single-broker default), ``node_id`` the broker."""
    ns = ipc_tracker.namesrv("ns")
    root = str(tmp_path / "cluster")
    ipc_tracker.cluster(ns, root, 2)
    with shmq.Cluster(root, brokers=2, namesrv=ns, config=SMALL | {"brokerClusterName": "east"}) as cluster:
        names = sorted(b.name for b in cluster.brokers)
        args = ["--namesrv", ns, "--names", "rocketmq5"]
        with exporter_process(args, f"serving the brokers of name server {ns!r}") as url:
            samples = _scrape(url)
            numbers = [dict(labels) for name, labels in samples if name == "rocketmq_topic_number"]
            assert sorted(n["node_id"] for n in numbers) == names
            assert {n["cluster"] for n in numbers} == {"east"}
            assert _brokers_in(samples, "shmq_up") == set(names)  # shmq_up keeps its name in both sets
            assert not [
                name
                for name, _ in samples
                if name.startswith("shmq_") and name != "shmq_up" and not name.startswith("shmq_namesrv")
            ]
