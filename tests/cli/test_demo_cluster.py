"""`shmq demo --brokers N`: the demo on a cluster of a name server and N brokers, and the rows
of its summary that show how the cluster split the work."""

from __future__ import annotations

import inspect
import os
import re
import subprocess

import pytest

import shmq
from shmq.cli.demo_cluster import split_rows
from shmq.namesrv.segment import routes_name
from tests.cli import demo_run


def _cluster_clients() -> str | None:
    """Why this tree cannot run a cluster demo yet, or None."""
    if not hasattr(shmq, "Cluster"):
        return "shmq.Cluster is not in this tree"
    for client in (shmq.Producer, shmq.PushConsumer, shmq.PullConsumer):
        if "namesrv" not in inspect.signature(client).parameters:
            return f"{client.__name__} takes no namesrv= in this tree"
    return None


def test_the_split_rows_name_each_broker_and_each_consumers_queues() -> None:
    rows = split_rows({"d-b1": 300, "d-b0": 100}, {1: [("d-b1", 1), ("d-b0", 1)], 0: [("d-b0", 2), ("d-b0", 0)]})
    assert rows == [
        ("cluster: messages per broker", "d-b0 100 (25%), d-b1 300 (75%)"),
        ("cluster: pull consumer 0's queues", "d-b0 q0 q2"),
        ("cluster: pull consumer 1's queues", "d-b0 q1; d-b1 q1"),
    ]


def test_a_cluster_of_no_brokers_is_refused_in_one_line() -> None:
    out = subprocess.run([demo_run.SHMQ, "demo", "--brokers", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--brokers 0: must be 1 or more" in out.stdout and "Traceback" not in out.stdout + out.stderr


def test_the_demo_on_two_brokers_passes_and_shows_the_split(tmp_path, ipc_tracker) -> None:
    """Every check passes through the name server, both brokers served messages, and each pull
    consumer read queues of both (they are dealt out sorted by broker, then queue id). Nothing
    of the name server or the brokers is left. No figure is compared with a speed."""
    why = _cluster_clients()
    if why:
        pytest.skip(f"the cluster demo needs the cluster clients: {why}")
    store = str(tmp_path / "store")
    p = demo_run.start(str(tmp_path), "--brokers", "2", "--timeout", "90", "--store", store)
    ns = f"demo{p.pid}"
    for i in range(2):
        ipc_tracker.names.append(f"{ns}-b{i}")
        ipc_tracker.store(os.path.join(store, f"{ns}-b{i}"))
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stdout + stderr
    assert "PASS: every message arrived" in stdout
    assert f"name server: {ns}   brokers: {ns}-b0, {ns}-b1" in stdout
    rows = demo_run.summary_rows(stdout)
    assert rows["throughput: arrived"] == "6,000 of 6,000 sent"
    per_broker = dict(re.findall(rf"({ns}-b\d) ([\d,]+) \(", rows["cluster: messages per broker"]))
    assert set(per_broker) == {f"{ns}-b0", f"{ns}-b1"}
    assert sum(int(n.replace(",", "")) for n in per_broker.values()) == 6000
    assert all(int(n.replace(",", "")) > 0 for n in per_broker.values())
    for member in (0, 1):
        assert f"{ns}-b0 q" in rows[f"cluster: pull consumer {member}'s queues"]
        assert f"{ns}-b1 q" in rows[f"cluster: pull consumer {member}'s queues"]
    assert not os.path.exists("/dev/shm" + routes_name(ns)), "the name server's route segment is left"
