"""Workload sizes for the full and the QUICK run: counts, deadlines, repetitions."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Settings:
    """How much each workload does; every run stops at its deadline whatever its count."""

    quick: bool
    reps: int
    msg_count: int  # per-message API, messages per run (all producers together)
    batch_count: int  # batch API, messages per run
    batch_size: int  # messages per batch call
    run_deadline: float  # seconds a throughput run may send for
    latency_rounds: int
    latency_deadline: float
    durable_senders: int
    durable_count: int  # messages per sender
    durable_deadline: float
    queue_counts: tuple[int, ...] = (8, 1000, 10000)
    scaling_count: int = 0
    backlog_count: int = 0
    backlog_deadline: float = 0.0
    push_count: int = 3_000  # messages of the push listener latency workload (at 1,000 msgs/s)
    cluster_seconds: float = 2.0  # how long the producers of one cluster run send (tools/bench/cluster_bench.py)
    cluster_brokers: tuple[int, ...] = (1, 2, 4)  # the broker counts of the cluster rows
    pop_messages: int = 100_000  # jobs per run of the worker-pool rows (tools/bench/pop_bench.py)
    pop_workers: tuple[int, ...] = (1, 4, 16)  # the worker counts of those rows
    pop_rounds: int = 5_000  # jobs of the POP latency row
    sizes: tuple[int, ...] = (100, 1024)
    patterns: tuple[tuple[int, int], ...] = ((1, 1), (4, 2))
    apis: tuple[str, ...] = ("msg", "batch")
    extra: dict = field(default_factory=dict)


def settings(quick: bool) -> Settings:
    if quick:
        return Settings(
            quick=True,
            reps=1,
            msg_count=3_000,
            batch_count=20_000,
            batch_size=100,
            run_deadline=0.25,
            latency_rounds=500,
            latency_deadline=0.3,
            durable_senders=8,
            durable_count=100,
            durable_deadline=0.3,
            queue_counts=(8, 1000),  # the 10,000-queue row only in the full run (its topics take long to make)
            scaling_count=20_000,
            backlog_count=100_000,
            backlog_deadline=5.0,
            push_count=300,
            cluster_seconds=0.3,
            cluster_brokers=(2,),  # tests/bench/test_cluster_bench.py runs one and two brokers
            sizes=(100,),  # the 1 KiB rows only in the full run: the same code paths with larger bodies
            pop_messages=1_000,
            pop_workers=(2,),  # tests/bench/test_pop_bench.py runs one and two workers
            pop_rounds=100,
        )
    return Settings(
        quick=False,
        reps=3,
        msg_count=100_000,
        batch_count=400_000,
        batch_size=100,
        run_deadline=1.5,
        latency_rounds=10_000,
        latency_deadline=2.0,
        durable_senders=8,
        durable_count=2_000,
        durable_deadline=2.0,
        queue_counts=(8, 1000, 10000),
        scaling_count=400_000,
        backlog_count=10_000_000,
        backlog_deadline=40.0,
    )
