"""Broker benchmark: one producer process -> broker process, 100-byte bodies.

Scenarios: batch API (send_batch of 256 Message objects; send_batch_async of a MessageBatch of
2,048 bodies with 4 in flight), send_oneway (auto-batched), send_async with a window of 256
Futures in flight (auto-batched; reports producer CPU per message too) to one topic and round
robin over 125 topics of 4 queues, sync send round trip (p50/p99), and 8 sync-sender
processes against a SYNC_FLUSH broker (group commit). Each runs ``--rounds`` times on a
fresh store and the median is reported (the dev machines are shared and noisy).
Next to msgs/s it reports structural figures that noise moves much less: broker CPU us and
voluntary context switches (sleeps) per message, and from the broker's shutdown log the
requests served per busy pass and the parks per request.

    .venv/bin/python tools/bench/broker_bench.py [--seconds S] [--rounds N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import statistics
import tempfile
import time
from collections import deque

import psutil

import shmq
from shmq import Message, MessageBatch, Producer

BODY = b"x" * 100
# set explicitly, so the figures do not move with the defaults: whole segments warmed ahead
CONFIG = {"mappedFileSizeCommitLog": 256 * 1024 * 1024, "warmAheadSize": 256 * 1024 * 1024}


def _batch(p: Producer, seconds: float) -> float:
    """send_batch of 256 Message objects, waiting for each answer."""
    msgs = [Message("Bench", BODY) for _ in range(256)]
    n, end = 0, time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        p.send_batch(msgs)
        n += len(msgs)
    return n / (time.perf_counter() - start)


def _columns(p: Producer, seconds: float) -> float:
    """send_batch_async of a MessageBatch of 2,048 bodies, 4 batches in flight."""
    batch = MessageBatch("Bench", [BODY] * 2048)
    in_flight: deque = deque()
    n, end = 0, time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        in_flight.append(p.send_batch_async(batch))
        if len(in_flight) >= 4:
            in_flight.popleft().result()
        n += len(batch)
    for f in in_flight:
        f.result()
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


def _async_window(p: Producer, seconds: float, topics: int = 1) -> tuple[float, float]:
    """send_async keeping 256 Futures in flight, the usual way to pipeline per-message sends,
    round robin over ``topics`` topics; (msgs/s, producer CPU us per message: this thread,
    the reader and the batching thread)."""
    msgs = [Message("Bench" if topics == 1 else f"Bench{t}", BODY) for t in range(topics)]
    for m in msgs[1:]:  # every queue exists before the clock starts
        for q in range(4):
            p.send(m, selector=lambda qs, msg, arg: qs[arg], arg=q)
    window: deque = deque()
    n, end = 0, time.perf_counter() + seconds
    start, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() < end:
        for i in range(256):
            window.append(p.send_async(msgs[i % topics]))
            if len(window) >= 256:
                window.popleft().result()
        n += 256
    for f in window:
        f.result()
    return n / (time.perf_counter() - start), (time.process_time() - cpu) * 1e6 / n


def _sync(p: Producer, seconds: float) -> tuple[float, float, int]:
    msg = Message("Bench", BODY)
    lat = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        p.send(msg)
        lat.append(time.perf_counter() - t)
    lat.sort()
    return lat[len(lat) // 2] * 1e6, lat[int(len(lat) * 0.99)] * 1e6, len(lat)


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


class _BrokerMeter:
    """CPU time and context switches the broker process spends per message (structural, less noisy than msgs/s)."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self._start()

    def _start(self) -> None:
        self.cpu, self.ctx = self.proc.cpu_times(), self.proc.num_ctx_switches()

    def per_msg(self, msgs: float) -> tuple[float, float]:
        """(broker CPU us/msg, broker voluntary context switches (sleeps) /msg) since the last call."""
        cpu, ctx = self.proc.cpu_times(), self.proc.num_ctx_switches()
        us = ((cpu.user - self.cpu.user) + (cpu.system - self.cpu.system)) * 1e6 / max(msgs, 1)
        sleeps = (ctx.voluntary - self.ctx.voluntary) / max(msgs, 1)
        self._start()
        return us, sleeps


def run_round(seconds: float) -> dict[str, float]:
    out = {}
    name = f"bench{os.getpid()}"
    with tempfile.TemporaryDirectory() as d, shmq.Broker(d, name, CONFIG) as broker:
        meter = _BrokerMeter(broker.pid)
        with Producer("bench", broker=name) as p:
            p.send(Message("Bench", BODY))
            meter.per_msg(1)
            out["batch msgs/s"] = _batch(p, seconds)
            out["batch broker us/msg"], out["batch broker sleeps/msg"] = meter.per_msg(out["batch msgs/s"] * seconds)
            out["MessageBatch async msgs/s"] = _columns(p, seconds)
            out["MessageBatch broker us/msg"], _ = meter.per_msg(out["MessageBatch async msgs/s"] * seconds)
            out["oneway msgs/s"] = _oneway(p, seconds)
            out["oneway broker us/msg"], out["oneway broker sleeps/msg"] = meter.per_msg(out["oneway msgs/s"] * seconds)
            out["async window msgs/s"], out["async window producer us/msg"] = _async_window(p, seconds)
            out["async window broker us/msg"], _ = meter.per_msg(out["async window msgs/s"] * seconds)
            out["125 topics msgs/s"], out["125 topics producer us/msg"] = _async_window(p, seconds, 125)
            out["125 topics broker us/msg"], _ = meter.per_msg(out["125 topics msgs/s"] * seconds)
            out["sync p50 us"], out["sync p99 us"], n = _sync(p, seconds)
            out["sync broker us/msg"], out["sync broker sleeps/msg"] = meter.per_msg(n)
        broker.stop()
        loop = _loop_stats(broker.log())
    if loop:
        out["requests/busy pass (all)"] = loop["frames"] / max(loop["busy_passes"], 1)
        out["broker parks/request (all)"] = loop["parks"] / max(loop["frames"], 1)
        out["client posts/request (all)"] = loop["posts"] / max(loop["frames"], 1)
    with tempfile.TemporaryDirectory() as d, shmq.Broker(d, name, dict(CONFIG, flushDiskType="SYNC_FLUSH")) as broker:
        meter = _BrokerMeter(broker.pid)
        out["SYNC_FLUSH 8 senders msgs/s"] = _sync_flush_8(name, seconds)
        out["SYNC_FLUSH broker us/msg"], _ = meter.per_msg(out["SYNC_FLUSH 8 senders msgs/s"] * seconds)
    return out


def _loop_stats(log_text: str) -> dict[str, int] | None:
    """The serving-loop counters the broker logs when it stops."""
    m = re.search(
        r"loop: (\d+) frames in (\d+) busy passes, (\d+) parks \((\d+) timed out\), (\d+) spins "
        r"that found work, (\d+) client doorbell posts",
        log_text,
    )
    if m is None:
        return None
    return dict(zip(("frames", "busy_passes", "parks", "park_timeouts", "spin_hits", "posts"), map(int, m.groups())))


def _fmt(v: float) -> str:
    return f"{v:>12,.1f}" if abs(v) >= 10 or v == 0 else f"{v:>12.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rounds = [run_round(args.seconds) for _ in range(args.rounds)]
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        runs = ", ".join(_fmt(v).strip() for v in values)
        print(f"{key:>30}: median {_fmt(statistics.median(values))}   (runs: {runs})")


if __name__ == "__main__":
    main()
