#!/usr/bin/env python
"""What this machine charges for the steps no broker design avoids: the floors under `make bench`.

    .venv/bin/python tools/bench/floors.py [--rounds N] [--json FILE]

Each figure is the cost of one step that a row of the suite must pay per message or per hop,
measured with nothing of shmq in the way, so a row's gap to its goal can be split into "the
machine" and "our code":

- ``wake``: one process posts a POSIX semaphore another one sleeps on; the sleeper reads the
  post time from shared memory when it runs. Gaps between posts of 0 (a hot ping-pong), 100 us
  and 1 ms (the push latency workload's 1,000 msgs/s: the sleeper's core goes idle between
  messages, and waking an idle virtual CPU costs far more than a hot hand-over).
- ``chain``: the same through three processes, A posts B, B posts C (producer -> broker ->
  consumer: the two wake-ups a push delivery needs), at 1 ms gaps; the time A -> C.
- ``thread``: a ``ThreadPoolExecutor`` worker runs a submitted call (a push consumer hands each
  pulled batch to its listener this way), 1 ms after the last one, as at 1,000 msgs/s.
- ``python``: per-object costs a per-message Python API pays in the caller's process: a
  ``concurrent.futures.Future`` made, resolved and read (``send_async``'s contract), an object
  with ten slot attributes (a result or a received message), zlib's crc32 of 100 B, a 100 B
  ``bytes`` copy.
The SYNC_FLUSH floor (one sync of a small dirty range) is tools/bench/sync_floor.py's.
Medians and p99 in microseconds (wake, chain) or nanoseconds (python).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import mmap
import os
import statistics
import struct
import time
import timeit
import zlib
from collections.abc import Callable

import posix_ipc

STAMP = struct.Struct("<q")


def _sleeper(
    bell: posix_ipc.Semaphore, shared: mmap.mmap, rounds: int, forward: posix_ipc.Semaphore, last: bool
) -> None:
    """Child: wait ``rounds`` posts. The last of a chain writes each wake's delay (ns) after the
    post time at offset 0 and then posts ``forward`` (the driver's ack); the others pass the
    post on to ``forward`` (the next sleeper)."""
    for i in range(rounds):
        bell.acquire()
        if last:
            woke = time.perf_counter_ns()
            (posted,) = STAMP.unpack_from(shared, 0)
            STAMP.pack_into(shared, 8 + 8 * i, woke - posted)
        forward.release()
    os._exit(0)


def wake_latency(rounds: int, gap_s: float, hops: int) -> list[float]:
    """Delays in us from a post to the wake-up ``hops`` processes down the chain."""
    shared = mmap.mmap(-1, 8 + 8 * rounds)
    bells = [posix_ipc.Semaphore(None, posix_ipc.O_CREX) for _ in range(hops + 1)]  # the last: acks
    pids = []
    try:
        for h in range(hops):
            pid = os.fork()
            if pid == 0:
                _sleeper(bells[h], shared, rounds, bells[h + 1], h + 1 == hops)
            pids.append(pid)
        time.sleep(0.05)
        for _ in range(rounds):
            end = time.perf_counter() + gap_s
            while gap_s and time.perf_counter() < end:  # sleep most of the gap, then spin to its end
                left = end - time.perf_counter()
                if left > 200e-6:
                    time.sleep(left - 150e-6)
            STAMP.pack_into(shared, 0, time.perf_counter_ns())
            bells[0].release()
            bells[-1].acquire()  # the delay is written: the next round may stamp again
        for pid in pids:
            os.waitpid(pid, 0)
        return [STAMP.unpack_from(shared, 8 + 8 * i)[0] / 1e3 for i in range(rounds)]
    finally:
        for pid in pids:
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        for b in bells:
            b.unlink()
            b.close()
        shared.close()


def thread_handoff(rounds: int, gap_s: float) -> list[float]:
    """Delays in us from ``submit`` to the submitted call running in an idle executor worker."""
    delays: list[float] = []

    def ran(submitted: int) -> None:
        delays.append((time.perf_counter_ns() - submitted) / 1e3)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for _ in range(rounds):
            pool.submit(ran, time.perf_counter_ns())
            time.sleep(gap_s)
    return delays


def python_costs() -> dict[str, float]:
    """ns per call of what a per-message Python API does at least once per message."""

    class Result:
        __slots__ = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j")

        def __init__(self) -> None:
            self.a = self.b = self.c = self.d = self.e = 0
            self.f = self.g = self.h = self.i = self.j = 0

    def future() -> None:
        f: concurrent.futures.Future[int] = concurrent.futures.Future()
        f.set_result(1)
        f.result()

    body = b"x" * 100
    cases: dict[str, Callable[[], object]] = {
        "future made, resolved, read": future,
        "object with 10 slots": Result,
        "zlib.crc32 of 100 B": lambda: zlib.crc32(body),
        "100 B bytes copy": lambda: bytes(bytearray(body)),
    }
    out = {}
    for name, fn in cases.items():
        n = 200_000
        best = min(timeit.repeat(fn, number=n, repeat=5))
        out[name] = round(best / n * 1e9, 1)
    return out


def summary(us: list[float]) -> dict[str, float]:
    s = sorted(us)
    return {"p50": round(statistics.median(s), 1), "p99": round(s[int(len(s) * 0.99) - 1], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3000)
    ap.add_argument("--json", help="also write the figures to this file")
    a = ap.parse_args()
    res: dict[str, object] = {"load": os.getloadavg()[0]}
    for gap in (0.0, 100e-6, 1e-3):
        res[f"wake, gap {gap * 1e6:.0f} us"] = summary(wake_latency(a.rounds, gap, 1))
    res["chain A->B->C, gap 1000 us"] = summary(wake_latency(a.rounds, 1e-3, 2))
    res["thread hand-off, gap 1000 us"] = summary(thread_handoff(a.rounds, 1e-3))
    res["python (ns)"] = python_costs()
    res["load"] = round(max(float(res["load"]), os.getloadavg()[0]), 2)  # type: ignore[arg-type]
    for k, v in res.items():
        print(f"{k:<32} {v}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
