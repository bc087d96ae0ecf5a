"""Broker benchmark: one producer process -> broker process, 100-byte bodies.

Scenarios: batch API (send_batch of 256), send_oneway, sync send round trip (p50/p99), and
8 sync-sender processes against a SYNC_FLUSH broker (group commit). Each runs ``--rounds``
times on a fresh store and the median is reported (the dev machines are shared and noisy).

    .venv/bin/python tools/bench/broker_bench.py [--seconds S] [--rounds N]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time

import shmq
from shmq import Message, Producer

BODY = b"x" * 100
CONFIG = {"mappedFileSizeCommitLog": 256 * 1024 * 1024}


def _batch(p: Producer, seconds: float) -> float:
    msgs = [Message("Bench", BODY) for _ in range(256)]
    n, end = 0, time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        p.send_batch(msgs)
        n += len(msgs)
    return n / (time.perf_counter() - start)


def _oneway(p: Producer, seconds: float) -> float:
    msg = Message("Bench", BODY)
    n, end = 0, time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        for _ in range(100):
            p.send_oneway(msg)
        n += 100
    p.send(msg)  # the broker has stored everything before it
    return n / (time.perf_counter() - start)


def _sync(p: Producer, seconds: float) -> tuple[float, float]:
    msg = Message("Bench", BODY)
    lat = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        p.send(msg)
        lat.append(time.perf_counter() - t)
    lat.sort()
    return lat[len(lat) // 2] * 1e6, lat[int(len(lat) * 0.99)] * 1e6


def _sync_sender(name: str, seconds: float, start_at: float, out) -> None:
    p = Producer("bench", broker=name).start()
    msg = Message("Bench", BODY)
    while time.time() < start_at:
        time.sleep(0.001)
    n, end = 0, start_at + seconds
    while time.time() < end:
        p.send(msg)
        n += 1
    p.shutdown()
    out.put(n)


def _sync_flush_8(name: str, seconds: float) -> float:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    start_at = time.time() + 1.0
    procs = [ctx.Process(target=_sync_sender, args=(name, seconds, start_at, q)) for _ in range(8)]
    for pr in procs:
        pr.start()
    total = sum(q.get() for _ in procs)
    for pr in procs:
        pr.join()
    return total / seconds


def run_round(seconds: float) -> dict[str, float]:
    out = {}
    name = f"bench{os.getpid()}"
    with tempfile.TemporaryDirectory() as d, shmq.Broker(d, name, CONFIG):
        with Producer("bench", broker=name) as p:
            p.send(Message("Bench", BODY))
            out["batch msgs/s"] = _batch(p, seconds)
            out["oneway msgs/s"] = _oneway(p, seconds)
            out["sync p50 us"], out["sync p99 us"] = _sync(p, seconds)
    with tempfile.TemporaryDirectory() as d, shmq.Broker(d, name, dict(CONFIG, flushDiskType="SYNC_FLUSH")):
        out["SYNC_FLUSH 8 senders msgs/s"] = _sync_flush_8(name, seconds)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rounds = [run_round(args.seconds) for _ in range(args.rounds)]
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        print(f"{key:>28}: median {statistics.median(values):>12,.1f}   (runs: {', '.join(f'{v:,.1f}' for v in values)})")


if __name__ == "__main__":
    main()
