"""``Admin.query_by_key`` latency on a large store (issue 14: p50 <= 50 ms at 10 M messages).

Builds a store of ``--messages`` small messages (16-byte bodies, one key each: ``key-<n>``)
through a real broker with ``send_batch_async`` of ``MessageBatch`` columns, waits until the
index has the last one, then times ``--queries`` lookups of random keys, each a whole
``Admin.query_by_key`` call as ``shmq admin msg query`` makes it (open the state segment,
map the index and commitlog files, walk the chain, read and check the record). Prints one
JSON line: build time and rate, the wait for the index to catch up after it, index and
commitlog sizes, p50 / p99 / max in ms, and whether every query found exactly its message.
The first query (cold mappings) is timed too.

    .venv/bin/python tools/bench/query_bench.py [--messages 10000000] [--queries 200] [--dir D]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from collections import deque

import shmq
from shmq import Admin, MessageBatch, Producer

BATCH = 1000
WINDOW = 8
NAME = "query_bench"


def build(broker: str, n: int) -> float:
    """Send ``n`` messages with keys key-0 .. key-(n-1); seconds taken."""
    p = Producer("bench", broker=broker).start()
    try:
        start = time.perf_counter()
        window: deque = deque()
        for first in range(0, n, BATCH):
            count = min(BATCH, n - first)
            keys = [f"key-{i}" for i in range(first, first + count)]
            window.append(p.send_batch_async(MessageBatch("Bench", [b"x" * 16] * count, keys=keys)))
            if len(window) >= WINDOW:
                window.popleft().result()
        for f in window:
            f.result()
        return time.perf_counter() - start
    finally:
        p.shutdown()


def _du(path: str) -> int:
    """Bytes on disk under ``path`` (sparse index files count what they use)."""
    total = 0
    for root, _, names in os.walk(path):
        total += sum(os.stat(os.path.join(root, f)).st_blocks * 512 for f in names)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--dir", default=None, help="parent folder of the temporary store (default: $TMPDIR)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as d, shmq.Broker(d + "/store", NAME):
        admin = Admin(broker=NAME)
        admin.create_topic("Bench", queues=4)
        built = build(NAME, a.messages)
        sent = time.perf_counter()
        deadline = time.monotonic() + 600
        last = f"key-{a.messages - 1}"
        while not admin.query_by_key("Bench", last) and time.monotonic() < deadline:
            time.sleep(0.1)  # the index is written behind the commitlog
        indexed = time.perf_counter()
        rng = random.Random(14)
        times, right = [], 0
        for _ in range(a.queries):
            key = f"key-{rng.randrange(a.messages)}"
            t0 = time.perf_counter()
            found = admin.query_by_key("Bench", key)
            times.append((time.perf_counter() - t0) * 1000)
            right += len(found) == 1 and found[0].keys == key
        q = statistics.quantiles(times, n=100)
        print(
            json.dumps(
                {
                    "messages": a.messages,
                    "build_s": round(built, 1),
                    "build_msgs_per_s": round(a.messages / built),
                    "index_wait_s": round(indexed - sent, 1),
                    "index_mb_on_disk": round(_du(d + "/store/index") / 2**20),
                    "commitlog_mb": round(_du(d + "/store/commitlog") / 2**20),
                    "queries": a.queries,
                    "found_exactly_one": right,
                    "first_ms": round(times[0], 2),
                    "p50_ms": round(statistics.median(times), 2),
                    "p99_ms": round(q[98], 2),
                    "max_ms": round(max(times), 2),
                }
            )
        )


if __name__ == "__main__":
    main()
