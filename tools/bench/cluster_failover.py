"""Cluster failover: how long a broker's SIGKILL stalls a producer's sync sends, and what
``namesrv=`` costs over ``broker=`` on a one-broker cluster.

Failover: a cluster of ``--brokers`` brokers and one ``Producer(namesrv=)`` sending sync, one
message at a time, from one thread. Each round SIGKILLs one broker (in turn), keeps sending
for ``--after`` seconds, then restarts it and waits until the producer has it again. A
round's figure is the longest stall the kill caused: over the sends answered after the kill,
the most time from the later of (the send's start, the kill) to its answer, which is the
time from the SIGKILL to the first answer by another broker of the send that was on the dead
broker (a send that goes to a live broker anyway is answered sooner). Sends that failed are
counted (goal: none while another broker is up). Prints p50 and max over ``--kills`` rounds.

Cost: sync ``send`` and auto-batched ``send_async`` of 100 B messages for ``--seconds``
through ``broker=`` and through ``namesrv=`` on one broker registered with a name server,
alternating, medians of ``--reps``; the ratio (cost per message, namesrv= over broker=) has
the goal <= 1.05.

    .venv/bin/python tools/bench/cluster_failover.py [--kills 20] [--brokers 2] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import shmq
from shmq import Message, Producer

SMALL = {"mappedFileSizeCommitLog": 64 * 1024 * 1024, "mappedFileSizeConsumeQueue": 80 * 4096, "haListenPort": 0}


class Sender(threading.Thread):
    """Sync sends one at a time; each as (start, end, broker name or None if it failed)."""

    def __init__(self, p: Producer, topic: str) -> None:
        super().__init__(daemon=True)
        self.p, self.topic = p, topic
        self.sends: list[tuple[float, float, str | None]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            start = time.monotonic()
            try:
                r = self.p.send(Message(self.topic, b"%d" % n))
                self.sends.append((start, time.monotonic(), r.queue.broker_name))
            except shmq.ShmqError as e:
                self.sends.append((start, time.monotonic(), None))
                self.errors.append(str(e))
            n += 1


def stall(sends: list[tuple[float, float, str | None]], killed_at: float) -> float:
    """The longest time a send answered after ``killed_at`` waited since max(its start, the kill)."""
    return max((end - max(start, killed_at) for start, end, _ in sends if end > killed_at), default=float("nan"))


def restart(cluster: Any, i: int, namesrv: str) -> None:
    old = cluster.brokers[i]
    cluster.brokers[i] = shmq.Broker(old.store_dir, old.name, {**SMALL, "namesrvAddr": namesrv})
    cluster.wait_registered()


def failover(kills: int, brokers: int, after: float) -> dict[str, Any]:
    namesrv = f"fo{os.getpid()}"
    root = tempfile.mkdtemp(prefix="shmq-failover-")
    stalls: list[float] = []
    failed = 0
    try:
        with (
            shmq.Cluster(root, brokers=brokers, namesrv=namesrv, config=SMALL) as c,
            Producer("failover", namesrv=namesrv) as p,
        ):
            for k in range(kills):
                s = Sender(p, "Failover")
                s.start()
                time.sleep(0.2)
                victim = k % brokers
                killed_at = time.monotonic()
                c.brokers[victim].kill()
                time.sleep(after)
                s.stop.set()
                s.join()
                stalls.append(stall(s.sends, killed_at))
                failed += len(s.errors)
                for e in s.errors[:3]:
                    print("  failed:", e)
                restart(c, victim, namesrv)
                time.sleep(0.1)  # the producer sees it in the routes within RouteReader's CHECK_S
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ms = sorted(x * 1000 for x in stalls)
    return {"kills": kills, "p50_ms": statistics.median(ms), "max_ms": ms[-1], "failed_sends": failed}


def send_rate(p: Producer, seconds: float) -> float:
    """Sync sends per second, one at a time."""
    n = 0
    start = time.perf_counter()
    body = b"x" * 100
    while time.perf_counter() < start + seconds:
        for _ in range(100):
            p.send(Message("Cost", body))
        n += 100
    return n / (time.perf_counter() - start)


def async_rate(p: Producer, seconds: float) -> float:
    """Auto-batched ``send_async`` per second, all answered (a flush every 10,000)."""
    n = 0
    start = time.perf_counter()
    body = b"x" * 100
    while time.perf_counter() < start + seconds:
        for _ in range(10_000):
            p.send_async(Message("Cost", body))
        assert p.flush(60)
        n += 10_000
    return n / (time.perf_counter() - start)


def cost(reps: int, seconds: float) -> dict[str, Any]:
    namesrv = f"co{os.getpid()}"
    root = tempfile.mkdtemp(prefix="shmq-cost-")
    rates: dict[str, list[float]] = {"sync broker": [], "sync namesrv": [], "async broker": [], "async namesrv": []}
    try:
        with (
            shmq.Cluster(root, brokers=1, namesrv=namesrv, config=SMALL) as c,
            Producer("cost", broker=c.broker_names[0]) as pb,
            Producer("cost", namesrv=namesrv) as pn,
        ):
            send_rate(pb, 0.5)
            send_rate(pn, 0.5)
            for _ in range(reps):
                for kind, rate in (("sync", send_rate), ("async", async_rate)):
                    rates[f"{kind} broker"].append(rate(pb, seconds))
                    rates[f"{kind} namesrv"].append(rate(pn, seconds))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    out: dict[str, Any] = {f"{k} msgs/s": round(v) for k, v in med.items()}
    for kind in ("sync", "async"):  # cost per message, namesrv= over broker=
        out[f"{kind} cost ratio"] = round(med[f"{kind} broker"] / med[f"{kind} namesrv"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--brokers", type=int, default=2)
    ap.add_argument("--after", type=float, default=0.3, help="seconds of sends after each kill")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--skip-cost", action="store_true")
    a = ap.parse_args()
    print("failover:", failover(a.kills, a.brokers, a.after), flush=True)
    if not a.skip_cost:
        print("cost:", cost(a.reps, a.seconds), flush=True)


if __name__ == "__main__":
    main()
