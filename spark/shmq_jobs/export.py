"""export.py: a store's messages as Parquet partitioned by topic and day, checked after writing.
A cluster's store root exports every broker's store into one OUT, the files holding `broker`.

Parquet is the form a Spark cluster reads when the data outgrows one host: any executor reads
it from HDFS or S3, while the `shmq` source needs the store's own files on the executors' disks.
Layout: OUT/topic=T/day=YYYY-MM-DD/part-*.parquet: the files hold the scan's columns except
`topic`, which the path holds with `day`, the UTC date of store_timestamp.

The export covers a snapshot: each queue's range as planned before the write (a live broker
may append meanwhile; those messages go to the next export). After writing, the part of OUT
within that snapshot is read back and compared with what the write consumed: row count and a
checksum over ([broker,] topic, queue_id, queue_offset, msg_id); on a mismatch the first differing
messages are listed. `overwrite` replaces only the (topic, day) partitions this export writes
(dynamic partition overwrite: other topics and older days stay), `append` adds files, so
appending a snapshot twice shows up as a mismatch (every message twice).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from shmq.spark.layout import parse_topic_option
from shmq.spark.stores import open_stores
from shmq_jobs.session import job_parser, job_session, run_job, topic_option, wide_console

EXPORT_DDL_EXTRA = "day date"
DAY_MS = 86_400_000
SHOWN_DIFFERENCES = 5
Ident = tuple[str, ...]  # [broker,] topic, queue_id, queue_offset, msg_id (as text)


@dataclass(slots=True)
class ExportResult:
    """What was written and whether it reads back the same."""

    out: str
    source_rows: int
    written_rows: int
    checksums_equal: bool
    partitions: list[tuple[str, str, int]] = field(default_factory=list)  # topic, day (ISO), rows
    missing: list[Ident] = field(default_factory=list)  # more often in the store than in OUT
    extra: list[Ident] = field(default_factory=list)  # more often in OUT: duplicates

    @property
    def ok(self) -> bool:
        return self.source_rows == self.written_rows and self.checksums_equal


def export_schema(with_broker: bool = False) -> str:
    """The schema to read an export with: the scan's columns (with `broker` for an export of a
    store root) and `day`. Given explicitly, so a topic named like a number stays a string
    (Spark infers partition value types otherwise)."""
    from shmq.spark.schema import schema_ddl

    return f"{schema_ddl(with_broker)}, {EXPORT_DDL_EXTRA}"


def day_column() -> Any:
    """The `day` partition column: the UTC date of store_timestamp (whatever the session time zone)."""
    from pyspark.sql import functions as F

    return F.date_from_unix_date(F.floor(F.unix_millis("store_timestamp") / DAY_MS).cast("int"))


def read_export(spark: Any, out: str, with_broker: bool = False) -> Any:
    """An export as a DataFrame; `with_broker`: it was written from a store root."""
    return spark.read.schema(export_schema(with_broker)).parquet(out)


def _queue_columns(df: Any) -> list[str]:
    """The columns naming a queue: a store root's rows name their broker too."""
    return ["broker", "topic", "queue_id"] if "broker" in df.columns else ["topic", "queue_id"]


def _within(df: Any, ranges: Any) -> Any:
    """The rows of `df` inside the snapshot: per queue, offsets [lo, hi)."""
    from pyspark.sql import functions as F

    return (
        df.join(F.broadcast(ranges), _queue_columns(ranges))
        .where((F.col("queue_offset") >= F.col("lo")) & (F.col("queue_offset") < F.col("hi")))
        .drop("lo", "hi")
    )


def _ident(df: Any) -> list[str]:
    """The columns that tell one message from another: its queue, queue offset and msg_id."""
    return [*_queue_columns(df), "queue_offset", "msg_id"]


def _checks(F: Any, ident_columns: list[str]) -> list[Any]:  # noqa: N803 - pyspark.sql.functions by its usual name
    ident = F.xxhash64(*ident_columns).cast("decimal(38,0)")
    return [F.count(F.lit(1)).alias("rows"), F.coalesce(F.sum(ident), F.lit(0).cast("decimal(38,0)")).alias("checksum")]


def _differences(F: Any, source: Any, written: Any) -> tuple[list[Ident], list[Ident]]:  # noqa: N803
    """A few messages more often in the store than in the export, and the other way round
    (one query: +1 per store row, -1 per exported row, summed per message)."""
    from pyspark.sql import Window

    ident = _ident(source)
    net = (
        source.select(*ident, F.lit(1).alias("n"))
        .unionByName(written.select(*ident, F.lit(-1).alias("n")))
        .groupBy(*ident)
        .agg(F.sum("n").alias("n"))
    )
    first = Window.partitionBy(F.signum("n")).orderBy(*ident)
    rows = net.where("n != 0").withColumn("k", F.row_number().over(first)).where(f"k <= {SHOWN_DIFFERENCES}")
    found = sorted(rows.collect(), key=lambda r: tuple(r[: len(ident)]))
    missing = [tuple(str(v) for v in r[: len(ident)]) for r in found if r["n"] > 0]
    extra = [tuple(str(v) for v in r[: len(ident)]) for r in found if r["n"] < 0]
    return missing, extra


