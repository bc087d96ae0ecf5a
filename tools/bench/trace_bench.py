"""Cost of send hooks and of ``trace=True`` on the per-message send rate (issue 13, part 7).

One producer in this process against a broker process, 100-byte bodies. Modes: ``off`` (no
hook: the normal path), ``hook`` (one no-op send hook: the cost of the hook machinery),
``trace`` (trace=True: a Pub record per message through the async dispatcher and its own
producer). Each mode is run for sync sends (``send``, one round trip per message) and async
sends (``send_async`` with 256 futures in flight, auto-batched), ``--rounds`` times on a
fresh store; medians reported, with this process's CPU per message (all its threads, until
the run's trace records are stored: less moved by other load than the rate), and the trace
records dropped (buffer full) and stored.

    .venv/bin/python tools/bench/trace_bench.py [--seconds S] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import shmq
from shmq import Message, Producer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
from tools.bench.windowed import send_async_for

BODY = b"x" * 100
CONFIG = {"mappedFileSizeCommitLog": 256 * 1024 * 1024}


class NoopHook:
    def send_message_before(self, ctx) -> None:
        pass

    def send_message_after(self, ctx) -> None:
        pass


def _sync(p: Producer, seconds: float) -> int:
    msg = Message("Bench", BODY)
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        p.send(msg)
        n += 1
    return n


def _async(p: Producer, seconds: float) -> int:
    return send_async_for(p, Message("Bench", BODY), seconds)


def run(mode: str, kind: str, seconds: float) -> tuple[float, float, int, int]:
    """(msgs/s, this process's CPU us per message until its trace records are stored, dropped, stored)."""
    with tempfile.TemporaryDirectory() as d, shmq.Broker(d + "/store", "trace_bench", CONFIG):
        p = Producer("bench", broker="trace_bench", trace=mode == "trace").start()
        if mode == "hook":
            p.register_send_hook(NoopHook())
        try:
            (_sync if kind == "sync" else _async)(p, 0.3)  # warm up: attach, first segment, topic creation
            tracer = p.tracer
            if tracer is not None:
                tracer.flush(30)
                tracer.dropped = tracer.sent = 0
            cpu, start = time.process_time(), time.perf_counter()
            n = (_sync if kind == "sync" else _async)(p, seconds)
            rate = n / (time.perf_counter() - start)
            if tracer is not None:
                tracer.flush(30)
            cpu_us = (time.process_time() - cpu) / n * 1e6
            return rate, cpu_us, tracer.dropped if tracer else 0, tracer.sent if tracer else 0
        finally:
            p.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kinds", default="sync,async")
    ap.add_argument("--modes", default="off,hook,trace")
    args = ap.parse_args()
    print(
        f"{'kind':6} {'mode':6} {'msgs/s (median)':>16} {'vs off':>7} {'CPU us/msg':>10} {'dropped':>9} {'stored':>9}"
    )
    for kind in args.kinds.split(","):
        base = None
        for mode in args.modes.split(","):
            runs = [run(mode, kind, args.seconds) for _ in range(args.rounds)]
            rate, cpu, dropped, stored = (statistics.median(r[k] for r in runs) for k in range(4))
            base = base or rate
            print(
                f"{kind:6} {mode:6} {rate:16,.0f} {rate / base:7.2f} {cpu:10.1f} {dropped:9,.0f} {stored:9,.0f}",
                flush=True,
            )
        time.sleep(0.1)


if __name__ == "__main__":
    main()
