"""A cluster's store root read as one DataFrame: real brokers, each with its store under one
root (as `shmq cluster --store-root` lays them out), real Spark. Every store's rows come back
with their broker, filters on broker prune whole stores, the stream follows every store and
picks up a broker started later, and a damaged store stops the read with its name."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import shmq
from shmq import Message, Producer
from shmq.errors import ConfigError
from shmq.spark.schema import COLUMNS
from shmq.spark.source import ScanOptions
from tests.ipc_tracking import IpcTracker
from tests.spark.conftest import SMALL
from tests.spark.support import load, run

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
_names = itertools.count()
# per broker: topic -> messages (b2 holds only B, b0 only A)
PLAN = ({"A": 5}, {"A": 4, "B": 3}, {"B": 6})
Sent = dict[str, tuple[str, str, bytes]]  # msg_id -> (broker, topic, body)


def _send(broker: str, topic: str, n: int, sent: Sent, tag: str = "m") -> None:
    with Producer("pg", broker=broker) as p:
        for i in range(n):
            body = f"{broker}-{topic}-{tag}-{i}".encode()
            sent[p.send(Message(topic, body)).msg_id] = (broker, topic, body)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str], Sent]]:
    """A root of three stopped brokers' stores holding PLAN's messages."""
    top = str(tmp_path_factory.mktemp("spark-root") / "root")
    names = [f"sproot{os.getpid()}x{next(_names)}" for _ in PLAN]
    sent: Sent = {}
    for name, plan in zip(names, PLAN, strict=True):
        with shmq.Broker(os.path.join(top, name), name=name, config=dict(SMALL)):
            for topic, n in plan.items():
                _send(name, topic, n, sent)
    os.makedirs(os.path.join(top, "logs"))  # not a store: left out
    yield top, names, sent


def _rows(df: Any) -> Sent:
    rows = df.select("msg_id", "broker", "topic", "body").collect()
    return {r.msg_id: (r.broker, r.topic, bytes(r.body)) for r in rows}


def test_a_root_reads_every_store_with_its_broker(spark: Any, root: tuple[str, list[str], Sent]) -> None:
    top, names, sent = root
    df = load(spark, top)
    assert tuple(df.columns) == (*COLUMNS, "broker")
    assert df.schema["broker"].dataType.simpleString() == "string"
    assert _rows(df) == sent
    per_broker = {r.broker: r["count"] for r in load(spark, top).groupBy("broker").count().collect()}
    assert per_broker == {n: sum(p.values()) for n, p in zip(names, PLAN, strict=True)}
    # one store of the root, read alone: today's columns, no broker
    single = load(spark, os.path.join(top, names[1]))
    assert tuple(single.columns) == COLUMNS
    assert single.count() == sum(PLAN[1].values())


def test_filters_on_broker_prune_stores_and_topic_queue_filters_apply_per_store(
    spark: Any, root: tuple[str, list[str], Sent]
) -> None:
    top, names, sent = root
    queues = _queues(spark, top)
    b0, b1, b2 = names
    cases = [
        (f"broker = '{b1}'", lambda b, t: b == b1),
        (f"broker IN ('{b0}', '{b2}')", lambda b, t: b in (b0, b2)),
        (f"broker != '{b0}'", lambda b, t: b != b0),
        ("topic = 'B'", lambda b, t: t == "B"),
        (f"topic = 'A' AND broker = '{b1}'", lambda b, t: t == "A" and b == b1),
        ("broker = 'nobody'", lambda b, t: False),
    ]
    for sql, pred in cases:
        rows, tasks = run(spark, load(spark, top).where(sql).select("msg_id"))
        assert sorted(r.msg_id for r in rows) == sorted(m for m, (b, t, _) in sent.items() if pred(b, t)), sql
        # every task reads one queue of a store the filter keeps (Spark runs one empty task for none)
        assert tasks == max(1, sum(n for (b, t), n in queues.items() if pred(b, t))), sql
    # queue_id and queue_offset cut every store's queues the same way
    rows, _ = run(spark, load(spark, top).where("queue_id = 1 AND queue_offset < 1").select("broker", "topic"))
    assert Counter((r.broker, r.topic) for r in rows) == Counter(dict.fromkeys(queues, 1))
    # the broker option chooses stores too, also with pushdown off
    picked = load(spark, top, broker=f"{b2}, {b0}")
    assert Counter(r.broker for r in picked.select("broker").collect()) == Counter({b0: 5, b2: 6})


def _queues(spark: Any, top: str) -> Counter:
    """(broker, topic) -> how many queues hold messages."""
    rows = load(spark, top).select("broker", "topic", "queue_id").distinct().collect()
    return Counter((r.broker, r.topic) for r in rows)


def test_bad_roots_and_options(spark: Any, root: tuple[str, list[str], Sent], tmp_path: Any) -> None:
    top, names, _ = root
    (tmp_path / "empty").mkdir()
    with pytest.raises(Exception) as e:
        load(spark, str(tmp_path / "empty")).count()
    assert "is not a shmq store: it has no commitlog/ directory nor checkpoint file, nor subdirectories" in str(e.value)
    with pytest.raises(ConfigError, match="option broker chooses stores under a store root"):
        ScanOptions({"path": os.path.join(top, names[0]), "broker": names[0]})


def test_a_damaged_store_stops_the_read_with_its_name_and_the_others_read_without_it(
    spark: Any, ipc_tracker: IpcTracker, tmp_path: Any
) -> None:
    top = str(tmp_path / "root")
    names = [ipc_tracker.name("dmg"), ipc_tracker.name("ok")]
    sent: Sent = {}
    for name in names:
        with shmq.Broker(ipc_tracker.store(os.path.join(top, name)), name=name, config=dict(SMALL)):
            _send(name, "T", 6, sent)
    damaged = os.path.join(top, names[0])
    _flip_body_byte(damaged, f"{names[0]}-T-m-3".encode())
    with pytest.raises(Exception) as e:
        load(spark, top).count()
    text = str(e.value)
    assert f"{damaged}: topic T queue" in text and "fails its body CRC" in text, text[-3000:]
    kept = load(spark, top).where(f"broker != '{names[0]}'")
    assert _rows(kept) == {m: v for m, v in sent.items() if v[0] == names[1]}


def _flip_body_byte(store: str, body: bytes) -> None:
    """Change one byte of the stored body `body` (its CRC no longer matches)."""
    folder = os.path.join(store, "commitlog")
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "r+b") as f:
            data = f.read()
            at = data.find(body)
            if at >= 0:
                f.seek(at)
                f.write(bytes([body[0] ^ 0xFF]))
                return
    raise AssertionError(f"{body!r} not found in {folder}")


def test_the_stream_over_a_root_follows_every_store_and_a_broker_started_later(
    spark: Any, ipc_tracker: IpcTracker, tmp_path: Any
) -> None:
    top, out, ckpt = str(tmp_path / "root"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    names = [ipc_tracker.name("st") for _ in range(3)]
    stores = [ipc_tracker.store(os.path.join(top, n)) for n in names]
    sent: Sent = {}
    with contextlib.ExitStack() as running:  # a broker starts when made: each is entered at once
        for store, name in zip(stores[:2], names[:2], strict=True):
            running.enter_context(shmq.Broker(store, name=name, config=dict(SMALL)))
        _send(names[0], "S", 7, sent)
        _send(names[1], "S", 5, sent)
        q = (
            spark.readStream.format("shmq")
            .load(top)
            .writeStream.format("parquet")
            .option("checkpointLocation", ckpt)
            .option("path", out)
            .trigger(processingTime="300 milliseconds")
            .start()
        )
        try:
            q.processAllAvailable()
            assert _rows(spark.read.parquet(out)) == sent
            _send(names[0], "S", 4, sent, "later")  # sent while the query runs
            with shmq.Broker(stores[2], name=names[2], config=dict(SMALL)):  # a broker joins the root
                _send(names[2], "S", 6, sent, "new")
                _send(names[2], "S2", 2, sent, "new")
            q.processAllAvailable()
            end = q.lastProgress["sources"][0]["endOffset"]
        finally:
            q.stop()
    assert _rows(spark.read.parquet(out)) == sent  # every message once, with its broker
    keys = end if isinstance(end, dict) else json.loads(end)
    assert {k.split("/")[0] for k in keys} == set(names)  # offsets keyed by broker, topic and queue
    assert sum(v for k, v in keys.items() if k.startswith(f"{names[2]}/")) == 8