def _snapshot(spark: Any, store: str, topics: list[str] | None) -> Any:
    """Each queue's range [lo, hi) as planned now (of every store of a root), as a DataFrame;
    None when every queue is empty."""
    from shmq.spark.planner import queue_extents
    from shmq.spark.pushdown import ScanBounds

    stores = open_stores(store)
    found = [
        (s.broker, e.topic, e.queue_id, e.start, e.end)
        for s in stores.stores()
        for e in queue_extents(s.path, topics, ScanBounds())
        if e.end > e.start
    ]
    if not found:
        return None
    if stores.is_root:
        return spark.createDataFrame(found, "broker string, topic string, queue_id int, lo long, hi long")
    return spark.createDataFrame([f[1:] for f in found], "topic string, queue_id int, lo long, hi long")


def export(spark: Any, store: str, out: str, topics: list[str] | None, mode: str) -> ExportResult:
    """Write the snapshot of `topics` (None: every user topic) to `out` and verify it."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    ranges = _snapshot(spark, store, topics)
    if ranges is None:
        return ExportResult(out, 0, 0, True)
    source = _within(spark.read.format("shmq").options(**topic_option(topics)).load(store), ranges)
    ident = _ident(source)
    rows = source.withColumn("day", day_column())
    seen = Observation("shmq_export")
    (
        rows.observe(seen, *_checks(F, ident))
        .write.mode(mode)
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy("topic", "day")
        .parquet(out)
    )
    src = seen.get
    snapshot_topics = sorted(r.topic for r in ranges.select("topic").distinct().collect())
    exported = read_export(spark, out, "broker" in source.columns)
    written = _within(exported.where(F.col("topic").isin(snapshot_topics)), ranges)
    days = written.groupBy("topic", "day").agg(*_checks(F, ident)).orderBy("topic", "day").collect()
    result = ExportResult(
        out, int(src["rows"]), sum(r["rows"] for r in days), src["checksum"] == sum(r["checksum"] for r in days)
    )
    result.partitions = [(r["topic"], r["day"].isoformat(), r["rows"]) for r in days]
    if not result.ok:
        result.missing, result.extra = _differences(F, source, written)
    return result


def print_result(console: Console, r: ExportResult) -> None:
    t = Table(title=f"Parquet written to {r.out}")
    for col in ("topic", "day (UTC)", "messages"):
        t.add_column(col, justify="right" if col == "messages" else "left")
    for topic, day, n in r.partitions:
        t.add_row(topic, day, f"{n:,}")
    console.print(t)
    if r.ok:
        console.print(
            f"[bold green]verified[/]: {r.written_rows:,} messages read back from {r.out}, the same "
            f"(topic, queue, offset, msg_id) as the {r.source_rows:,} read from the store"
        )
        return
    console.print(
        f"[bold red]MISMATCH[/]: {r.source_rows:,} messages read from the store, {r.written_rows:,} "
        f"read back from {r.out}" + ("" if r.checksums_equal else " (msg_id checksums differ)")
    )
    for label, rows in (
        ("missing from the export", r.missing),
        ("more often in the export than in the store", r.extra),
    ):
        for *queue, offset, msg_id in rows:
            console.print(f"  {label}: {'/'.join(queue)} offset {offset} msg_id {msg_id}")


def parser() -> argparse.ArgumentParser:
    ap = job_parser(
        "export.py",
        (
            "Write a shmq store's messages as Parquet partitioned by topic and day (UTC), then read them back "
            "and check them against the store."
        ),
        with_out=True,
    )
    ap.add_argument(
        "--mode",
        choices=("overwrite", "append"),
        default="overwrite",
        help="overwrite (default) replaces the topic/day partitions written; append adds to them",
    )
    return ap


def main(argv: list[str] | None = None, spark: Any = None, console: Console | None = None) -> int:
    """Export and verify; exit status 1 when the export does not read back as the store."""
    args = parser().parse_args(argv)
    topics = parse_topic_option(args.topic)
    store = open_stores(args.store).path
    with job_session("shmq-export", args.master, spark) as session:
        result = export(session, store, args.out, topics, args.mode)
    print_result(console or wide_console(), result)
    return 0 if result.ok else 1


def run() -> int:
    """The script's entry point (session.run_job)."""
    return run_job("export.py", main)
