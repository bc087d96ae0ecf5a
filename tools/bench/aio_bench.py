"""``shmq.aio`` send rate and latency against the sync producer's (issue 14, part 5).

One producer in this process against a broker process, 100-byte bodies, a fresh store per run.
Throughput, 256 sends in flight: ``send_async`` keeping a window of 256 futures, vs ``await
aio.send`` from 256 tasks that each send in a loop (``tasks``) and vs windows of 256 sends
awaited with ``asyncio.gather`` (``gather``). The goal: aio >= 80 % of send_async's rate.
Latency of one send at a time (p50): ``send`` (sync), ``send_async(...).result()``, ``await
asyncio.wrap_future(send_async(...))`` (what aio users did before) and ``await aio.send``.
Medians over ``--rounds`` runs.

    .venv/bin/python tools/bench/aio_bench.py [--seconds S] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import shmq
import shmq.aio
from shmq import Message

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
from tools.bench.windowed import send_async_for

BROKER = "aio_bench"
BODY = b"x" * 100
WINDOW = 256
CONFIG = {"mappedFileSizeCommitLog": 256 * 1024 * 1024}


def _send_async(p: shmq.Producer, seconds: float) -> int:
    return send_async_for(p, Message("Bench", BODY), seconds, WINDOW)


async def _tasks(p: shmq.aio.Producer, seconds: float) -> int:
    msg = Message("Bench", BODY)
    end = time.perf_counter() + seconds

    async def worker() -> int:
        n = 0
        while time.perf_counter() < end:
            await p.send(msg)
            n += 1
        return n

    return sum(await asyncio.gather(*(worker() for _ in range(WINDOW))))


async def _gather(p: shmq.aio.Producer, seconds: float) -> int:
    msg = Message("Bench", BODY)
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        n += len(await asyncio.gather(*(p.send(msg) for _ in range(WINDOW))))
    return n


def throughput(kind: str, seconds: float) -> float:
    """Messages per second of one run of ``kind`` (after a short warm-up on the same store)."""
    with tempfile.TemporaryDirectory() as d, shmq.Broker(d + "/store", BROKER, CONFIG):
        if kind == "send_async":
            with shmq.Producer("bench", broker=BROKER) as p:
                _send_async(p, 0.3)
                start = time.perf_counter()
                return _send_async(p, seconds) / (time.perf_counter() - start)
        fn = _tasks if kind == "tasks" else _gather

        async def run() -> float:
            async with shmq.aio.Producer("bench", broker=BROKER) as ap:
                await fn(ap, 0.3)
                start = time.perf_counter()
                return await fn(ap, seconds) / (time.perf_counter() - start)

        return asyncio.run(run())


def _p50_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def latencies(count: int) -> dict[str, float]:
    """p50 microseconds of one send at a time, per way of sending."""
    msg = Message("Bench", BODY)
    with tempfile.TemporaryDirectory() as d, shmq.Broker(d + "/store", BROKER, CONFIG):

        async def run() -> dict[str, float]:
            async with shmq.aio.Producer("bench", broker=BROKER) as ap:
                p = ap.sync

                def timed(fn: Callable[[], object]) -> float:
                    samples = []
                    for _ in range(count):
                        t = time.perf_counter()
                        fn()
                        samples.append(time.perf_counter() - t)
                    return _p50_us(samples)

                async def atimed(fn: Callable[[], Awaitable[object]]) -> float:
                    samples = []
                    for _ in range(count):
                        t = time.perf_counter()
                        await fn()
                        samples.append(time.perf_counter() - t)
                    return _p50_us(samples)

                await atimed(lambda: ap.send(msg))  # warm up
                return {
                    "send": timed(lambda: p.send(msg)),
                    "send_async().result()": timed(lambda: p.send_async(msg).result()),
                    "await wrap_future(send_async())": await atimed(lambda: asyncio.wrap_future(p.send_async(msg))),
                    "await aio.send": await atimed(lambda: ap.send(msg)),
                }

        return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-count", type=int, default=1000)
    args = ap.parse_args()
    print(f"throughput, {WINDOW} in flight, 100 B bodies, median of {args.rounds} runs")
    base = None
    for kind in ("send_async", "tasks", "gather"):
        rate = statistics.median(throughput(kind, args.seconds) for _ in range(args.rounds))
        base = base or rate
        print(f"  {kind:28} {rate:12,.0f} msgs/s  {rate / base:5.2f} x send_async", flush=True)
    print(f"latency of one send at a time, p50 (median of {args.rounds} runs of {args.latency_count})")
    runs = [latencies(args.latency_count) for _ in range(args.rounds)]
    for name in runs[0]:
        print(f"  {name:33} {statistics.median(r[name] for r in runs):8.0f} us", flush=True)


if __name__ == "__main__":
    main()
