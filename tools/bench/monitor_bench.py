"""Broker throughput with a monitor watching it vs without (issue 14: within 2 %).

One broker, one producer in this process sending 100-byte messages with ``send_async`` (256
in flight, auto-batched) for ``--seconds``; each round measures every mode in turn
(alternating, so drift of the machine hits all modes alike): ``off`` (nothing watching) and
one mode per ``--intervals`` value, with the observer process running at that interval.
Medians over ``--rounds``; the ratio is to ``off`` of the same run. Also the broker's CPU per
message and the observer's CPU share, which a loaded machine moves much less than the rate.

The observer is a command template (``--observer``; ``{python}``, ``{name}`` and ``{interval}``
are filled in) started before the mode's measurement and stopped after it. The default is
this file's ``--sample`` mode: what ``shmq top`` does per frame (a snapshot of the state
segment, psutil on the broker, rates and a full render) without a terminal. Any other
observer (an exporter with a scraper, several tops) is one ``--observer`` command away.

    .venv/bin/python tools/bench/monitor_bench.py [--seconds 3] [--rounds 3] [--intervals 1,0.2]
        [--observer '{python} -m shmq exporter --name {name} ...']
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
from tools.bench.windowed import send_async_for

SAMPLER = "{python} " + __file__ + " --sample --name {name} --interval {interval}"
CONFIG = {"mappedFileSizeCommitLog": 256 * 1024 * 1024}
BODY = b"x" * 100


def sample(name: str, interval: float) -> None:
    """The observer: ``shmq top``'s work per frame every ``interval`` seconds, until killed."""
    from rich.console import Console

    from shmq.monitor.attach import Attachment
    from shmq.monitor.render import render

    console = Console(file=io.StringIO(), width=160, height=50, color_system="truecolor", force_terminal=True)
    with Attachment(name) as attachment:
        while True:
            if attachment.sample():
                console.print(render(list(attachment.history.snapshots), 160, 50))
                console.file = io.StringIO()
            time.sleep(interval)


def produce(p, seconds: float) -> int:  # type: ignore[no-untyped-def]
    """Messages sent with ``send_async`` (256 in flight) in ``seconds``."""
    from shmq import Message

    return send_async_for(p, Message("Bench", BODY), seconds)


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def measure(
    p,
    broker: psutil.Process,
    name: str,
    seconds: float,  # type: ignore[no-untyped-def]
    observer: str | None,
    interval: float,
) -> tuple[float, float, float]:
    """(msgs/s, broker CPU us per message, observer CPU % of one core) of one run, with
    ``observer`` (a command template) running at ``interval`` if given. The CPU figures hold
    on a busy machine where the rate swings: the observer shares no lock with the broker, so
    its only cost to it is the CPU it takes."""
    proc = watched = None
    if observer:
        cmd = observer.format(python=shlex.quote(sys.executable), name=name, interval=interval)
        proc = subprocess.Popen(shlex.split(cmd), stdout=subprocess.DEVNULL)
        time.sleep(max(1.0, 2 * interval))  # attached and past its start-up before we measure
        if proc.poll() is not None:
            raise SystemExit(f"observer exited with status {proc.returncode}: {cmd}")
        watched = psutil.Process(proc.pid)
    try:
        broker_cpu, observer_cpu = _cpu(broker), _cpu(watched) if watched else 0.0
        start = time.perf_counter()
        n = produce(p, seconds)
        elapsed = time.perf_counter() - start
        used = (_cpu(watched) - observer_cpu) / elapsed * 100 if watched else 0.0
        return n / elapsed, (_cpu(broker) - broker_cpu) / n * 1e6, used
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--intervals", default="1,0.2", help="observer intervals to compare with off (seconds)")
    ap.add_argument("--observer", default=SAMPLER, help="command template: {python} {name} {interval}")
    ap.add_argument("--sample", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--name", default="monitor_bench")
    ap.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sample:
        sample(args.name, args.interval)
        return

    import shmq
    from shmq import Producer

    modes: list[tuple[str, float]] = [("off", 0.0)] + [(f"{i} s", float(i)) for i in args.intervals.split(",")]
    runs: dict[str, list[tuple[float, float, float]]] = {m: [] for m, _ in modes}
    with tempfile.TemporaryDirectory() as d, shmq.Broker(d + "/store", args.name, CONFIG) as b:
        broker = psutil.Process(b.pid)
        with Producer("bench", broker=args.name) as p:
            produce(p, 0.5)  # warm up: attach, topic creation, first segment
            for _ in range(args.rounds):
                for mode, interval in modes:
                    runs[mode].append(
                        measure(p, broker, args.name, args.seconds, args.observer if interval else None, interval)
                    )
    base = statistics.median(r[0] for r in runs["off"])
    print(
        f"{'observer':10} {'msgs/s (median)':>16} {'vs off':>7} {'broker CPU us/msg':>18} {'observer CPU %':>15}  rates"
    )
    result = {}
    for mode, _ in modes:
        rate, cpu, used = (statistics.median(r[k] for r in runs[mode]) for k in range(3))
        result[mode] = {
            "median": round(rate),
            "ratio": round(rate / base, 4),
            "broker_cpu_us": round(cpu, 2),
            "observer_cpu_pct": round(used, 2),
            "runs": [round(r[0]) for r in runs[mode]],
        }
        print(
            f"{mode:10} {rate:16,.0f} {rate / base:7.3f} {cpu:18.2f} {used:15.2f}  "
            f"{', '.join(f'{r[0]:,.0f}' for r in runs[mode])}"
        )
    print(json.dumps({"bench": "monitor", "observer": args.observer, "seconds": args.seconds, **result}))


if __name__ == "__main__":
    main()
