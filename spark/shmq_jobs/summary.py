"""Per-topic figures of a store, computed by Spark and collected as plain rows.

One scan feeds two small aggregations (totals; tags and keys ranked together): the scan's useful columns are
cached once (no bodies, only their lengths), so the store is read once however many
aggregations follow. Times leave Spark as epoch milliseconds, free of any time zone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class TopicSummary:
    """What scan.py prints for one topic."""

    topic: str
    messages: int
    queues: int
    stored_bytes: int  # whole commitlog records
    body_bytes: int  # bodies as read (decompressed)
    first_store_ms: int
    last_store_ms: int
    top_tags: list[tuple[str, int]] = field(default_factory=list)
    top_keys: list[tuple[str, int]] = field(default_factory=list)


def topic_summaries(df: Any, top: int) -> list[TopicSummary]:
    """The figures of every topic in `df` (a `shmq` scan, of a store or a store root: there a
    queue is a broker's queue), sorted by topic; `top` tags and keys each."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    queue = F.concat_ws("/", "broker", "queue_id") if "broker" in df.columns else F.col("queue_id")
    slim = df.select(
        "topic",
        queue.alias("queue"),
        "size",
        "tags",
        "keys",
        F.length("body").alias("body_len"),
        F.unix_millis("store_timestamp").alias("store_ms"),
    ).cache()
    try:
        totals = (
            slim.groupBy("topic")
            .agg(
                F.count(F.lit(1)).alias("messages"),
                F.countDistinct("queue").alias("queues"),
                F.sum("size").alias("stored_bytes"),
                F.sum("body_len").alias("body_bytes"),
                F.min("store_ms").alias("first"),
                F.max("store_ms").alias("last"),
            )
            .collect()
        )
        by_topic = {
            r["topic"]: TopicSummary(
                r["topic"], r["messages"], r["queues"], r["stored_bytes"], r["body_bytes"], r["first"], r["last"]
            )
            for r in totals
        }
        if top > 0:
            names = (
                slim.select("topic", F.lit("top_tags").alias("kind"), F.col("tags").alias("name"))
                .unionByName(
                    slim.select("topic", F.lit("top_keys").alias("kind"), F.explode(F.split("keys", " ")).alias("name"))
                )
                .where(F.col("name").isNotNull() & (F.col("name") != ""))
            )
            rank = Window.partitionBy("topic", "kind").orderBy(F.desc("n"), F.asc("name"))
            ranked = (
                names.groupBy("topic", "kind", "name")
                .agg(F.count(F.lit(1)).alias("n"))
                .withColumn("rank", F.row_number().over(rank))
                .where(F.col("rank") <= top)
            )
            for r in sorted(ranked.collect(), key=lambda r: (r["topic"], r["kind"], r["rank"])):
                getattr(by_topic[r["topic"]], r["kind"]).append((r["name"], r["n"]))
        return [by_topic[t] for t in sorted(by_topic)]
    finally:
        slim.unpersist()
