"""Timer delivery: lateness and broker CPU for N messages with random delivery times.

Producer processes park ``--messages`` messages with ``deliver_at`` spread uniformly over a
window of ``messages / rate`` seconds that starts once all are parked (so ``--rate`` is the
delivery rate asked of the broker, and at the window's start every message is pending). When
the window has passed, a pull consumer reads the real topic: lateness of a message = its store
time in the real topic - its due time (the TIMER_DELIVER_MS the broker kept), both broker
clock ms. Broker CPU (psutil, user + system) is measured over the parking and over the
delivery window; RssAnon (anonymous memory) before parking and with everything pending.

    .venv/bin/python tools/bench/delay_bench.py [--messages 1000000] [--rate 10000] [--producers 2] [--runs 1]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import tempfile
import time

import numpy as np
import psutil

import shmq
from shmq import Message, Producer, PullConsumer, PullStatus
from shmq.errors import BrokerBusyError

TOPIC = "Timed"
CONFIG = {"mappedFileSizeCommitLog": 1 << 30, "timerMaxDelaySec": 3600}
WINDOW = 1024  # async sends in flight per producer


def rss_anon(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon")


def cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def park(broker: str, dues: np.ndarray, first: int) -> None:
    """One producer process: every message async, at most WINDOW unanswered; one refused as
    busy (the 2-core machine is shared) is sent again, synchronously."""
    with Producer(f"bench{first}", broker=broker) as p:
        inflight: list = []

        def settle(k: int) -> None:
            for f, msg in inflight[:k]:
                try:
                    f.result(timeout=60)
                except BrokerBusyError:
                    p.send(msg)
            del inflight[:k]

        for i, due in enumerate(dues.tolist()):
            msg = Message(TOPIC, b"%d" % (first + i), deliver_at=due)
            inflight.append((p.send_async(msg), msg))
            if len(inflight) >= WINDOW:
                settle(WINDOW // 2)
        settle(len(inflight))


def park_all(broker: str, n: int, producers: int, start: float, window: float, seed: int) -> None:
    dues = start + np.random.default_rng(seed).random(n) * window
    ctx = mp.get_context("spawn")
    parts = np.array_split(np.arange(n), producers)
    procs = [ctx.Process(target=park, args=(broker, dues[part], int(part[0]))) for part in parts if len(part)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
        if pr.exitcode:
            raise RuntimeError(f"producer exited with {pr.exitcode}")


def lateness(broker: str, n: int, timeout: float) -> np.ndarray:
    late: list[int] = []
    with PullConsumer("bench-check", broker=broker) as c:
        queues = c.fetch_queues(TOPIC)
        offsets = dict.fromkeys(queues, 0)
        deadline = time.monotonic() + timeout
        while len(late) < n and time.monotonic() < deadline:
            for mq in queues:
                r = c.pull(mq, "*", offset=offsets[mq], max_nums=4096, timeout=0.05)
                if r.status is PullStatus.FOUND:
                    late += [m.store_timestamp - int(m.properties["TIMER_DELIVER_MS"]) for m in r.messages]
                    offsets[mq] = r.next_begin_offset
    return np.array(late, np.int64)


def run(n: int, rate: float, producers: int, seed: int) -> dict[str, float]:
    window = n / rate
    with (
        tempfile.TemporaryDirectory(prefix="shmq-delay-") as d,
        shmq.Broker(d, f"delay{int(time.time() * 1000) % 100000}", CONFIG) as broker,
    ):
        proc = psutil.Process(broker.pid)
        rss0, cpu0, t0 = rss_anon(broker.pid), cpu(proc), time.time()
        # calibrate: parking speed decides when the window can start
        probe = min(20_000, n)
        park_all(broker.name, probe, producers, t0 + 3600 - 1, 1, seed)
        per_msg = (time.time() - t0) / probe
        start = time.time() + per_msg * (n - probe) * 1.3 + 5
        park_all(broker.name, n - probe, producers, start, window, seed + 1)
        parked_at = time.time()
        cpu_park = cpu(proc) - cpu0
        rss_pending = rss_anon(broker.pid)
        if parked_at > start:
            print(f"  warning: parking ended {parked_at - start:.1f} s into the window")
        time.sleep(max(0.0, start - time.time()))
        cpu1 = cpu(proc)
        time.sleep(window + 1)
        cpu_deliver = cpu(proc) - cpu1
        late = lateness(broker.name, n - probe, timeout=120)
    p50, p99, pmax = np.percentile(late, [50, 99, 100]) if len(late) else (np.nan,) * 3
    return {
        "messages": n,
        "delivered": len(late),
        "rate": rate,
        "p50_ms": float(p50),
        "p99_ms": float(p99),
        "max_ms": float(pmax),
        "park_us": cpu_park / n * 1e6,
        "deliver_us": cpu_deliver / (n - probe) * 1e6,
        "park_s": parked_at - t0,
        "rss_pending_mib": (rss_pending - rss0) / 2**20,
        "rss_bytes_per_msg": (rss_pending - rss0) / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=10_000, help="deliveries per second asked of the broker")
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    results = []
    for i in range(args.runs):
        r = run(args.messages, args.rate, args.producers, seed=100 * i)
        results.append(r)
        print(
            f"run {i + 1}: " + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
            flush=True,
        )
    if len(results) > 1:
        keys = [k for k in results[0] if k not in ("messages", "rate")]
        print("median: " + ", ".join(f"{k}={statistics.median(r[k] for r in results):.1f}" for k in keys))


if __name__ == "__main__":
    main()
