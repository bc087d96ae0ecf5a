"""The POP rows (``tools/bench/pop_bench.py``, kept in the suite's JSON as ``extras.shmq.pop``)
as table rows and as the benchmarks page's section.

One place for both the suite's screen table and docs/BENCHMARKS.md, so the two never say
different things about the same figures.
"""

from __future__ import annotations

from typing import Any

from tools.bench.pop_bench import SERVER, latency_text
from tools.bench.suite.report import short_rate

COMMAND = "`python tools/bench/pop_bench.py`"
HEADER = ["workers", "system", "msg/s (min–max)", "× push", "server µs/msg", "workers µs/msg", "ack µs/msg"]
HEADER += ["total µs/msg", "reproduce"]
NAMES = {
    "pop": "shmq SimpleConsumer (POP): receive 32, ack each",
    "push": "shmq PushConsumer, clustering group",
    "pool": "multiprocessing.Pool.imap_unordered (chunks of 32)",
    "redis": "Redis Streams XREADGROUP 32 + XACK",
}


def rows(pop: dict[str, Any]) -> list[list[str]]:
    """One row per worker count and system: the rate, its ratio to push, the CPU per message."""
    out = []
    for n, systems in pop["workers"].items():
        push = systems.get("push", {}).get("msgs_s")
        for kind, r in systems.items():
            cmd = f"`python tools/bench/pop_bench.py --workers {n} --systems {kind}`"
            if "error" in r:
                out.append([n, NAMES[kind], r["error"].splitlines()[0][:120], *[""] * 5, cmd])
                continue
            us = r["cpu_us"]
            out.append(
                [
                    n,
                    NAMES[kind],
                    f"{short_rate(r['msgs_s'])} ({short_rate(min(r['runs']))}–{short_rate(max(r['runs']))})",
                    f"{r['msgs_s'] / push:.2f}" if push else "",
                    f"{us['server']:.1f} ({SERVER[kind]})",
                    f"{us['workers']:.1f}",
                    f"{us['ack']:.1f}" if "ack" in us else "",
                    f"{us['total']:.1f}",
                    cmd,
                ]
            )
    return out


def latency_line(pop: dict[str, Any]) -> str:
    """The receive -> ack -> receive cycle of one worker, or why it was not measured."""
    lat = pop.get("latency", {"error": "not run"})
    return (
        f"One worker, one job at a time (receive 1 -> ack -> receive 1): {latency_text(lat)}; reproduce: "
        "`python tools/bench/pop_bench.py --workers 1 --systems pop`."
    )


def section(pop: dict[str, Any] | None, table: Any) -> list[str]:
    """The page's section: what is measured and the figures of this run (if it measured them)."""
    lines = [
        "## A worker pool: SimpleConsumer (POP) against its peers",
        "",
        (
            "Worker processes taking jobs of 100 B from one producer: shmq's `SimpleConsumer` (receive 32, "
            "`ack_async` each, the acks of a receive in one frame), a clustering `PushConsumer` group (its "
            "defaults; a topic of 8 queues, so past 8 members the others idle), `multiprocessing.Pool."
            "imap_unordered` (no broker: nothing survives its parent) and Redis Streams (XREADGROUP COUNT 32 + "
            "one XACK per read). The workers are up before the clock starts; the rate is the jobs over the "
            "time from the first send to the last ack. CPU time (user + system) per message of the server "
            "(the broker, redis-server, or the pool's parent that feeds it) and of the workers; for POP and "
            f"Redis the worker's time in its acks alone. Every row: {COMMAND}."
        ),
        "",
    ]
    if not pop or not pop.get("workers"):
        return [*lines, "Figures: not run in this results file.", ""]
    lines += [
        (
            f"{pop['messages']:,} jobs per run, medians of {pop['reps']}. Load average (1 min) "
            f"{pop['load_average_1m'][0]} at the start of these rows and {pop['load_average_1m'][1]} at the end, "
            f"on {pop['cores']} cores: with more worker processes than cores the rates are the machine's; the "
            "CPU per message is the figure to compare."
        ),
        "",
        *table(HEADER, rows(pop)),
        latency_line(pop),
        "",
    ]
    return lines
