#!/usr/bin/env python
"""Where the CPU of a SYNC_FLUSH send and of a send -> push listener hop goes, per thread.

    .venv/bin/python tools/bench/path_breakdown.py [--senders 8] [--count 2000] [--push 2000]

Run it from the tree to measure (it imports shmq from the working directory).

Per-thread CPU clocks, no sampling: every thread's user + system time is read from
/proc/PID/task/TID/stat before and after the timed part, for the broker and for every client
process, and divided by the messages of the run.

- ``durable``: a SYNC_FLUSH broker, ``--senders`` processes doing ``Producer.send`` of 100 B
  ``--count`` times each. Per send: each thread's CPU (senders summed by thread name), wall
  time per send of one sender, and the broker's group-commit counters (sends per flush).
- ``push``: an ASYNC_FLUSH broker, one process sending 100 B with ``Producer.send`` at
  1,000 msgs/s, one ``PushConsumer`` process whose listener records each message's age. Per
  message: each thread's CPU; p50 / p99 of the age.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict

sys.path.insert(0, os.getcwd())  # the tree to measure: run it from there

TICK = os.sysconf("SC_CLK_TCK")


def thread_times(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of ``pid``, summed by thread name: the Python thread's name in
    this process (a client), else "main" for the first thread and "thread" for the others (the
    broker: its loop is the main thread; Python does not name the kernel's threads)."""
    names = {t.native_id: t.name for t in threading.enumerate()} if pid == os.getpid() else {}
    out: dict[str, float] = defaultdict(float)
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        name = names.get(int(tid)) or ("main" if int(tid) == pid else "thread")
        out[_family(name)] += (int(fields[11]) + int(fields[12])) / TICK
    return dict(out)


def _family(name: str) -> str:
    """A thread name without its numbers (one line per kind of thread over all processes)."""
    return re.sub(r"\d+", "N", name)


def _diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def _sender(broker: str, topic: str, count: int, start: mp.Event, q: mp.Queue) -> None:  # type: ignore[valid-type]
    import shmq

    if os.environ.get("BD_POLL_US"):
        import shmq.client.producer.producer as pm

        pm.SYNC_POLL_S = float(os.environ["BD_POLL_US"]) * 1e-6
    p = shmq.Producer(f"bd-{os.getpid()}", broker=broker)
    p.start()
    msg = shmq.Message(topic, b"x" * 100)
    for _ in range(20):
        p.send(msg)
    start.wait()
    before = thread_times(os.getpid())
    t0 = time.perf_counter()
    for _ in range(count):
        p.send(msg)
    wall = time.perf_counter() - t0
    after = thread_times(os.getpid())
    p.shutdown()
    q.put((wall, _diff(after, before)))


def durable(senders: int, count: int) -> None:
    import shmq

    store = tempfile.mkdtemp(prefix="bd-sync.")
    name = f"bd{os.getpid()}s"
    broker = shmq.Broker(store, name=name, config={"flush_disk_type": "SYNC_FLUSH", "default_topic_queue_nums": 8})
    try:
        with shmq.Producer("bd-admin", broker=name) as p:
            p.send(shmq.Message("BD", b"w"))
        time.sleep(1.0)
        ctx = mp.get_context("fork")
        start, q = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_sender, args=(name, "BD", count, start, q)) for _ in range(senders)]
        for pr in procs:
            pr.start()
        time.sleep(2.0)
        b0 = thread_times(broker.pid)
        t0 = time.perf_counter()
        start.set()
        results = [q.get(timeout=600) for _ in procs]
        wall = time.perf_counter() - t0
        b1 = thread_times(broker.pid)
        for pr in procs:
            pr.join()
    finally:
        broker.stop()
        log = broker.log()
        shutil.rmtree(store, ignore_errors=True)
    n = senders * count
    print(f"durable: {senders} senders x {count} sends: {n / wall:,.0f} sends/s, wall {wall:.2f} s")
    per_sender_wall = statistics.median(r[0] for r in results) / count * 1e6
    print(f"  one sender's wall per send: {per_sender_wall:.0f} us")
    sender: dict[str, float] = defaultdict(float)
    for _, d in results:
        for k, v in d.items():
            sender[k] += v
    _print("  sender threads (all senders), us CPU per send:", sender, n)
    _print("  broker threads, us CPU per send:", _diff(b1, b0), n)
    for line in log.splitlines():
        if "group commit" in line or "loop:" in line:
            print("  broker log:", line.split("INFO ", 1)[-1])


