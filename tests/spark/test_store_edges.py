"""The `shmq` source on stores that are not plain: system topics (scanned only when named),
paths and options that are wrong, damaged consume queues and commitlog tails, and queues big
enough to be cut into several partitions. Errors must reach the Spark user as the exception's
own text, naming what is wrong and where."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from typing import Any

import numpy as np
import pytest

import shmq
from shmq import Message, Producer
from shmq.codec import record as fmt
from shmq.spark.layout import split_extent
from shmq.spark.planner import plan_scan, queue_extents
from shmq.spark.pushdown import ScanBounds
from shmq.store.message_store import MessageStore
from shmq.store.write.hooks import PutRequest
from tests.spark.support import load, run

SYSTEM = ("%RETRY%cg", "%DLQ%cg", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC")


def _send(broker: str, topic: str, n: int, size: int = 16, queue: int | None = None) -> None:
    with Producer("pg", broker=broker) as p:
        for i in range(n):
            body = b"%06d" % i + os.urandom(max(0, size - 6))
            if queue is None:
                p.send(Message(topic, body, keys=f"k{i}"))
            else:
                p.send(Message(topic, body, keys=f"k{i}"), selector=lambda qs, m, a: qs[a], arg=queue)


def _put_system_topics(store_dir: str, config: dict) -> None:
    """Records of system topics, written as the broker's own services would (users cannot send there)."""
    with MessageStore(store_dir, config) as store:
        for k, topic in enumerate(SYSTEM):
            recs = [fmt.encode_message(topic, b"sys-%d" % i, properties={"REAL_TOPIC": "Orders"}) for i in range(k + 1)]
            store.put(PutRequest.of_records(topic, 0, recs))


def test_system_topics_only_when_named(spark: Any, store_dir: str, broker_name: str, config: dict) -> None:
    with shmq.Broker(store_dir, name=broker_name, config=config):
        _send(broker_name, "Orders", 8)
    _put_system_topics(store_dir, config)
    rows, _ = run(spark, load(spark, store_dir).select("topic"))
    assert Counter(r.topic for r in rows) == {"Orders": 8}
    # a filter naming a system topic narrows the default scan, it does not widen it (so the
    # answer is the same with pushdown off)
    assert load(spark, store_dir).where("topic = '%DLQ%cg'").count() == 0
    rows, tasks = run(spark, load(spark, store_dir, topic=",".join(SYSTEM) + ", Orders").select("topic"))
    assert Counter(r.topic for r in rows) == {"Orders": 8, **{t: k + 1 for k, t in enumerate(SYSTEM)}}
    assert tasks == 4 + len(SYSTEM)  # Orders' four queues and one queue of each system topic


def test_bad_paths_and_options_fail_with_their_reason(
    spark: Any, store_dir: str, broker_name: str, config: dict, tmp_path: Any
) -> None:
    with shmq.Broker(store_dir, name=broker_name, config=config):
        _send(broker_name, "Orders", 4)
    plain = tmp_path / "plain"  # a folder with a folder in it, neither a store
    (plain / "logs").mkdir(parents=True)
    cases = [
        (lambda: load(spark, str(plain)), "is not a shmq store: it has no commitlog/ directory nor checkpoint file"),
        (lambda: load(spark, str(tmp_path / "nowhere")), "is not a shmq store: no such directory"),
        (lambda: load(spark, store_dir, maxPartitionBytes="-1"), "option maxPartitionBytes must be a positive"),
        (lambda: load(spark, store_dir, maxpartitionbytes="lots"), "option maxPartitionBytes must be a positive"),
        (lambda: load(spark, store_dir, topic="Orders,no spaces"), "topic 'no spaces' has characters outside"),
    ]
    for df, text in cases:
        with pytest.raises(Exception) as e:
            df().count()
        assert text in str(e.value), str(e.value)[-2000:]


def _cq_file(store_dir: str, topic: str, qid: int) -> str:
    d = os.path.join(store_dir, "consumequeue", topic, str(qid))
    return os.path.join(d, sorted(os.listdir(d))[0])


