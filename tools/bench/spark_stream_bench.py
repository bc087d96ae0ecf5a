"""Streaming benchmark of the `shmq` Spark source: end-to-end latency and sustained rate.

Latency: a producer process sends 100-byte messages at a steady offered rate (batches every
10 ms); each body starts with its send time (wall clock, same host). A query with a 1 s
processing-time trigger lands every micro-batch in a foreachBatch sink on the driver, which
notes when the rows arrived; latency = arrival - send time, p50/p99 over all rows after the
warm-up. A row waits for the next trigger (up to 1 s), then for the micro-batch to run.

Sustained rate: a backlog of --drain messages is stored first, then an AvailableNow query
(noop sink, maxRecordsPerTrigger --drain-batch) drains it; rows / wall time of the query.

    .venv/bin/python tools/bench/spark_stream_bench.py [--rates 1000,10000] [--seconds 20] [--drain N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time

import shmq
import shmq.spark
from shmq import MessageBatch, Producer

TOPIC = "Bench"
BODY_PAD = b"x" * (100 - 8)
TICK = 0.01  # s between two producer batches
CONFIG = {"mappedFileSizeCommitLog": 256 * 1024 * 1024, "warmAheadSize": 256 * 1024 * 1024}


def _produce(name: str, rate: int, seconds: float, topic: str) -> None:
    """Send `rate` messages/s for `seconds`, each body stamped with its send time."""
    per_tick = max(1, round(rate * TICK))
    with Producer("bench-stream", broker=name) as p:
        t0 = time.monotonic()
        tick = 0
        while time.monotonic() - t0 < seconds:
            stamp = struct.pack(">d", time.time()) + BODY_PAD
            p.send_batch(MessageBatch(topic, [stamp] * per_tick))
            tick += 1
            delay = t0 + tick * TICK - time.monotonic()
            if delay > 0:
                time.sleep(delay)


def _fill(name: str, count: int, topic: str) -> None:
    with Producer("bench-fill", broker=name) as p:
        batch = MessageBatch(topic, [b"y" * 100] * 2048)
        for _ in range(count // 2048):
            p.send_batch(batch)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def latency_run(spark, store: str, name: str, rate: int, seconds: float, warmup: float) -> dict:
    from pyspark.sql import functions as F

    topic = f"{TOPIC}{rate}"
    lat: list[float] = []
    lock = threading.Lock()
    started = time.time()

    def sink(df, batch_id: int) -> None:
        sent = [r[0] for r in df.select(F.substring("body", 1, 8).alias("t")).collect()]
        now = time.time()
        with lock:
            lat.extend(now - struct.unpack(">d", bytes(s))[0] for s in sent)
            if os.environ.get("BENCH_DEBUG") and sent:
                ls = [now - struct.unpack(">d", bytes(s))[0] for s in sent]
                print("batch", batch_id, len(ls), round(min(ls), 3), round(max(ls), 3), flush=True)

    # the topic exists before the query starts (one send), so the query's first trigger has it
    with Producer("bench-init", broker=name) as p:
        p.send_batch(MessageBatch(topic, [struct.pack(">d", time.time()) + BODY_PAD]))
    q = (
        spark.readStream.format("shmq")
        .option("topic", topic)
        .option("startingOffsets", "latest")
        .load(store)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", os.path.join(store, "..", f"ck{rate}"))
        .trigger(processingTime="1 second")
        .start()
    )
    time.sleep(3)  # the first micro-batches start the Python workers
    proc = mp.get_context("spawn").Process(target=_produce, args=(name, rate, seconds, topic))
    t_send = time.time()
    proc.start()
    proc.join()
    t_end = time.time()
    q.processAllAvailable()
    q.stop()
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    durations = [p["durationMs"].get("triggerExecution", 0) for p in q.recentProgress if p["numInputRows"]]
    with lock:
        steady = lat[int(len(lat) * warmup / seconds) :]
    return {
        "rate": rate,
        "rows": rows,
        "sent_rate": round(rows / (t_end - t_send)),
        "p50_ms": round(_pct(steady, 0.5) * 1000),
        "p99_ms": round(_pct(steady, 0.99) * 1000),
        "max_ms": round(max(steady) * 1000),
        "batch_ms_median": statistics.median(durations) if durations else 0,
        "wall_s": round(time.time() - started, 1),
    }


def drain_run(spark, store: str, name: str, count: int, batch: int) -> dict:
    topic = f"{TOPIC}Drain"
    proc = mp.get_context("spawn").Process(target=_fill, args=(name, count, topic))
    proc.start()
    proc.join()
    t0 = time.time()
    q = (
        spark.readStream.format("shmq")
        .option("topic", topic)
        .option("maxRecordsPerTrigger", str(batch))
        .load(store)
        .writeStream.format("noop")
        .option("checkpointLocation", os.path.join(store, "..", "ckd"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    wall = time.time() - t0
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    return {
        "rows": rows,
        "batches": sum(1 for p in q.recentProgress if p["numInputRows"]),
        "wall_s": round(wall, 1),
        "rows_per_s": round(rows / wall),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="1000,10000", help="offered rates, messages/s, comma list")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of each run left out of the percentiles")
    ap.add_argument("--drain", type=int, default=2_000_000, help="backlog drained for the sustained rate (0: skip)")
    ap.add_argument("--drain-batch", type=int, default=500_000)
    args = ap.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("shmq-stream-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(shmq.spark.ShmqDataSource)
    root = tempfile.mkdtemp(prefix="shmq-stream-bench-")
    store = os.path.join(root, "store")
    name = f"ssb{os.getpid()}"
    try:
        with shmq.Broker(store, name=name, config=CONFIG):
            for rate in (int(r) for r in args.rates.split(",") if r):
                print("latency", latency_run(spark, store, name, rate, args.seconds, args.warmup), flush=True)
            if args.drain:
                print("drain", drain_run(spark, store, name, args.drain, args.drain_batch), flush=True)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