def _print(title: str, d: dict[str, float], n: int) -> None:
    print(title, f"total {sum(d.values()) / n * 1e6:.1f}")
    for k, v in sorted(d.items(), key=lambda kv: -kv[1]):
        print(f"    {k:<28} {v / n * 1e6:8.1f}")


def _push_sender(broker: str, topic: str, count: int, start: mp.Event, q: mp.Queue) -> None:  # type: ignore[valid-type]
    import shmq

    p = shmq.Producer(f"bdp-{os.getpid()}", broker=broker)
    p.start()
    start.wait()
    before = thread_times(os.getpid())
    t0 = time.perf_counter()
    for i in range(count):
        left = t0 + i / 1000 - time.perf_counter()
        if left > 0:
            time.sleep(left)
        p.send(shmq.Message(topic, time.monotonic_ns().to_bytes(8, "little") + b"x" * 92))
    after = thread_times(os.getpid())
    p.shutdown()
    q.put(_diff(after, before))


def _push_listener(broker: str, topic: str, count: int, ready: mp.Event, start: mp.Event, q: mp.Queue) -> None:  # type: ignore[valid-type]
    import shmq

    lat: list[int] = []
    done = threading.Event()

    def listener(msgs: list, _ctx: object) -> shmq.ConsumeResult:
        now = time.monotonic_ns()
        lat.extend(now - int.from_bytes(m.body[:8], "little") for m in msgs if len(m.body) == 100)
        if len(lat) >= count:
            done.set()
        return shmq.ConsumeResult.SUCCESS

    c = shmq.PushConsumer(f"bdc-{os.getpid()}", broker=broker)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    time.sleep(1.0)
    ready.set()
    start.wait()
    before = thread_times(os.getpid())
    done.wait(count / 1000 + 30)
    after = thread_times(os.getpid())
    c.shutdown()
    lat.sort()
    q.put((_diff(after, before), lat[len(lat) // 2] / 1000, lat[int(len(lat) * 0.99)] / 1000, len(lat)))


def push(count: int) -> None:
    import shmq

    store = tempfile.mkdtemp(prefix="bd-push.")
    name = f"bd{os.getpid()}p"
    broker = shmq.Broker(store, name=name, config={"default_topic_queue_nums": 8})
    try:
        with shmq.Producer("bd-admin", broker=name) as p:
            for qid in range(8):
                p.send(shmq.Message("BP", b"w"), selector=lambda qs, m, a: qs[a], arg=qid)
        ctx = mp.get_context("fork")
        ready, start, q = ctx.Event(), ctx.Event(), ctx.Queue()
        lis = ctx.Process(target=_push_listener, args=(name, "BP", count, ready, start, q))
        snd = ctx.Process(target=_push_sender, args=(name, "BP", count, start, q))
        lis.start()
        snd.start()
        ready.wait(60)
        time.sleep(0.5)
        b0 = thread_times(broker.pid)
        start.set()
        got = [q.get(timeout=600) for _ in range(2)]
        b1 = thread_times(broker.pid)
        lis.join()
        snd.join()
    finally:
        broker.stop()
        shutil.rmtree(store, ignore_errors=True)
    sender = next(g for g in got if isinstance(g, dict))
    cons, p50, p99, n = next(g for g in got if isinstance(g, tuple))
    print(f"push: {n} messages at 1,000/s: listener age p50 {p50:.0f} us, p99 {p99:.0f} us")
    _print("  sender threads, us CPU per message:", sender, count)
    _print("  broker threads, us CPU per message:", _diff(b1, b0), count)
    _print("  consumer threads, us CPU per message:", cons, count)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--senders", type=int, default=8)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--push", type=int, default=2000)
    ap.add_argument("--only", choices=("durable", "push"))
    a = ap.parse_args()
    if a.only != "push":
        durable(a.senders, a.count)
    if a.only != "durable":
        push(a.push)


if __name__ == "__main__":
    main()
