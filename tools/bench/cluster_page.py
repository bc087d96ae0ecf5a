"""The cluster rows (``tools/bench/cluster_bench.py``, kept in the suite's JSON as
``extras.shmq.cluster``) as table rows and as the benchmarks page's section with its model.

One place for both the suite's screen table and docs/BENCHMARKS.md, so the two never say
different things about the same figures.
"""

from __future__ import annotations

from typing import Any

from tools.bench.cluster_bench import KINDS, VIA, predict
from tools.bench.suite.report import short_rate

COMMAND = "`python tools/bench/cluster_bench.py`"
HEADER = ["brokers", "end to end msg/s (min–max)", *(f"{k} µs/msg" for k in KINDS), "total µs/msg"]
HEADER += ["× one broker's CPU", "producer only msg/s", "× one broker"]
CORES = (16, 64)


def rows(cluster: dict[str, Any]) -> list[list[str]]:
    """One row per broker count: rates and the CPU per message of each kind of process."""
    brokers = cluster["brokers"]
    base = brokers[min(brokers, key=int)]
    out = []
    for n, r in brokers.items():
        e, p = r["end_to_end"], r["producer_only"]
        out.append(
            [
                n,
                f"{short_rate(e['msgs_s'])} ({short_rate(min(e['runs']))}–{short_rate(max(e['runs']))})",
                *(f"{e['cpu_us'][k]:.2f}" for k in KINDS),
                f"{e['cpu_us']['total']:.2f}",
                f"{e['cpu_us']['total'] / base['end_to_end']['cpu_us']['total']:.2f}",
                short_rate(p["msgs_s"]),
                f"{p['msgs_s'] / base['producer_only']['msgs_s']:.2f}",
            ]
        )
    return out


def model_rows(cluster: dict[str, Any]) -> list[list[str]]:
    """What the model predicts from one broker's CPU per message, for a few core counts."""
    brokers = cluster["brokers"]
    cpu = brokers[min(brokers, key=int)]["end_to_end"]["cpu_us"]
    out = []
    for cores in CORES:
        rate, needed = predict(cpu, cores)
        out.append([str(cores), short_rate(rate), str(needed)])
    return out


def namesrv_result(cluster: dict[str, Any]) -> str:
    """`namesrv=` sends against `broker=` sends: both rates and their ratio, or why not run."""
    ns = cluster.get("namesrv", {})
    if "error" in ns or not ns:
        return ns.get("error", "not run")
    rates = f"{short_rate(ns['namesrv']['msgs_s'])} against {short_rate(ns['broker']['msgs_s'])} msg/s"
    return f"{rates}, {ns['ratio']:.3f}×"


def namesrv_line(cluster: dict[str, Any]) -> str:
    return (
        "`namesrv=` against `broker=` sends on a one-broker cluster (producer only, batches): "
        f"{namesrv_result(cluster)}."
    )


def section(cluster: dict[str, Any] | None, table: Any) -> list[str]:
    """The page's section: what is measured, the figures of this run (if it measured them), the model."""
    lines = [
        "## A cluster on one host (shmq only)",
        "",
        (
            "One broker process is one core's worth of Python; a cluster (a name server and several brokers) "
            "is how shmq uses more cores. For 1, 2 and 4 brokers: as many producers sending batches of 100 "
            "bodies of 100 B (4 in flight) and as many pull consumers reading columns, end to end; the same "
            "producers alone; and the CPU time (user + system) each kind of process spends per message over the "
            f"timed phase. Reproduce: {COMMAND}."
        ),
        "",
    ]
    if not cluster or "error" in cluster.get("brokers", {"error": "not run"}):
        why = (cluster or {}).get("brokers", {}).get("error", "not run in this results file")
        lines += [f"Figures: {why}.", ""]
    else:
        lines += [
            f"Clients: {VIA[cluster.get('via', 'broker')]}.",
            "",
            (
                f"Load average (1 min) {cluster['load_average_1m'][0]} at the start of these rows and "
                f"{cluster['load_average_1m'][1]} at the end, on {cluster['cores']} cores: with more processes than "
                "cores the rates are the machine's, not shmq's; the CPU per message is the figure to compare."
            ),
            "",
            *table(HEADER, rows(cluster)),
        ]
    lines += [
        "The model: every message passes one producer, one broker and one consumer, each a process of its own, so "
        "a host of C cores moves at most",
        "",
        "    messages/s = C / (broker + producer + consumer CPU seconds per message)",
        "",
        (
            "with enough brokers: each broker is one Python thread, so N brokers carry at most "
            "N / (broker CPU seconds per message)."
        ),
        "",
    ]
    if cluster and "error" not in cluster.get("brokers", {"error": ""}):
        lines += [
            "From one broker's CPU per message above:",
            "",
            *table(["cores", "predicted msg/s", "brokers it takes"], model_rows(cluster)),
            namesrv_line(cluster),
            "",
        ]
    return lines
