"""Exporter benchmark: broker throughput with `shmq exporter` scraped, against without (same run).

One broker; one producer process sending 100-byte bodies with send_async, 256 Futures in
flight, for ``--seconds``; an exporter process (`shmq exporter --port 0`) runs throughout. Each
round measures, in alternating order, no scraper, a scraper GETting /metrics every 1 s (what
Prometheus does at its most eager usual setting) and every 0.1 s (ten times that). The
median msgs/s over ``--rounds`` per variant is reported with its ratio to the median without a
scraper (goal: within 2 %), the median scrape time, and the exporter's CPU (percent of one
core, median per variant): on a shared, loaded machine the msgs/s of single runs swing by
more than the effect measured, while the exporter's CPU says what it takes from the machine
(the broker does no extra work for a scrape: it is not even told). ``--names rocketmq5``
scrapes RocketMQ 5's metric names instead of the default ``shmq_`` ones. One JSON line.

    .venv/bin/python tools/bench/exporter_bench.py [--seconds S] [--rounds N] [--names shmq|rocketmq5]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import psutil

import shmq
from shmq import Message, Producer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
from tools.bench.windowed import send_async_for

BODY = b"x" * 100
CONFIG = {"mappedFileSizeCommitLog": 256 * 1024 * 1024, "warmAheadSize": 256 * 1024 * 1024}
VARIANTS = {"none": None, "scrape_1s": 1.0, "scrape_100ms": 0.1}


def _produce(broker: str, seconds: float, out: mp.Queue) -> None:
    with Producer("bench", broker=broker) as p:
        msg = Message("Bench", BODY)
        p.send(msg)  # attached and the topic exists before the clock starts
        start = time.perf_counter()
        n = send_async_for(p, msg, seconds, burst=1)
        out.put(n / (time.perf_counter() - start))


def _scrape_loop(url: str, interval: float, stop: threading.Event, times: list[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as r:
            body = r.read()
        assert b"shmq_up{" in body and b"} 1\n" in body
        times.append(time.perf_counter() - t0)
        stop.wait(max(0.0, interval - (time.perf_counter() - t0)))


def _run(broker: str, seconds: float, url: str, interval: float | None, times: list[float]) -> float:
    out: mp.Queue = mp.Queue()
    stop = threading.Event()
    scraper = None
    if interval is not None:
        scraper = threading.Thread(target=_scrape_loop, args=(url, interval, stop, times), daemon=True)
        scraper.start()
    producer = mp.Process(target=_produce, args=(broker, seconds, out))
    producer.start()
    rate = out.get(timeout=seconds + 60)
    producer.join()
    stop.set()
    if scraper is not None:
        scraper.join()
    return rate


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--names", choices=("shmq", "rocketmq5"), default="shmq", help="the exporter's metric names")
    args = ap.parse_args()
    broker = f"expbench{os.getpid()}"
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    times: list[float] = []
    with tempfile.TemporaryDirectory() as store, shmq.Broker(store, broker, CONFIG):
        exporter = subprocess.Popen(
            [sys.executable, "-m", "shmq", "exporter", "--name", broker, "--port", "0", "--names", args.names],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            url = exporter.stdout.readline().rsplit(" ", 1)[1].strip()  # type: ignore[union-attr]
            watched = psutil.Process(exporter.pid)
            _run(broker, args.seconds, url, None, [])  # warm-up (page cache, first commitlog pages): not counted
            order = list(VARIANTS)
            for r in range(args.rounds):
                for variant in order[r % len(order) :] + order[: r % len(order)]:  # rotate: no variant always first
                    before, t0 = _cpu(watched), time.perf_counter()
                    rates[variant].append(_run(broker, args.seconds, url, VARIANTS[variant], times))
                    cpu[variant].append(100 * (_cpu(watched) - before) / (time.perf_counter() - t0))
        finally:
            exporter.terminate()
            exporter.wait(10)
    base = statistics.median(rates["none"])
    print(
        json.dumps(
            {
                "seconds": args.seconds,
                "rounds": args.rounds,
                "names": args.names,
                "msgs_per_s": {v: round(statistics.median(r)) for v, r in rates.items()},
                "ratio": {v: round(statistics.median(r) / base, 4) for v, r in rates.items() if v != "none"},
                "runs": {v: [round(x) for x in r] for v, r in rates.items()},
                "scrape_ms_p50": round(1000 * statistics.median(times), 2) if times else None,
                "scrapes": len(times),
                "exporter_cpu_pct": {v: round(statistics.median(c), 2) for v, c in cpu.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
