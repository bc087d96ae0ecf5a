"""Helpers of the Spark tests: what a test sent (as the rows the scan must give back), a fresh
DataFrame per query, and how many tasks a query ran (the partitions Spark planned).

A fresh DataFrame per query, not one reused: Spark 4.3 keeps the partitions of the last
pushed-down plan on the relation, and a later query of the same DataFrame with no pushable
filter runs on them (see docs/SPARK.md); the tests check the source, not that Spark bug.
"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

from shmq import Message, Producer, SendResult

_groups = itertools.count()
UTC = dt.UTC


def load(spark: Any, store_dir: str, **options: str) -> Any:
    reader = spark.read.format("shmq")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(store_dir)


def run(spark: Any, df: Any) -> tuple[list[Any], int]:
    """The rows of `df` and the number of tasks of the scan stage (= partitions planned)."""
    sc = spark.sparkContext
    group = f"shmq-tests-{next(_groups)}"
    sc.setJobGroup(group, group)
    try:
        rows = df.collect()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    stages = [s for j in tracker.getJobIdsForGroup(group) for s in tracker.getJobInfo(j).stageIds]
    tasks = [tracker.getStageInfo(s).numTasks for s in sorted(stages)]
    return rows, tasks[0]


def ms_time(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, UTC)


def expected_rows(msg: Message, r: SendResult, msg_id: str, queue_offset: int, phys: int) -> dict:
    """The row the scan must give for `msg` as the send stored it."""
    props = dict(msg.properties or {})
    if msg.tags is not None:
        props["TAGS"] = msg.tags
    if msg.keys is not None:
        props["KEYS"] = msg.keys
    props["UNIQ_KEY"] = msg_id
    return {
        "topic": msg.topic,
        "queue_id": r.queue.queue_id,
        "queue_offset": queue_offset,
        "commitlog_offset": phys,
        "tags": msg.tags,
        "keys": msg.keys,
        "msg_id": msg_id,
        "store_ms": r.store_timestamp,
        "properties": props,
        "body": bytes(msg.body),
    }


def send(p: Producer, msg: Message, **kw: Any) -> dict:
    r = p.send(msg, **kw)
    return expected_rows(msg, r, r.msg_id, r.queue_offset, r.phys_offsets[0])


def send_batch(p: Producer, msgs: list[Message], **kw: Any) -> list[dict]:
    r = p.send_batch(msgs, **kw)
    ids = r.msg_id.split(",")
    return [expected_rows(m, r, ids[i], r.queue_offset + i, r.phys_offsets[i]) for i, m in enumerate(msgs)]


def with_ms(df: Any) -> Any:
    """`df` with its times as epoch milliseconds (independent of the Python side's time zone)."""
    return df.selectExpr("*", "unix_millis(store_timestamp) AS store_ms", "unix_millis(born_timestamp) AS born_ms")


def as_dict(row: Any) -> dict:
    """A row of with_ms(scan) in the shape of expected_rows."""
    d = row.asDict()
    d["properties"] = dict(d["properties"])
    d["body"] = bytes(d["body"])
    return d
