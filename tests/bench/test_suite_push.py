"""The suite's send -> push listener latency workload: a short run gives a latency per send API,
and the report renders it (or the reason it failed)."""

from __future__ import annotations

import dataclasses

import pytest

from tools.bench.suite import report
from tools.bench.suite.peers.fifo import FasterFifo
from tools.bench.suite.peers.shmqpeer import PUSH_APIS, Shmq
from tools.bench.suite.peers.zmqipc import ZmqIpc
from tools.bench.suite.settings import settings


def test_push_latency_workload_measures_every_message(tmp_path):
    """shmq: every message sent reaches the listener and is timed, with both send APIs."""
    system = Shmq()
    assert system.install() is None
    system.start(str(tmp_path))
    try:
        res = system._push_latency(dataclasses.replace(settings(True), reps=1, push_count=200))
    finally:
        system.stop()
    assert set(res) == set(PUSH_APIS)
    for api, v in res.items():
        (run,) = v["runs"]
        assert run["rounds"] == 200, api
        assert 0 < v["p50_us"] <= v["p99_us"] <= v["p999_us"] < 10e6, (api, v)


def test_report_renders_the_push_rows():
    run = {"p50_us": 410.0, "p99_us": 2100.0, "p999_us": 4000.0, "rounds": 3000}
    res = {
        "results": {},
        "extras": {
            "shmq": {"push": {api: {"runs": [run], "rate": 1000, **run} for api in PUSH_APIS}, "queues": {}},
            "zmq ipc": {"push": {"error": "RunError: boom"}},
        },
    }
    tables = report.rows(res)
    (title,) = [t for t in tables if "listener latency" in t]
    rows = tables[title][1:]
    assert [r[:2] for r in rows[:2]] == [["shmq", f"`{api}`"] for api in PUSH_APIS]
    assert rows[0][2:5] == ["410", "2,100", "4,000"]
    assert rows[2][0] == "zmq ipc" and "boom" in rows[2][2]


@pytest.mark.parametrize("peer", [FasterFifo, ZmqIpc])
def test_peers_time_every_message(peer, tmp_path):
    system = peer()
    if system.install() is not None:
        pytest.skip(system.install())
    system.start(str(tmp_path))
    try:
        (res,) = system.extra_workloads(dataclasses.replace(settings(True), reps=1, push_count=200)).values()
    finally:
        system.stop()
    ((api, v),) = res.items()
    assert v["runs"][0]["rounds"] == 200, (api, v)
    assert 0 < v["p50_us"] <= v["p99_us"] < 10e6
