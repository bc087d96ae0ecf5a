"""tools/bench/pop_bench.py: a short real run of its rows (a broker, a redis-server and worker
processes of their own), and how the benchmarks page shows them."""

from __future__ import annotations

import json

from tests.ipc_tracking import ipc_tracker  # noqa: F401 (autouse fixture)
from tools.bench import docs_page, pop_bench, pop_page


def test_every_system_takes_every_job_and_its_processes_spend_cpu_on_them(
    tmp_path,
    ipc_tracker,  # noqa: F811
) -> None:
    """Each row took every job (a run raises otherwise) and measured its server's and its
    workers' CPU; the latency row has its percentiles. No speed is asserted."""
    name = ipc_tracker.name("pb")
    ipc_tracker.store(str(tmp_path / name))
    # one worker here: the suite smoke test (tests/bench/test_suite_smoke.py) runs two
    res = pop_bench.run(messages=1_000, reps=1, counts=(1,), rounds=50, name=name, root=str(tmp_path))
    assert set(res["workers"]) == {"1"}
    spent = 0.0
    for row in res["workers"].values():
        assert set(row) == set(pop_bench.SYSTEMS)
        for kind, r in row.items():
            assert "error" not in r, (kind, r)
            assert r["msgs_s"] > 0 and len(r["runs"]) == 1
            assert r["cpu_us"]["total"] == r["cpu_us"]["server"] + r["cpu_us"]["workers"]
            spent += r["cpu_us"]["total"]
            assert ("ack" in r["cpu_us"]) == (kind in ("pop", "redis"))
    assert spent > 0  # per run CPU time is counted in 10 ms ticks: a short run may show none
    lat = res["latency"]
    assert lat["rounds"] == 50 and 0 < lat["ack_us"]["p50"] <= lat["cycle_us"]["p99"]
    assert len(pop_bench.summary(res)) == 1 + len(pop_bench.SYSTEMS) + 1


def _pop() -> dict:
    fig = {"msgs_s": 2000.0, "runs": [1900.0, 2000.0, 2100.0], "cpu_us": {"server": 10.0, "workers": 20.0}}
    fig["cpu_us"]["total"] = 30.0
    pop = json.loads(json.dumps(fig))
    pop["cpu_us"] |= {"ack": 3.0}
    return {
        "messages": 1000,
        "reps": 3,
        "cores": 2,
        "load_average_1m": [1.0, 2.0],
        "workers": {"1": {"pop": pop, "push": fig | {"msgs_s": 4000.0}, "pool": {"error": "boom\nmore"}, "redis": fig}},
        "latency": {"rounds": 100, "cycle_us": {"p50": 80.0, "p99": 300.0}, "ack_us": {"p50": 30.0, "p99": 90.0}},
    }


def test_the_page_shows_each_row_its_ratio_to_push_and_the_latency(tmp_path) -> None:
    """The rows carry the ratio to push, the ack cost where the workers ack, a failed system's
    first line; the section says the command and the latency."""
    rows = pop_page.rows(_pop())
    assert rows[0][:4] == ["1", pop_page.NAMES["pop"], "2.0k (1.9k–2.1k)", "0.50"]
    assert rows[0][6] == "3.0" and rows[1][6] == ""
    assert rows[0][-1] == "`python tools/bench/pop_bench.py --workers 1 --systems pop`"
    assert rows[2][2] == "boom"
    res = json.loads(docs_page.JSON_PATH.read_text())
    res["extras"]["shmq"]["pop"] = _pop()
    section = docs_page.render(res).split("## A worker pool", 1)[1].split("\n## ", 1)[0]
    assert pop_page.COMMAND in section and "| 1 | shmq SimpleConsumer (POP)" in section
    assert "the cycle p50 80 µs, p99 300 µs; the ack alone p50 30 µs" in section
    del res["extras"]["shmq"]["pop"]
    assert "Figures: not run in this results file." in docs_page.render(res)