def _cq_entries(store_dir: str, topic: str, qid: int) -> np.ndarray:
    with open(_cq_file(store_dir, topic, qid), "rb") as f:
        return np.frombuffer(f.read(), fmt.CQ_DTYPE)


def _write_at(path: str, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def test_corrupt_consume_queue_entry_is_named_in_the_error(
    spark: Any, store_dir: str, broker_name: str, config: dict
) -> None:
    with shmq.Broker(store_dir, name=broker_name, config=config):
        _send(broker_name, "Orders", 40, queue=1)
    entries = _cq_entries(store_dir, "Orders", 1)
    bad = entries[:40].copy()
    bad[17]["offset"] = bad[16]["offset"]  # entry 17 points at entry 16's record
    _write_at(_cq_file(store_dir, "Orders", 1), 0, bad.tobytes())
    with pytest.raises(Exception) as e:
        load(spark, store_dir).count()
    text = str(e.value)
    assert "topic Orders queue 1 queue offset 17 is damaged" in text, text[-3000:]
    assert "belongs to queue 1 offset 16" in text
    assert "CorruptRecordError" in text


def test_garbage_tails_give_the_valid_prefix(spark: Any, store_dir: str, broker_name: str, config: dict) -> None:
    """What a crash or a bad disk leaves at the end of the files: the log's last records zeroed
    then overwritten with garbage, and garbage entries past a consume queue's last one. The
    scan ends each queue at its last whole record."""
    with shmq.Broker(store_dir, name=broker_name, config=config):
        _send(broker_name, "Orders", 40, size=100, queue=0)
        _send(broker_name, "Pay", 30, size=100, queue=2)  # after Orders in the log: the log's tail
    pay = _cq_entries(store_dir, "Pay", 2)
    log = os.path.join(store_dir, "commitlog", fmt.offset_file_name(0))
    _write_at(log, int(pay[24]["offset"]) + 4, b"\0" * int(pay[24]["size"]))  # Pay 24 torn, 25 zeroed in part
    _write_at(log, int(pay[26]["offset"]), os.urandom(4 * int(pay[26]["size"])))  # Pay 26.. garbage
    _write_at(_cq_file(store_dir, "Orders", 0), 40 * fmt.CQ_ENTRY_SIZE, os.urandom(5 * fmt.CQ_ENTRY_SIZE))
    rows, _ = run(spark, load(spark, store_dir).select("topic", "queue_offset"))
    got = {t: sorted(o for tt, o in rows if tt == t) for t in ("Orders", "Pay")}
    assert got == {"Orders": list(range(40)), "Pay": list(range(24))}


def test_max_partition_bytes_cuts_a_queue_into_exact_slices(
    spark: Any, store_dir: str, broker_name: str, config: dict
) -> None:
    with shmq.Broker(store_dir, name=broker_name, config=config):
        _send(broker_name, "Big", 300, size=1000, queue=3)
        _send(broker_name, "Big", 5, size=10, queue=0)
    extents = {e.queue_id: e for e in queue_extents(store_dir, None, ScanBounds())}
    assert (extents[3].start, extents[3].end) == (0, 300)
    slices = split_extent(store_dir, extents[3], 20_000)
    assert len(slices) > 10
    assert slices[0].start == 0 and slices[-1].end == 300
    assert all(a.end == b.start for a, b in itertools.pairwise(slices))  # no gap, no overlap
    assert all(0 < s.nbytes <= 20_000 for s in slices)
    sizes = _cq_entries(store_dir, "Big", 3)["size"][:300].astype(np.int64)
    assert all(s.nbytes == int(sizes[s.start : s.end].sum()) for s in slices)
    assert all(s.nbytes + int(sizes[s.end]) > 20_000 for s in slices[:-1])  # each as full as it may be
    plan = plan_scan(store_dir, None, ScanBounds(), 20_000)
    rows, tasks = run(spark, load(spark, store_dir, maxPartitionBytes="20000").select("queue_id", "queue_offset"))
    assert tasks == len(plan) == len(slices) + 1
    assert sorted(rows) == [(0, i) for i in range(5)] + [(3, i) for i in range(300)]
