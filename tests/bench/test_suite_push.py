"""The suite's send -> push listener latency workload: a short run gives a latency per send API,
and the report renders it (or the reason it failed)."""
from __future__ import annotations

import dataclasses

from tools.bench.suite import report
from tools.bench.suite.peers.shmqpeer import PUSH_APIS, Shmq
from tools.bench.suite.settings import settings


def test_push_latency_workload_measures_every_message(tmp_path):
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


def _res(push: dict) -> dict:
    return {"results": {}, "extras": {"shmq": {"push": push}}}


def test_report_renders_the_push_rows():
    run = {"p50_us": 410.0, "p99_us": 2100.0, "p999_us": 4000.0, "rounds": 3000}
    tables = report.rows(_res({api: {"runs": [run], "rate": 1000, **run} for api in PUSH_APIS}))
    (title,) = [t for t in tables if "push listener" in t]
    assert [r[0] for r in tables[title][1:]] == [f"`{api}`" for api in PUSH_APIS]
    assert tables[title][1][1:4] == ["410", "2,100", "4,000"]
    failed = report.rows(_res({"error": "RunError: boom"}))
    assert any("boom" in cell for row in failed[title] for cell in row)
