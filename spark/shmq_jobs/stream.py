"""stream.py: the continuous form of export.py. A streaming query follows a store (live
master, replica) or every store of a cluster's store root (its rows then have `broker`, and a
broker started later under the root is followed too) and appends its new messages to Parquet
partitioned by topic and day, the layout export.py writes and `read_export` reads.

Exactly-once comes from Spark: the query's offsets (one consume-queue offset per queue) are
journaled in the checkpoint, and the file sink records each micro-batch's files in
OUT/_spark_metadata, so a query stopped at any point and started again with the same
checkpoint and OUT neither loses nor repeats a message. A new checkpoint is a new query.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from shmq.spark.layout import parse_topic_option
from shmq.spark.stores import open_stores
from shmq_jobs.export import day_column
from shmq_jobs.session import job_parser, job_session, run_job, topic_option, wide_console


def start_query(
    spark: Any,
    store: str,
    out: str,
    checkpoint: str,
    topics: list[str] | None,
    trigger_seconds: float | None,
    max_records: int | None,
    starting: str,
) -> Any:
    """Start the query (`trigger_seconds` None: Trigger.AvailableNow, stops at the end it saw)."""
    options = {**topic_option(topics), "startingOffsets": starting}
    if max_records:
        options["maxRecordsPerTrigger"] = str(max_records)
    df = spark.readStream.format("shmq").options(**options).load(store)
    writer = (
        df.withColumn("day", day_column())
        .writeStream.format("parquet")
        .partitionBy("topic", "day")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
    )
    if trigger_seconds is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def follow(query: Any, console: Console) -> int:
    """Wait for the query (Ctrl-C stops it cleanly); print each micro-batch's rows. Rows written."""
    seen, rows = -1, 0
    try:
        while query.isActive:
            query.awaitTermination(1.0)
            for p in query.recentProgress:
                if p["batchId"] > seen:
                    seen = p["batchId"]
                    rows += int(p["numInputRows"])
                    console.print(f"batch {seen}: {p['numInputRows']} messages ({rows} in all)")
    except KeyboardInterrupt:
        console.print("stopping")
        query.stop()
    exc = query.exception()
    if exc is not None:
        raise RuntimeError(f"the streaming query failed: {exc}")
    return rows


def parser() -> argparse.ArgumentParser:
    ap = job_parser(
        "stream.py",
        (
            "Follow a shmq store and append its new messages to Parquet partitioned by topic and day (UTC), "
            "exactly once across restarts with the same checkpoint."
        ),
        with_out=True,
    )
    ap.add_argument("--checkpoint", required=True, help="the query's checkpoint directory (keep it with OUT)")
    ap.add_argument("--trigger", type=float, default=10.0, help="seconds between micro-batches (default 10)")
    ap.add_argument(
        "--available-now",
        action="store_true",
        help="read what the store holds now, in micro-batches, then stop (for cron-style runs)",
    )
    ap.add_argument("--max-records", type=int, help="at most this many messages per micro-batch")
    ap.add_argument(
        "--starting",
        choices=("earliest", "latest"),
        default="earliest",
        help="where a new query (no checkpoint yet) starts",
    )
    return ap


def main(argv: list[str] | None = None, spark: Any = None, console: Console | None = None) -> int:
    args = parser().parse_args(argv)
    topics = parse_topic_option(args.topic)
    store = open_stores(args.store).path
    out = console or wide_console()
    with job_session("shmq-stream", args.master, spark) as session:
        query = start_query(
            session,
            store,
            args.out,
            args.checkpoint,
            topics,
            None if args.available_now else args.trigger,
            args.max_records,
            args.starting,
        )
        rows = follow(query, out)
    out.print(f"{rows} messages written to {args.out}")
    return 0


def run() -> int:
    """The script's entry point (session.run_job)."""
    return run_job("stream.py", main)
