"""Wake-up latencies of a parked broker: what a lost doorbell post would cost, measured.

A broker with nothing to do parks on its doorbell with a 20 ms timeout. Every path that gives
it work must post the bell, or the work waits for the timeout: the functional tests check that
the work is done; this benchmark checks that it is done at once, which only an idle machine
can tell apart from a 20 ms timeout (so the bounds live here, not in the test suite).

- ``control``: an admin call (control queue + bell) to a parked broker, median of 15 (goal < 8 ms).
- ``after-flood``: 10 M posts on the broker's bell make it move to a new bell; then sync sends
  of a producer attached before the move and of one attached after (median of 15 each, goal
  < 5 ms) and a push consumer's delivery delay (median of 10, goal < 10 ms).

    .venv/bin/python tools/bench/wakeup_bench.py [--rounds 3]

Prints one line per figure (median over rounds) and exits 1 if a goal is missed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import posix_ipc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import shmq
from shmq import ConsumeFrom, ConsumeResult, Message, Producer, PushConsumer, SendStatus
from shmq.ring.channel import broker_bell_name

GOALS_MS = {"control": 8.0, "sync send, early producer": 5.0, "sync send, late producer": 5.0, "push delivery": 10.0}
PAUSE_S = 0.03  # longer than the broker's spin: each request finds it parked


def control_ms(broker: str, n: int = 15) -> float:
    """Median admin call to a parked broker."""
    admin = shmq.Admin(broker=broker)
    admin.topics()
    took = []
    for _ in range(n):
        time.sleep(PAUSE_S)
        t = time.perf_counter()
        admin.topics()
        took.append((time.perf_counter() - t) * 1000)
    return statistics.median(took)


def sync_send_ms(producer: Producer, n: int = 15) -> float:
    """Median sync send to a parked broker."""
    took = []
    for i in range(n):
        time.sleep(PAUSE_S)
        t = time.perf_counter()
        assert producer.send(Message("T", b"s%d" % i)).status is SendStatus.SEND_OK
        took.append((time.perf_counter() - t) * 1000)
    return statistics.median(took)


def flood(bell: str, posts: int = 10_000_000) -> None:
    """Post the named bell ``posts`` times as fast as Python can (a hostile local client)."""
    sem = posix_ipc.Semaphore(bell)
    try:
        release = sem.release
        for _ in range(posts):
            release()
    finally:
        sem.close()


def one_round(store: str, name: str) -> dict[str, float]:
    got: list[float] = []

    def listener(msgs: list[shmq.MessageExt], _ctx: object) -> ConsumeResult:
        got.extend(time.perf_counter() for _ in msgs)
        return ConsumeResult.SUCCESS

    out = {}
    push = PushConsumer("cg", broker=name, consume_from=ConsumeFrom.LAST_OFFSET)
    push.subscribe("T", "*")
    push.register_listener(listener)
    with shmq.Broker(store, name), Producer("pg", broker=name) as early:
        out["control"] = control_ms(name)
        early.send(Message("T", b"topic"))
        with push:
            flood(broker_bell_name(name))
            time.sleep(0.3)
            with Producer("pg2", broker=name) as late:
                out["sync send, early producer"] = sync_send_ms(early)
                out["sync send, late producer"] = sync_send_ms(late)
                delays = []
                for i in range(10):
                    time.sleep(PAUSE_S)
                    n, t = len(got), time.perf_counter()
                    late.send(Message("T", b"p%d" % i))
                    deadline = time.monotonic() + 10
                    while len(got) <= n and time.monotonic() < deadline:
                        time.sleep(0.0005)
                    delays.append((got[n] - t) * 1000 if len(got) > n else 10_000.0)
                out["push delivery"] = statistics.median(delays)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rounds = []
    for r in range(args.rounds):
        work = tempfile.mkdtemp(prefix="shmq-wakeup-")
        try:
            rounds.append(one_round(os.path.join(work, "store"), f"wake{os.getpid()}x{r}"))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    missed = 0
    for key, goal in GOALS_MS.items():
        value = statistics.median(r[key] for r in rounds)
        ok = value < goal
        missed += not ok
        print(f"{key:28s} {value:7.2f} ms  (goal < {goal:g} ms) {'ok' if ok else 'MISSED'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
