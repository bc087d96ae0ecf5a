"""The `shmq` Spark source end to end: a real broker stores what a producer sends (plain,
compressed, batched, ordered, over several topics and queues), Spark reads the store files,
and the DataFrame must equal what was sent; pushed-down filters must give the answers Spark
gives without pushdown while planning only the partitions that can match."""

from __future__ import annotations

import datetime as dt
import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import shmq
from shmq import Message, Producer
from shmq.client.admin import Admin
from shmq.codec import record as fmt
from tests.spark.conftest import SMALL
from tests.spark.support import UTC, as_dict, load, run, send, send_batch, with_ms

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
_names = itertools.count()


def _fill(broker: str) -> list[dict]:
    """Messages of every shape the producer makes; the rows the scan must give back."""
    Admin(broker).create_topic("Pay", queues=3)
    sent = []
    with Producer("pg", broker=broker) as p:
        sent.extend(
            send(
                p,
                Message(
                    "Orders",
                    b"plain-%d" % i,
                    tags=f"t{i % 3}",
                    keys=[f"k{i}", f"o{i % 5}", "all"],
                    properties={"n": str(i), "città": "Zürich ✓ 東京"},
                ),
            )
            for i in range(40)
        )
        # over compressMsgBodyOverHowmuch (4096) and compressible: stored zlib'd
        sent.extend(
            send(p, Message("Pay", (b"compress me %d " % i) * 600, tags="big", keys=f"big{i}")) for i in range(6)
        )
        sent += send_batch(
            p, [Message("Pay", b"batch-%d" % i, tags="b", keys=f"b{i}", properties={"i": str(i)}) for i in range(10)]
        )
        for i in range(12):  # ordered: each order's messages to one queue
            sent.append(
                send(
                    p,
                    Message("Orders", b"ordered-%d" % i, tags="ord"),
                    selector=lambda qs, m, a: qs[a % len(qs)],
                    arg=i // 4,
                )
            )
        sent.append(send(p, Message("Audit", b"no tags, no keys")))
    return sent


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[dict]]]:
    """A stopped store holding _fill's messages (shared by the read-only tests of this module)."""
    store = str(tmp_path_factory.mktemp("spark-source") / "store")
    name = f"spsrc{os.getpid()}x{next(_names)}"
    with shmq.Broker(store, name=name, config=dict(SMALL)):
        sent = _fill(name)
    yield store, sent


def test_scan_gives_back_every_message_as_sent(spark: Any, stored: tuple[str, list[dict]]) -> None:
    store, sent = stored
    rows, tasks = run(spark, with_ms(load(spark, store)))
    got = {r.msg_id: as_dict(r) for r in rows}
    assert len(got) == len(rows) == len(sent) == 69
    for want in sent:
        row = got[want["msg_id"]]
        assert {k: row[k] for k in want} == want, want["msg_id"]
        assert bool(row["sys_flag"] & fmt.FLAG_COMPRESSED) == (len(want["body"]) > 4096)
        assert 0 < row["born_ms"] <= row["store_ms"] and row["reconsume_times"] == 0
    assert tasks == len({(w["topic"], w["queue_id"]) for w in sent})  # one partition per queue (all small)
    # the records tile the commitlog: each starts where the previous one ended (one small segment)
    by_offset = sorted(got.values(), key=lambda r: r["commitlog_offset"])
    assert by_offset[0]["commitlog_offset"] == 0
    assert all(a["commitlog_offset"] + a["size"] == b["commitlog_offset"] for a, b in itertools.pairwise(by_offset))


def _ts(ms: int, extra_us: int = 0) -> str:
    t = dt.datetime.fromtimestamp(ms / 1000, UTC) + dt.timedelta(microseconds=extra_us)
    return f"TIMESTAMP '{t.strftime('%Y-%m-%d %H:%M:%S.%f')}'"


