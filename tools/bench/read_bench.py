#!/usr/bin/env python
"""Consumer read-path benchmark: records/s of the batch pull over a store written by MessageStore.

    .venv/bin/python tools/bench/read_bench.py            # full run, 5 timed runs per row
    .venv/bin/python tools/bench/read_bench.py --quick    # a few seconds

For each body size (100 B and 1 KiB; every record carries TAGS and UNIQ_KEY, tags alternate
TagA / TagB) a store is filled once, then read through `StoreReader` (read-only mappings, as a
consumer process reads the broker's files) with `consumer_batch.read_batch` in ranges of
--range consume-queue entries from offset 0 to the max offset:

  "*", columns        CQ range + columnar decode, every record delivered
  TagA, columns       CQ range + tag-hash filter + exact tag check + columnar decode; half delivered
  "*", + bodies()     as the first, plus a zero-copy memoryview per body (what a batch consumer uses)

"scanned/s" counts consume-queue entries read, "delivered/s" records in the batches. Each row
is timed --runs times after one untimed warm-up; the median and min-max are shown (the
machine is shared and noisy). Goal: >= 1,000,000 records/s delivered.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from shmq.codec import record as fmt
from shmq.filter.tags import TagFilter
from shmq.model.pulled import PulledBatch
from shmq.store.message_store import MessageStore
from shmq.store.read.columns import read_batch
from shmq.store.read.reader import StoreReader
from shmq.store.write.hooks import PutRequest

GOAL = 1_000_000
TOPIC = "ReadBench"
BATCH = 256


def fill(store: MessageStore, topic: str, body_size: int, n: int) -> int:
    """Append n records in batches like a producer's; returns the queue's max offset."""
    body = os.urandom(body_size)
    for start in range(0, n, BATCH):
        k = min(BATCH, n - start)
        props = [
            fmt.message_properties(tags="TagA" if (start + i) % 2 else "TagB", uniq_key=f"{start + i:032X}")
            for i in range(k)
        ]
        store.put(
            PutRequest(fmt.encode_batch(topic, [body] * k, props), [topic], None, 0, user_batch=True), wait_flush=False
        )
    return store.get_max_offset_in_queue(topic, 0)


def read_all(
    reader: StoreReader,
    topic: str,
    max_offset: int,
    step: int,
    expression: TagFilter,
    use: Callable[[PulledBatch], object] | None,
) -> int:
    """One pass over the queue; returns records delivered."""
    offset = delivered = 0
    while offset < max_offset:
        b = read_batch(reader, topic, 0, offset, step, max_offset, expression)
        if use is not None:
            use(b)
        delivered += len(b)
        offset = b.next_offset
    return delivered


def timed(fn: Callable[[], int], runs: int) -> tuple[list[float], int]:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        delivered = fn()
        times.append(time.perf_counter() - t)
    return times, delivered


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="200k records per size, 2 runs")
    ap.add_argument("--records", type=int, default=1_000_000, help="records per body size")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--range", type=int, default=1024, help="consume-queue entries per read_batch call")
    ap.add_argument("--sizes", default="100,1024", help="body sizes in bytes, comma-separated")
    ap.add_argument("--dir", default=None, help="parent of the temporary store (default: system temp)")
    args = ap.parse_args(argv)
    if args.quick:
        args.records, args.runs = 200_000, 2
    tmp = tempfile.mkdtemp(prefix="shmq-read-bench-", dir=args.dir)
    rows = []
    try:
        store = MessageStore(
            tmp,
            {
                "mappedFileSizeCommitLog": 256 * 1024 * 1024,
                "warmAheadSize": 256 * 1024 * 1024,
                "messageIndexEnable": False,
            },
        ).start()
        reader = StoreReader(tmp)
        try:
            for size in (int(s) for s in args.sizes.split(",")):
                topic = f"{TOPIC}{size}"
                t = time.perf_counter()
                mx = fill(store, topic, size, args.records)
                print(f"{size} B bodies: wrote {mx:,} records in {time.perf_counter() - t:.1f} s", flush=True)
                cases = [
                    ('"*", columns', TagFilter("*"), None),
                    ("TagA, columns", TagFilter("TagA"), None),
                    ('"*", + bodies()', TagFilter("*"), PulledBatch.bodies),
                ]
                for name, expr, use in cases:
                    times, delivered = timed(
                        functools.partial(read_all, reader, topic, mx, args.range, expr, use), args.runs
                    )
                    med = statistics.median(times)
                    rows.append((size, name, mx / med, delivered / med, delivered / max(times), delivered / min(times)))
                    print(f"  {name:18} delivered {delivered / med:>12,.0f}/s", flush=True)
        finally:
            reader.close()
            store.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{args.records:,} records per size, range {args.range}, median of {args.runs} runs\n")
    print("| body | read | scanned/s | delivered/s (median) | delivered min-max | goal |")
    print("|---:|---|---:|---:|---:|---|")
    for size, name, scanned, med, lo, hi in rows:
        ok = "ok" if med >= GOAL else "MISSED"
        print(f"| {size} B | {name} | {scanned:,.0f} | {med:,.0f} | {lo:,.0f} - {hi:,.0f} | {ok} |")
    return 0 if all(r[3] >= GOAL for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
