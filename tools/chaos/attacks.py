"""Fault injection against a live broker with a steady producer and consumer beside it.

    .venv/bin/python tools/chaos/attacks.py [--seconds 3] [--rate 500] [--only NAME ...]
                                            [--disk-mib 64] [--json FILE]

Starts a broker as a user would (``shmq.Broker``), a producer process sending numbered
messages with sync ``send`` at ``--rate`` per second and a clustering PushConsumer process, then
runs each attack of tools/chaos/hostile.py in a process of its own, one after the other, with
a quiet window before the first. With ``--disk-mib`` (root) the store sits on a tmpfs of that
size and a last attack fills that disk and frees it again.

Reported per window: whether the broker was still alive (a dead broker is counted as a crash
and restarted so the run goes on), the steady producer's send latency p50/p99/max and its
failed sends, the broker's CPU during the attack and in the second after it, and what the
attack itself saw. At the end: messages acknowledged vs read by the consumer (goal: equal),
and crashes (goal: 0). Exit status 1 when either goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import shmq
from tools.chaos.hostile import ATTACKS
from tools.chaos.steady import TOPIC

HERE = os.path.dirname(os.path.abspath(__file__))


class Run:
    """The broker, the steady clients and the windows of one attack run."""

    def __init__(self, work: str, name: str, config: dict[str, Any]) -> None:
        self.work, self.name, self.config = work, name, config
        self.store = os.path.join(work, "store")
        self.broker = self._start_broker()
        shmq.Admin(broker=name).create_topic(TOPIC, queues=4)
        self.out_p, self.out_c = os.path.join(work, "produced.json"), os.path.join(work, "consumed.json")
        self.consumer = self._spawn("consume", self.out_c)
        self.producer = self._spawn("produce", self.out_p)
        self.crashes: list[str] = []

    def _start_broker(self) -> shmq.Broker:
        return shmq.Broker(self.store, name=self.name, config=self.config)

    def _spawn(self, role: str, out: str) -> subprocess.Popen[bytes]:
        args = [sys.executable, os.path.join(HERE, "steady.py"), role, self.name, out]
        if role == "produce":
            args.append(str(self.rate))
        return subprocess.Popen(args, stderr=open(out + ".log", "w"))

    rate = 500.0

    def broker_alive(self, window: str) -> bool:
        """True if the broker lives; otherwise count a crash, keep its log tail, start it again."""
        if self.broker.process.poll() is None:
            return True
        tail = " / ".join(self.broker.log().strip().splitlines()[-5:])
        self.crashes.append(f"{window}: exit {self.broker.process.returncode}: {tail[-400:]}")
        self.broker = self._start_broker()
        return False

    def attack(self, what: str, seconds: float) -> dict[str, Any]:
        proc = psutil.Process(self.broker.pid)
        cpu0 = _cpu(proc)
        t0 = time.monotonic()
        if what == "baseline":
            time.sleep(seconds)
            seen: dict[str, Any] = {}
        else:
            r = subprocess.run(
                [sys.executable, os.path.join(HERE, "hostile.py"), what, self.name, self.store, str(seconds)],
                capture_output=True,
                text=True,
                timeout=seconds * 10 + 60,
            )
            lines = r.stdout.strip().splitlines()
            seen = json.loads(lines[-1]) if lines else {"attack output": r.stderr.strip()[-300:]}
        t1 = time.monotonic()
        cpu1 = _cpu(proc)
        time.sleep(1.0)
        cpu2 = _cpu(proc)
        alive = self.broker_alive(what)
        return {
            "attack": what,
            "t0": t0,
            "t1": t1,
            "alive": alive,
            "seen": seen,
            "cpu_during": None if cpu1 is None or cpu0 is None else (cpu1 - cpu0) / (t1 - t0) * 100,
            "cpu_after": None if cpu2 is None or cpu1 is None else (cpu2 - cpu1) * 100,
        }

    def finish(self, drain_s: float = 30.0) -> tuple[dict[str, Any], dict[str, Any]]:
        """Stop the producer, let the consumer read everything acknowledged, stop it, load both reports."""
        self.producer.terminate()
        self.producer.wait(60)
        produced = _load(self.out_p)
        acked = sum(1 for s in produced["sends"] if s[2] >= 0)
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline:
            try:
                if _load(self.out_c + ".count")["read"] >= acked:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        self.consumer.terminate()
        self.consumer.wait(60)
        return produced, _load(self.out_c)

    def close(self) -> None:
        for p in (self.producer, self.consumer):
            if p.poll() is None:
                p.kill()
                p.wait()
        self.broker.stop()


def _cpu(proc: psutil.Process) -> float | None:
    try:
        t = proc.cpu_times()
        return t.user + t.system
    except psutil.Error:
        return None


def _load(path: str) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def window_stats(sends: list[list[float]], t0: float, t1: float) -> dict[str, Any]:
    """Latency percentiles (us) and failures of the steady sends started in [t0, t1)."""
    rows = [s for s in sends if t0 <= s[0] < t1]
    lat = np.array([s[1] for s in rows if s[2] >= 0])
    return {
        "sends": len(rows),
        "failed": sum(1 for s in rows if s[2] < 0),
        "p50_us": float(np.percentile(lat, 50)) if len(lat) else None,
        "p99_us": float(np.percentile(lat, 99)) if len(lat) else None,
        "max_us": float(lat.max()) if len(lat) else None,
    }


def _fmt(v: float | None, unit: str = "") -> str:
    return (
        "-"
        if v is None
        else (
            f"{v / 1000:.1f} ms" if unit == "us" and v >= 1000 else f"{v:.0f} us" if unit == "us" else f"{v:.0f}{unit}"
        )
    )


def report(
    windows: list[dict[str, Any]], produced: dict[str, Any], consumed: dict[str, Any], crashes: list[str]
) -> dict[str, Any]:
    print(
        f"{'window':<15} {'broker':<7} {'sends':>6} {'failed':>6} {'p50':>9} {'p99':>9} {'max':>9} "
        f"{'cpu':>5} {'after':>5}  what the attack saw"
    )
    for w in windows:
        st = w["stats"] = window_stats(produced["sends"], w["t0"], w["t1"])
        print(
            f"{w['attack']:<15} {'alive' if w['alive'] else 'DIED':<7} {st['sends']:>6} {st['failed']:>6} "
            f"{_fmt(st['p50_us'], 'us'):>9} {_fmt(st['p99_us'], 'us'):>9} {_fmt(st['max_us'], 'us'):>9} "
            f"{_fmt(w['cpu_during'], '%'):>5} {_fmt(w['cpu_after'], '%'):>5}  {json.dumps(w['seen'])[:150]}"
        )
    acked = {s[2] for s in produced["sends"] if s[2] >= 0}
    read = set(consumed["read"])
    missing = sorted(acked - read)
    summary = {
        "acknowledged": len(acked),
        "read": len(read & acked),
        "missing": len(missing),
        "first_missing": missing[:20],
        "crashes": len(crashes),
        "crash_logs": crashes,
        "producer_errors": produced["errors"],
    }
    print(
        f"\nacknowledged {len(acked)}, read {len(read & acked)}, missing {len(missing)}"
        f"{' ' + str(missing[:20]) if missing else ''}; broker crashes {len(crashes)}"
    )
    for c in crashes:
        print("  crash:", c)
    if produced["errors"]:
        print("steady producer errors:", json.dumps(produced["errors"])[:500])
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each attack window")
    ap.add_argument("--rate", type=float, default=500.0, help="steady sync sends per second")
    ap.add_argument("--only", nargs="*", choices=sorted(ATTACKS), help="attacks to run (default: all)")
    ap.add_argument("--disk-mib", type=int, default=0, help="put the store on a tmpfs of this size and fill it (root)")
    ap.add_argument("--json", help="write the full result here")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="shmq-attacks.")
    mounted = False
    config: dict[str, Any] = {}
    attacks = list(a.only or ATTACKS)
    if a.disk_mib:
        os.makedirs(os.path.join(work, "store"))
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={a.disk_mib}m", "tmpfs", os.path.join(work, "store")], check=True
        )
        mounted = True
        config = {"mapped_file_size_commit_log": 4 << 20, "mapped_file_size_consume_queue": 20 * 6000}
        attacks.append("disk-fill")
    Run.rate = a.rate
    run = None
    try:
        run = Run(work, f"chaos{os.getpid()}", config)
        time.sleep(1.0)  # the consumer joins its group, the producer warms up
        windows = [run.attack("baseline", a.seconds)]
        for what in attacks:
            windows.append(run.attack(what, a.seconds))
            print(f"[attacks] {what}: broker {'alive' if windows[-1]['alive'] else 'DIED'}", flush=True)
        time.sleep(1.0)
        produced, consumed = run.finish()
        summary = report(windows, produced, consumed, run.crashes)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"windows": windows, "summary": summary, "seconds": a.seconds, "rate": a.rate}, f, indent=1)
        return 0 if summary["crashes"] == 0 and summary["missing"] == 0 else 1
    finally:
        if run is not None:
            run.close()
        if mounted:
            subprocess.run(["umount", "-l", os.path.join(work, "store")], check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