def _queries(sent: list[dict]) -> list[tuple[str, Callable[[dict], bool], bool]]:
    """(SQL predicate, the same in Python, whether the source applies all of it)."""
    times = sorted(w["store_ms"] for w in sent)
    mid, late = times[len(times) // 2], times[-8]
    return [
        ("topic = 'Orders'", lambda r: r["topic"] == "Orders", True),
        ("topic IN ('Pay', 'Audit')", lambda r: r["topic"] in ("Pay", "Audit"), True),
        ("queue_id = 2", lambda r: r["queue_id"] == 2, True),
        ("queue_offset >= 8", lambda r: r["queue_offset"] >= 8, True),
        (
            "topic = 'Orders' AND queue_id IN (1, 3) AND queue_offset BETWEEN 2 AND 6",
            lambda r: r["topic"] == "Orders" and r["queue_id"] in (1, 3) and 2 <= r["queue_offset"] <= 6,
            True,
        ),
        (f"store_timestamp >= {_ts(mid)}", lambda r: r["store_ms"] >= mid, True),
        (f"store_timestamp > {_ts(mid)} AND store_timestamp < {_ts(late)}", lambda r: mid < r["store_ms"] < late, True),
        (f"store_timestamp >= {_ts(mid, 500)}", lambda r: r["store_ms"] > mid, True),  # sub-millisecond literals
        (f"store_timestamp <= {_ts(mid, 500)}", lambda r: r["store_ms"] <= mid, True),
        (f"store_timestamp < {_ts(mid, 500)}", lambda r: r["store_ms"] <= mid, True),
        (f"store_timestamp = {_ts(late)}", lambda r: r["store_ms"] == late, True),
        (f"store_timestamp = {_ts(late, 500)}", lambda r: False, True),
        ("topic = 'nothing-here'", lambda r: False, True),
        ("topic = 'Orders' OR queue_id = 0", lambda r: r["topic"] == "Orders" or r["queue_id"] == 0, False),
        ("tags = 't1' AND topic = 'Orders'", lambda r: r["tags"] == "t1" and r["topic"] == "Orders", False),
    ]


def test_pushdown_answers_as_spark_does_and_plans_only_matching_queues(
    spark: Any, stored: tuple[str, list[dict]]
) -> None:
    store, sent = stored
    queues = {(w["topic"], w["queue_id"]) for w in sent}
    for sql, pred, exact in _queries(sent):
        want = sorted(w["msg_id"] for w in sent if pred(w))
        rows, tasks = run(spark, with_ms(load(spark, store)).where(sql).select("msg_id"))
        assert sorted(r.msg_id for r in rows) == want, sql
        if exact:  # every queue planned can match; Spark runs one empty task when none can
            assert tasks == max(1, len({(w["topic"], w["queue_id"]) for w in sent if pred(w)})), sql
        elif "topic = 'Orders'" in sql and " OR " not in sql:  # the topic part is pushed, the tags part is Spark's
            assert tasks == len({q for q in queues if q[0] == "Orders"}), sql
        else:
            assert tasks == len(queues), sql


def test_pushdown_conf_off_every_query_works_the_same(spark: Any, stored: tuple[str, list[dict]]) -> None:
    store, sent = stored
    queues = {(w["topic"], w["queue_id"]) for w in sent}
    spark.conf.set(PUSHDOWN, "false")
    try:
        for sql, pred, _ in _queries(sent)[::2]:  # every other one: the conf-off path is one code path
            rows, tasks = run(spark, with_ms(load(spark, store)).where(sql).select("msg_id"))
            assert sorted(r.msg_id for r in rows) == sorted(w["msg_id"] for w in sent if pred(w)), sql
            assert tasks == len(queues), sql  # nothing pushed: every queue is read
        assert load(spark, store).count() == len(sent)
    finally:
        spark.conf.set(PUSHDOWN, "true")


def test_pushdown_reader_plans_the_pushed_ranges(stored: tuple[str, list[dict]]) -> None:
    """What the pushdown worker does, called directly on the store: the filters the source
    applies are taken, the rest handed back, and the partitions are the narrowed queue ranges."""
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan, StringStartsWith

    from shmq.spark.source import ScanOptions, ShmqPushdownReader

    store, sent = stored
    reader = ShmqPushdownReader(ScanOptions({"path": store}))
    tags = StringStartsWith(("tags",), "t")
    rest = reader.pushFilters(
        [
            In(("topic",), ("Orders", "Pay")),
            EqualTo(("queue_id",), 1),
            tags,
            GreaterThanOrEqual(("queue_offset",), 2),
            LessThan(("queue_offset",), 5),
        ]
    )
    assert rest == [tags]
    planned = [(p.slice.topic, p.slice.queue_id, p.slice.start, p.slice.end) for p in reader.partitions()]
    ends = {
        t: 1 + max(w["queue_offset"] for w in sent if w["topic"] == t and w["queue_id"] == 1) for t in ("Orders", "Pay")
    }
    assert planned == [(t, 1, 2, min(5, ends[t])) for t in ("Orders", "Pay") if ends[t] > 2] and planned
    pay_ends = {
        q: 1 + max(w["queue_offset"] for w in sent if w["topic"] == "Pay" and w["queue_id"] == q) for q in range(3)
    }
    reader = ShmqPushdownReader(ScanOptions({"path": store, "TOPIC": "Pay"}))  # option names ignore case
    assert reader.pushFilters([GreaterThanOrEqual(("queue_offset",), 2)]) == []
    assert [(p.slice.queue_id, p.slice.start, p.slice.end) for p in reader.partitions()] == [
        (q, 2, end) for q, end in pay_ends.items() if end > 2
    ]
