#!/usr/bin/env python
"""Spark scan benchmark: rows/s of `spark.read.format("shmq")` on local[2], against Spark's own
Parquet reader on the same rows, and the bytes a one-topic query plans.

    .venv/bin/python tools/bench/spark_bench.py                      # 10 M messages, 3 runs
    .venv/bin/python tools/bench/spark_bench.py --messages 1000000   # a quicker look

The store is written with MessageStore directly (no broker: batch puts of 1,024 records of one
topic and queue, round robin over 10 topics x 4 queues; 100 B random bodies; every record has
TAGS, KEYS and UNIQ_KEY, like a producer's send with tags and keys). Then, on local[2]:

  shmq scan      every row of the store through the shmq source, all columns materialised
                 (`write.format("noop")`: Spark cannot skip a column)
  parquet scan   the same rows written once to Parquet (snappy), read by Spark's native reader
                 the same way: the anchor; the ratio is shmq rows/s over Parquet rows/s
  one topic      `where topic = 'Bench3'` on the 10-topic store: rows/s, and the commitlog bytes
                 of the planned partitions against the whole store's (pushdown at work)
  arrow ceiling  the same partitions through a source whose read() yields one prepared batch
                 again and again: what Spark's Python data source path costs with the reading
                 free (Arrow to the JVM, a copy into rows): the most any Python source gets here

Each timed figure is the median of --runs runs after one untimed warm-up. Goal (issue 12):
>= 1,000,000 rows/s and >= 50 % of the Parquet rate. The machine is shared: see min-max.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSourceReader, EqualTo, InputPartition
from pyspark.sql.types import StructType

import shmq.spark
from shmq.codec import record as fmt
from shmq.spark.source import ScanOptions, ShmqDataSource, ShmqPushdownReader, ShmqScanReader, SlicePartition
from shmq.store.message_store import MessageStore
from shmq.store.write.hooks import PutRequest

TOPICS, QUEUES, BATCH, BODY = 10, 4, 1024, 100
# distinct batches per topic (bodies, tags, keys, ids), put in turn: encoding 10 M records costs more than the scan
TEMPLATES = 8
GOAL_ROWS, GOAL_RATIO = 1_000_000, 0.5


def fill(store_dir: str, messages: int) -> float:
    """Write `messages` records; returns the seconds it took."""
    rng = np.random.default_rng(12)
    templates: dict[tuple[int, int, int], fmt.EncodedBatch] = {}
    t = time.perf_counter()
    with MessageStore(store_dir, {"flushDiskType": "ASYNC_FLUSH", "messageIndexEnable": False}) as store:
        for k, start in enumerate(range(0, messages, BATCH)):
            n = min(BATCH, messages - start)
            topic_no, queue_id = k % TOPICS, k // TOPICS % QUEUES
            key = (topic_no, n, k // (TOPICS * QUEUES) % TEMPLATES)
            batch = templates.get(key)
            if batch is None:
                props: list[Mapping[str, str] | None] = [
                    fmt.message_properties(
                        tags=f"Tag{i % 5}", keys=f"order-{key[2]}-{i}", uniq_key=f"{topic_no:08X}{key[2]:08X}{i:016X}"
                    )
                    for i in range(n)
                ]
                batch = templates[key] = fmt.encode_batch(
                    f"Bench{topic_no}", [rng.bytes(BODY) for _ in range(n)], props
                )
            store.put(PutRequest(batch, [f"Bench{topic_no}"], None, queue_id, user_batch=True), wait_flush=False)
    return time.perf_counter() - t


def planned_bytes(store_dir: str, topic: str | None) -> tuple[int, int]:
    """(partitions, commitlog bytes) the source plans, with `topic = ...` pushed down as Spark would."""
    opts = ScanOptions({"path": store_dir})
    reader: ShmqScanReader = ShmqScanReader(opts)
    if topic is not None:
        pushdown = ShmqPushdownReader(opts)
        assert not pushdown.pushFilters([EqualTo(("topic",), topic)])
        reader = pushdown
    parts = reader.partitions()
    return len(parts), sum(p.slice.nbytes for p in parts if isinstance(p, SlicePartition))


class CeilingReader(ShmqScanReader):
    """The shmq partitions, each filled with copies of its first batch (no store reads after it)."""

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SlicePartition)
        first = next(super().read(partition))
        left = partition.slice.end - partition.slice.start
        while left > 0:
            yield first.slice(0, min(left, first.num_rows))
            left -= first.num_rows


class CeilingSource(ShmqDataSource):
    @classmethod
    def name(cls) -> str:
        return "shmq_ceiling"

    def reader(self, schema: StructType) -> DataSourceReader:
        return CeilingReader(ScanOptions(dict(self.options)))


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    fn()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--dir",
        default=None,
        help="keep the store and the Parquet copy here (reused when it holds --messages rows); "
        "default: a temporary directory, removed",
    )
    args = ap.parse_args(argv)
    base = args.dir or tempfile.mkdtemp(prefix="shmq-spark-bench-")
    store_dir, parquet_dir = os.path.join(base, "store"), os.path.join(base, "parquet")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("shmq-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(shmq.spark.ShmqDataSource)
    spark.dataSource.register(CeilingSource)
    try:
        df = spark.read.format("shmq").load(store_dir) if os.path.isdir(store_dir) else None
        if df is None or df.count() != args.messages:
            shutil.rmtree(base if args.dir else store_dir, ignore_errors=True)
            took = fill(store_dir, args.messages)
            print(f"wrote {args.messages:,} messages in {took:.1f} s ({args.messages / took:,.0f}/s)", flush=True)
            df = spark.read.format("shmq").load(store_dir)
        rows = args.messages
        if not os.path.isdir(parquet_dir):
            t = time.perf_counter()
            df.write.parquet(parquet_dir)
            print(f"wrote the Parquet copy in {time.perf_counter() - t:.1f} s", flush=True)
        cases = [
            ("shmq scan", rows, lambda: df.write.format("noop").mode("overwrite").save()),
            (
                "parquet scan",
                rows,
                lambda: spark.read.parquet(parquet_dir).write.format("noop").mode("overwrite").save(),
            ),
            (
                "arrow ceiling",
                rows,
                lambda: spark.read.format("shmq_ceiling").load(store_dir).write.format("noop").mode("overwrite").save(),
            ),
            (
                "shmq one topic",
                None,
                lambda: df.where("topic = 'Bench3'").write.format("noop").mode("overwrite").save(),
            ),
        ]
        results = {}
        for name, n, fn in cases:
            n = n if n is not None else df.where("topic = 'Bench3'").count()
            times = timed(fn, args.runs)
            results[name] = (n, times)
            print(f"  {name:15} {n / statistics.median(times):>12,.0f} rows/s", flush=True)
        all_parts, all_bytes = planned_bytes(store_dir, None)
        one_parts, one_bytes = planned_bytes(store_dir, "Bench3")
    finally:
        spark.stop()
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    shmq_rate = rows / statistics.median(results["shmq scan"][1])
    parquet_rate = rows / statistics.median(results["parquet scan"][1])
    print(f"\n{rows:,} messages of {BODY} B, {TOPICS} topics x {QUEUES} queues, local[2], median of {args.runs} runs\n")
    print("| query | rows | rows/s (median) | min-max | seconds |")
    print("|---|---:|---:|---:|---:|")
    for name, (n, times) in results.items():
        print(
            f"| {name} | {n:,} | {n / statistics.median(times):,.0f} | {n / max(times):,.0f} - {n / min(times):,.0f} "
            f"| {statistics.median(times):.2f} |"
        )
    ratio = shmq_rate / parquet_rate
    print(f"\nshmq / parquet: {ratio:.0%} (goal >= {GOAL_RATIO:.0%}); shmq rows/s goal >= {GOAL_ROWS:,}")
    print(
        f"one topic plans {one_parts} partitions, {one_bytes:,} commitlog bytes; the whole store {all_parts} "
        f"partitions, {all_bytes:,} bytes ({one_bytes / all_bytes:.1%})"
    )
    return 0 if shmq_rate >= GOAL_ROWS and ratio >= GOAL_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
