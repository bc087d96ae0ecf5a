"""Broker memory while messages pile up unconsumed: it must stay flat (issue: 10 million messages).

A producer sends MessageBatch batches of 100-byte bodies as fast as it can; nobody consumes.
Every ``--every`` messages the broker's anonymous memory (RssAnon: heap, numpy buffers, Python
objects; file-backed commitlog and consume-queue pages are the page cache's, not the broker's)
and its USS are sampled. Reports the first and last samples and the growth.

    .venv/bin/python tools/bench/backlog_memory.py [--messages 10000000] [--every 1000000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import deque

import psutil

import shmq
from shmq import MessageBatch, Producer

BODY = b"x" * 100
BATCH = 2048
CONFIG = {"mappedFileSizeCommitLog": 1 << 30, "warmAheadSize": 1 << 30}  # RocketMQ's size, warmed whole


def rss_anon_mib(pid: int) -> float:
    """RssAnon of ``pid`` in MiB (anonymous pages only)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no RssAnon in /proc/<pid>/status")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--every", type=int, default=1_000_000)
    args = ap.parse_args()
    samples = []
    with (
        tempfile.TemporaryDirectory(prefix="shmq-backlog-") as d,
        shmq.Broker(d, f"backlog{int(time.time()) % 100000}", CONFIG) as broker,
    ):
        proc = psutil.Process(broker.pid)
        batch = MessageBatch("Backlog", [BODY] * BATCH)
        with Producer("backlog", broker=broker.name) as p:
            in_flight: deque = deque()
            sent, next_sample, start = 0, 0, time.perf_counter()
            while sent < args.messages:
                if sent >= next_sample:
                    samples.append((sent, rss_anon_mib(broker.pid), proc.memory_full_info().uss / 2**20))
                    print(
                        f"{sent:>12,} messages  broker RssAnon {samples[-1][1]:8.1f} MiB  "
                        f"USS {samples[-1][2]:8.1f} MiB",
                        flush=True,
                    )
                    next_sample += args.every
                in_flight.append(p.send_batch_async(batch))
                sent += BATCH
                if len(in_flight) >= 4:
                    in_flight.popleft().result(60)
            for f in in_flight:
                f.result(60)
            elapsed = time.perf_counter() - start
        samples.append((sent, rss_anon_mib(broker.pid), proc.memory_full_info().uss / 2**20))
    first, last = samples[1] if len(samples) > 2 else samples[0], samples[-1]
    print(f"{sent:,} messages in {elapsed:.1f} s ({sent / elapsed:,.0f} msgs/s)")
    print(
        f"broker RssAnon after {first[0]:,}: {first[1]:.1f} MiB; after {last[0]:,}: {last[1]:.1f} MiB "
        f"(growth {last[1] - first[1]:+.1f} MiB); USS (includes mapped store pages) {first[2]:.0f} -> {last[2]:.0f} MiB"
    )


if __name__ == "__main__":
    main()
