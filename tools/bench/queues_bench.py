"""The suite's queue-count scaling rows alone, with CPU per message in the producer and the broker.

One broker (the suite's store layout, 8 queues per topic), topics created and warmed as the
suite does (one message to each queue), then one producer process round-robins
``send_async(Message(topic_i, data))`` over the topics with a window of 256, no consumer; the
rows run interleaved, ``--reps`` times each. Besides msgs/s it reports, per row, the CPU time
(user+system) per message of the producer and of the broker over the timed part, their minor
page faults per message, and the load average: on a shared machine throughput swings with
load, CPU per message much less.

    .venv/bin/python tools/bench/queues_bench.py --reps 3 --queues 8 1000 10000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.getcwd())

from tools.bench.suite.peers.shmqpeer import STORE_LAYOUT, WINDOW, warm

SPAWN = multiprocessing.get_context("spawn")


def proc_times(pid: int) -> tuple[float, int]:
    """(user+system CPU seconds, minor faults) of a process from /proc (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, int(fields[7])


def producer(broker: str, topics: list[str], seconds: float, size: int, ready, go, out) -> None:
    """The suite's ``scaling_producer`` loop, timed from ``go`` for ``seconds``."""
    import collections

    import shmq

    p = shmq.Producer(f"qbench-{os.getpid()}", broker=broker)
    p.start()
    data = b"x" * size
    msgs = [shmq.Message(t, data) for t in topics]
    nt = len(msgs)
    window: collections.deque = collections.deque()
    ready.set()
    go.wait()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    end = t0 + seconds
    sent = 0
    while True:
        window.append(p.send_async(msgs[sent % nt]))
        sent += 1
        if len(window) >= WINDOW:
            window.popleft().result(60)
            if sent & 1023 == 0 and time.perf_counter() > end:
                break
    for f in window:
        f.result(60)
    elapsed = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    out.put(
        {
            "sent": sent,
            "elapsed": elapsed,
            "cpu": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime),
            "minflt": r1.ru_minflt - r0.ru_minflt,
        }
    )
    p.shutdown()


def spy(pid: int, seconds: float, path: str) -> subprocess.Popen:
    """py-spy (next to this interpreter) sampling ``pid`` for ``seconds`` into a flamegraph-input file."""
    exe = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return subprocess.Popen(
        [
            exe,
            "record",
            "-r",
            "250",
            "-d",
            str(max(1, int(seconds))),
            "-f",
            "raw",
            "--nonblocking",
            "-o",
            path,
            "--pid",
            str(pid),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def one_run(
    broker, topics: list[str], seconds: float, size: int, profile: str | None = None, perf: str | None = None
) -> dict:
    ready, go, out = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    proc = SPAWN.Process(target=producer, args=(broker.name, topics, seconds, size, ready, go, out), daemon=True)
    proc.start()
    ready.wait(60)
    spies = []
    if profile:
        spies = [
            spy(broker.pid, seconds - 1, f"{profile}.broker.txt"),
            spy(proc.pid, seconds - 1, f"{profile}.producer.txt"),
        ]
    if perf:
        spies += [
            subprocess.Popen(
                [
                    "perf",
                    "record",
                    "-F",
                    "999",
                    *os.environ.get("PERF_CG", "-g").split(),
                    "-o",
                    f"{perf}.{who}.data",
                    "-p",
                    str(pid),
                    "--",
                    "sleep",
                    str(max(1, int(seconds - 1))),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for who, pid in (("broker", broker.pid), ("producer", proc.pid))
        ]
    b0 = proc_times(broker.pid)
    go.set()
    r = out.get(timeout=seconds + 120)
    for s in spies:
        s.wait()
    b1 = proc_times(broker.pid)
    proc.join(30)
    n = r["sent"]
    return {
        "msgs_s": n / r["elapsed"],
        "producer_us": r["cpu"] / n * 1e6,
        "broker_us": (b1[0] - b0[0]) / n * 1e6,
        "producer_flt": r["minflt"] / n,
        "broker_flt": (b1[1] - b0[1]) / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--queues", type=int, nargs="*", default=[8, 1000, 10000])
    ap.add_argument("--seconds", type=float, default=1.5, help="timed sending per run (the suite's run_deadline)")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument(
        "--profile", help="py-spy both processes in each run's timed part into PROFILE.<queues>.<rep>.*.txt"
    )
    ap.add_argument(
        "--perf", help="`perf record -g` both processes in each run's timed part into PERF.<queues>.<rep>.*.data"
    )
    a = ap.parse_args()
    import shmq

    workdir = tempfile.mkdtemp(prefix="shmq-qbench.")
    name = f"qbench{os.getpid()}"
    broker = shmq.Broker(workdir, name=name, config=dict(STORE_LAYOUT, default_topic_queue_nums=8))
    admin = shmq.Producer("qbench-admin", broker=name)
    admin.start()
    rows: dict[int, list[dict]] = {q: [] for q in a.queues}
    topics = {q: [f"BenchQ{q}_{t}" for t in range(max(1, q // 8))] for q in a.queues}
    load0 = os.getloadavg()[0]
    try:
        for q in a.queues:
            warm(admin, topics[q])
        for _ in range(a.reps):
            for q in a.queues:
                prof = f"{a.profile}.{q}.{len(rows[q])}" if a.profile else None
                perf = f"{a.perf}.{q}.{len(rows[q])}" if a.perf else None
                rows[q].append(one_run(broker, topics[q], a.seconds, a.size, prof, perf))
    finally:
        admin.shutdown()
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    load1 = os.getloadavg()[0]
    base = None
    out = {"load": [round(load0, 2), round(load1, 2)], "extensions": os.environ.get("SHMQ_NO_EXTENSIONS") != "1"}
    for q in a.queues:
        med = {k: float(np.median([r[k] for r in rows[q]])) for k in rows[q][0]}
        base = base or med["msgs_s"]
        med["ratio_to_first"] = med["msgs_s"] / base
        med["runs"] = [round(r["msgs_s"]) for r in rows[q]]
        out[f"{q} queues"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in med.items()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
