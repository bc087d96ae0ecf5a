"""tools/bench/cluster_bench.py: a short real run of its rows (brokers, producers and consumers
in processes of their own), and how the benchmarks page shows them with the model."""

from __future__ import annotations

import json
import time

import pytest

import shmq
from tests.ipc_tracking import ipc_tracker  # noqa: F401 (autouse fixture)
from tools.bench import cluster_bench, cluster_page, docs_page


def test_one_and_two_brokers_move_every_message_and_measure_each_kind_of_process(
    tmp_path,
    ipc_tracker,  # noqa: F811
) -> None:
    """Every message sent is consumed (run_once raises otherwise), every kind of process spent
    CPU on them, and the producer-only rows have no consumer figure. No speed is asserted."""
    prefix = ipc_tracker.name("cb")
    for name in (f"{prefix}{sep}b{i}" for sep in ("", "-") for i in range(2)):  # standalone or a cluster's
        ipc_tracker.names.append(name)
        ipc_tracker.store(str(tmp_path / name))
    rows = cluster_bench.scaling(str(tmp_path), (1, 2), 0.3, 1, prefix)
    assert set(rows) == {"1", "2"}
    for r in rows.values():
        e, p = r["end_to_end"], r["producer_only"]
        assert e["msgs_s"] > 0 and p["msgs_s"] > 0
        assert all(e["cpu_us"][k] > 0 for k in cluster_bench.KINDS)
        assert e["cpu_us"]["total"] == pytest.approx(sum(e["cpu_us"][k] for k in cluster_bench.KINDS))
        assert "consumer" not in p["cpu_us"] and p["cpu_us"]["producer"] > 0


def test_a_process_that_fails_stops_the_run_at_once_with_its_reason(
    tmp_path,
    ipc_tracker,  # noqa: F811
) -> None:
    """A producer that cannot attach (no broker of that name) breaks the start barrier: the run
    raises its one-line reason well before the 120 s the others would wait at the barrier."""
    name = ipc_tracker.name("cb")
    with shmq.Broker(ipc_tracker.store(str(tmp_path / name)), name=name, config=cluster_bench.CONFIG) as b:
        t = time.monotonic()
        with pytest.raises(RuntimeError, match=r"producer: BrokerNotFoundError: .*nosuch"):
            cluster_bench.run_once([b], [{"broker": f"{name}nosuch"}], 0.3, consume=True)
        assert time.monotonic() - t < 60


def _cluster(broker_us: float, producer_us: float, consumer_us: float) -> dict:
    cpu = {"broker": broker_us, "producer": producer_us, "consumer": consumer_us}
    row = {"msgs_s": 400_000.0, "runs": [390_000.0, 400_000.0, 410_000.0], "cpu_us": cpu | {"total": sum(cpu.values())}}
    return {
        "seconds": 2.0,
        "reps": 3,
        "cores": 2,
        "load_average_1m": [0.3, 1.9],
        "brokers": {"1": {"end_to_end": row, "producer_only": row}, "2": {"end_to_end": row, "producer_only": row}},
        "namesrv": {"error": "not available yet: shmq.Cluster not importable"},
    }


def test_the_model_is_cores_over_the_cpu_a_message_costs_in_every_process() -> None:
    """1 + 2 + 1 us per message: 16 cores move 4 M msgs/s, with 4 brokers (each carries 1 M)."""
    rate, brokers = cluster_bench.predict(_cluster(1.0, 2.0, 1.0)["brokers"]["1"]["end_to_end"]["cpu_us"], 16)
    assert rate == pytest.approx(4e6) and brokers == 4
    assert cluster_page.model_rows(_cluster(1.0, 2.0, 1.0)) == [["16", "4.00M", "4"], ["64", "16.00M", "16"]]


def test_the_page_shows_the_rows_the_model_and_why_a_row_did_not_run() -> None:
    with open(docs_page.JSON_PATH) as f:
        res = json.load(f)
    res["extras"]["shmq"]["cluster"] = _cluster(1.0, 2.0, 1.0)
    page = docs_page.render(res)
    section = page.split("## A cluster on one host", 1)[1].split("\n## ", 1)[0]
    assert "| 2 | 400.0k (390.0k–410.0k) | 1.00 | 2.00 | 1.00 | 4.00 | 1.00 | 400.0k | 1.00 |" in section
    assert "messages/s = C / (broker + producer + consumer CPU seconds per message)" in section
    assert "| 64 | 16.00M | 16 |" in section
    assert "not available yet: shmq.Cluster not importable" in section
    assert "Load average (1 min) 0.3 at the start" in section
    assert "Clients: standalone brokers; a producer and a consumer given broker= per broker." in section
    res["extras"]["shmq"]["cluster"]["namesrv"] = {
        "namesrv": {"msgs_s": 495_000.0},
        "broker": {"msgs_s": 500_000.0},
        "ratio": 0.99,
    }
    assert "(producer only, batches): 495.0k against 500.0k msg/s, 0.990×." in docs_page.render(res)
    del res["extras"]["shmq"]["cluster"]
    without = docs_page.render(res).split("## A cluster on one host", 1)[1].split("\n## ", 1)[0]
    assert "Figures: not run in this results file." in without and "| 64 |" not in without
