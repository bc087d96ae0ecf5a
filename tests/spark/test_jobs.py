"""The Spark jobs of spark/ (scan.py, export.py) on stores a real broker wrote.

The jobs' logic is imported and run with the shared session (`main(argv, spark=...)`); one
test runs `python spark/scan.py` as a user would, in its own JVM.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import subprocess
import sys
import time
from collections import Counter

import pytest
from rich.console import Console

import shmq
from shmq import Message, Producer, PullConsumer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "spark"))

from shmq_jobs import export as export_job  # noqa: E402
from shmq_jobs import render, scan  # noqa: E402
from shmq_jobs import stream as stream_job  # noqa: E402
from shmq_jobs.lag import GroupLag, group_lags, read_committed, sum_lags  # noqa: E402
from tests.ipc_tracking import IpcTracker  # noqa: E402

BIG = b"compressible " * 700  # over the producer's 4 KiB threshold: stored compressed


def _console() -> Console:
    return Console(file=io.StringIO(), width=200)


def _commit(c: PullConsumer, topic: str, offsets: dict[int, int]) -> None:
    """Commit, then wait until the broker has them (commits travel apart from the queries)."""
    queues = {mq.queue_id: mq for mq in c.fetch_queues(topic)}
    for qid, off in offsets.items():
        c.commit(queues[qid], off)
    deadline = time.monotonic() + 10
    while any(c.fetch_consume_offset(queues[q], from_store=True) != o for q, o in offsets.items()):
        assert time.monotonic() < deadline, "the broker never took the commits"
        time.sleep(0.02)


def _tag(i: int) -> str:
    return "TagA" if i % 5 == 0 else "TagB" if i % 2 else "TagC"  # 12, 24, 24 of 60


def _make_store(store_dir: str, broker_name: str, config: dict) -> dict:
    """Orders (tags, keys, one compressed body) and Audit; group cg part-way through Orders,
    group audit-cg on Audit. Returns what was sent, per topic."""
    sent: dict[str, list] = {"Orders": [], "Audit": []}
    with shmq.Broker(store_dir, name=broker_name, config=config):
        p = Producer("pg", broker=broker_name).start()
        try:
            for i in range(60):
                body = BIG if i == 7 else b"order %d" % i
                r = p.send(Message("Orders", body, tags=_tag(i), keys=f"order-{i % 4} user-{i % 2}"))
                sent["Orders"].append((r, body, i))
            for i in range(10):
                r = p.send(Message("Audit", b"audit %d" % i))
                sent["Audit"].append((r, b"audit %d" % i, i))
        finally:
            p.shutdown()
        per_queue = Counter(r.queue.queue_id for r, _, _ in sent["Orders"])
        c = PullConsumer("cg", broker=broker_name).start()
        try:
            _commit(c, "Orders", {0: 3, 1: per_queue[1]})  # queue 1 fully consumed, 2 and 3 never committed
        finally:
            c.shutdown()
        a = PullConsumer("audit-cg", broker=broker_name).start()
        try:
            _commit(a, "Audit", dict.fromkeys({r.queue.queue_id for r, _, _ in sent["Audit"]}, 1))
        finally:
            a.shutdown()
    return sent


def test_lag_counts_from_the_first_offset_and_stays_within_the_queue() -> None:
    extents = {("T", 0): (0, 10), ("T", 1): (5, 8), ("T", 2): (0, 4), ("U", 0): (0, 7)}
    committed = {("g", "T", 0): 4, ("g", "T", 1): 2, ("g", "T", 3): 9, ("h", "T", 2): 99, ("h", "U", 0): -1}
    lags = group_lags(committed, extents)
    # g/T: q0 10-4, q1 below its first offset counts from 5: 8-5, q2 never committed: 4-0,
    # q3 committed but gone from the store: nothing. h/T: q0 and q1 never committed (10 + 3),
    # q2 committed past its end: nothing
    assert lags == [
        GroupLag("g", "T", 4, 3, 22, 9, 13),
        GroupLag("h", "T", 3, 2, 22, 9, 13),
        GroupLag("h", "U", 1, 1, 7, 0, 7),
    ]
    assert [lag.topic for lag in group_lags(committed, extents, ["U"])] == ["U"]


def test_lags_of_a_store_root_add_up_per_group_and_topic() -> None:
    b0 = [GroupLag("g", "T", 4, 1, 10, 7, 3), GroupLag("h", "T", 4, 0, 10, 10, 0)]
    b1 = [GroupLag("g", "T", 2, 2, 6, 1, 5), GroupLag("g", "U", 1, 1, 2, 0, 2)]
    assert sum_lags([b0, b1, []]) == [
        GroupLag("g", "T", 6, 3, 16, 8, 8),
        GroupLag("g", "U", 1, 1, 2, 0, 2),
        GroupLag("h", "T", 4, 0, 10, 10, 0),
    ]


def test_damaged_offsets_fall_back_to_the_previous_copy_and_say_so(tmp_path) -> None:
    cfg = tmp_path / "config"
    cfg.mkdir()
    assert read_committed(str(tmp_path)) == ({}, [])  # no group ever committed: not a problem
    (cfg / "consumerOffset.json").write_text('{"offsetTable": {"T@g": {"0": 5}')
    committed, problems = read_committed(str(tmp_path))
    assert committed == {} and "consumerOffset.json" in problems[0] and "not shown" in problems[-1]
    (cfg / "consumerOffset.json.bak").write_text(json.dumps({"offsetTable": {"T@g": {"0": 4, "2": 1}}}))
    committed, problems = read_committed(str(tmp_path))
    assert committed == {("g", "T", 0): 4, ("g", "T", 2): 1}
    assert problems[-1].endswith("consumerOffset.json.bak")


def test_scan_and_export_of_a_store(spark, store_dir, broker_name, config, tmp_path) -> None:
    sent = _make_store(store_dir, broker_name, config)
    orders = sent["Orders"]
    t_lo = min(r.store_timestamp for r, _, _ in orders + sent["Audit"])
    t_hi = max(r.store_timestamp for r, _, _ in orders + sent["Audit"])

    out = _console()
    assert scan.main([store_dir, "--json", "--top", "2"], spark=spark, console=out) == 0
    doc = json.loads(out.file.getvalue())
    by_topic = {t["topic"]: t for t in doc["topics"]}
    assert sorted(by_topic) == ["Audit", "Orders"]
    o = by_topic["Orders"]
    assert o["messages"] == 60 and o["queues"] == len({r.queue.queue_id for r, _, _ in orders})
    assert o["body_bytes"] == sum(len(b) for _, b, _ in orders)  # the compressed body counts decompressed
    # Orders went first, one after another: its records are the commitlog up to Audit's first
    assert o["stored_bytes"] == sent["Audit"][0][0].phys_offsets[0] - orders[0][0].phys_offsets[0]
    assert o["top_tags"] == [{"tag": "TagB", "count": 24}, {"tag": "TagC", "count": 24}]  # ties by name
    assert o["top_keys"] == [{"key": "user-0", "count": 30}, {"key": "user-1", "count": 30}]
    assert by_topic["Audit"]["top_tags"] == [] and by_topic["Audit"]["top_keys"] == []
    iso = render.utc_iso
    assert o["first_store_time"] >= iso(t_lo) and max(t["last_store_time"] for t in doc["topics"]) == iso(t_hi)

    per_queue = Counter(r.queue.queue_id for r, _, _ in orders)
    behind = per_queue[0] - 3 + per_queue[2] + per_queue[3]
    audit_queues = Counter(r.queue.queue_id for r, _, _ in sent["Audit"])
    assert doc["consumer_lag"] == [
        {
            "group": "audit-cg",
            "topic": "Audit",
            "queues": 4,
            "behind": len(audit_queues),
            "broker_offset": 10,
            "consumer_offset": len(audit_queues),
            "lag": 10 - len(audit_queues),
        },
        {
            "group": "cg",
            "topic": "Orders",
            "queues": 4,
            "behind": 3,
            "broker_offset": 60,
            "consumer_offset": 60 - behind,
            "lag": behind,
        },
    ]
    assert doc["problems"] == []

    # the tables are made from the same rows
    shown = _console()
    render.print_report(shown, store_dir, _summaries_from(doc), [GroupLag(**g) for g in doc["consumer_lag"]], [])
    text = shown.file.getvalue()
    assert "user-0 (30)" in text and f"{behind:,}" in text and "Orders" in text

    # export: Parquet by topic and day, equal to what was sent
    dest = str(tmp_path / "parquet")
    result = export_job.export(spark, store_dir, dest, None, "overwrite")
    assert result.ok and result.source_rows == result.written_rows == 70
    days = {dt.datetime.fromtimestamp(r.store_timestamp / 1000, dt.UTC).date().isoformat() for r, _, _ in orders}
    assert {d for t, d, _ in result.partitions if t == "Orders"} == days
    assert os.path.isdir(os.path.join(dest, "topic=Orders", f"day={min(days)}"))
    back = export_job.read_export(spark, dest).select("topic", "msg_id", "queue_offset", "body").collect()
    assert sorted((r["topic"], r["msg_id"], r["queue_offset"], bytes(r["body"])) for r in back) == sorted(
        (t, r.msg_id, r.queue_offset, b) for t in sent for r, b, _ in sent[t]
    )

    # appending the same snapshot again: every Audit message twice, found and reported
    out = _console()
    assert export_job.main([store_dir, dest, "--topic", "Audit", "--mode", "append"], spark=spark, console=out) == 1
    assert "MISMATCH: 10 messages read from the store, 20" in out.file.getvalue()
    assert out.file.getvalue().count("more often in the export than in the store: Audit/") == 5
    # overwrite replaces only Audit's partitions: Orders is untouched, Audit whole again
    out = _console()
    assert export_job.main([store_dir, dest, "--topic", "Audit"], spark=spark, console=out) == 0
    assert "verified: 10 messages" in out.file.getvalue()
    assert Counter(r["topic"] for r in export_job.read_export(spark, dest).select("topic").collect()) == {
        "Orders": 60,
        "Audit": 10,
    }


def _summaries_from(doc: dict) -> list:
    """TopicSummary rows back from the JSON document (times at millisecond precision)."""
    from shmq_jobs.summary import TopicSummary

    def ms(iso: str) -> int:
        return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)

    return [
        TopicSummary(
            t["topic"],
            t["messages"],
            t["queues"],
            t["stored_bytes"],
            t["body_bytes"],
            ms(t["first_store_time"]),
            ms(t["last_store_time"]),
            [(x["tag"], x["count"]) for x in t["top_tags"]],
            [(x["key"], x["count"]) for x in t["top_keys"]],
        )
        for t in doc["topics"]
    ]


def test_scan_script_end_to_end(store_dir, broker_name, config, tmp_path) -> None:
    """`python spark/scan.py` in its own JVM: tables on stdout; a wrong path is one line, exit 2."""
    if not os.environ.get("JAVA_HOME") and not any(
        os.access(os.path.join(d, "java"), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep)
    ):
        pytest.skip("no Java runtime (make test installs openjdk-17-jre-headless)")
    with shmq.Broker(store_dir, name=broker_name, config=config):
        p = Producer("pg", broker=broker_name).start()
        try:
            for i in range(5):
                p.send(Message("Script", b"x%d" % i, tags="T1", keys=f"k{i}"))
        finally:
            p.shutdown()
    script = os.path.join(REPO, "spark", "scan.py")
    env = dict(os.environ, COLUMNS="160", SPARK_LOCAL_IP="127.0.0.1")
    bad = subprocess.run(
        [sys.executable, script, str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=60, env=env
    )
    assert bad.returncode == 2 and "is not a shmq store" in bad.stderr and "Traceback" not in bad.stderr
    done = subprocess.run(
        [sys.executable, script, store_dir, "--master", "local[1]"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    row = next(line for line in done.stdout.splitlines() if "Script" in line and "topics of" not in line)
    assert row.split("│")[2].strip() == "5"  # messages
    assert "T1 (5)" in done.stdout and "no consumer group has committed" in done.stdout


def test_stream_job_appends_new_messages_exactly_once_across_runs(
    spark, store_dir, broker_name, config, tmp_path
) -> None:
    """Two runs of stream.py on one checkpoint, the broker sending in between (and during the
    second run's start): OUT holds every message once, partitioned as export.py does."""
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    args = [store_dir, out, "--checkpoint", ckpt, "--available-now", "--max-records", "70"]
    sent: dict[str, bytes] = {}
    with shmq.Broker(store_dir, name=broker_name, config=config):
        p = Producer("pg", broker=broker_name).start()
        try:
            for i in range(120):
                r = p.send(Message("Orders" if i % 3 else "Audit", b"first %d" % i, tags="T"))
                sent[r.msg_id] = b"first %d" % i
            assert stream_job.main(args, spark=spark, console=_console()) == 0
            first = {row.msg_id for row in export_job.read_export(spark, out).select("msg_id").collect()}
            assert first == set(sent)
            for i in range(50):
                r = p.send(Message("Orders", b"second %d" % i))
                sent[r.msg_id] = b"second %d" % i
            console = _console()
            assert stream_job.main(args, spark=spark, console=console) == 0
        finally:
            p.shutdown()
    assert "50 messages written" in console.file.getvalue()
    rows = export_job.read_export(spark, out).select("msg_id", "body", "topic", "day").collect()
    assert sorted(r.msg_id for r in rows) == sorted(sent)  # every message, none twice
    assert {r.msg_id: bytes(r.body) for r in rows} == sent
    assert {r.topic for r in rows} == {"Orders", "Audit"} and len({r.day for r in rows}) >= 1
    assert os.path.isdir(os.path.join(out, "topic=Orders")) and os.path.isdir(os.path.join(out, "_spark_metadata"))


def test_jobs_on_a_store_root(spark, ipc_tracker: IpcTracker, config, tmp_path) -> None:
    """scan.py, export.py and stream.py given a cluster's store root: every broker's store,
    queues counted per broker, a group's lag summed over the brokers, exports holding `broker`."""
    root = str(tmp_path / "root")
    names = [ipc_tracker.name("jr") for _ in range(2)]
    sent: dict[str, tuple[str, bytes]] = {}
    committed = 0
    for name, n in zip(names, (12, 7), strict=True):
        with shmq.Broker(ipc_tracker.store(os.path.join(root, name)), name=name, config=config):
            with Producer("pg", broker=name) as p:
                for i in range(n):
                    r = p.send(Message("Orders", b"%s %d" % (name.encode(), i), tags="T"))
                    sent[r.msg_id] = (name, b"%s %d" % (name.encode(), i))
            c = PullConsumer("cg", broker=name).start()
            try:
                _commit(c, "Orders", {0: 1})
                committed += 1
            finally:
                c.shutdown()
    out = _console()
    assert scan.main([root, "--json"], spark=spark, console=out) == 0
    doc = json.loads(out.file.getvalue())
    assert doc["store"] == root
    assert [(t["topic"], t["messages"], t["queues"]) for t in doc["topics"]] == [("Orders", 19, 8)]  # 4 per broker
    assert doc["consumer_lag"] == [
        {
            "group": "cg",
            "topic": "Orders",
            "queues": 8,
            "behind": 8,
            "broker_offset": 19,
            "consumer_offset": committed,
            "lag": 19 - committed,
        }
    ]

    dest = str(tmp_path / "parquet")
    out = _console()
    assert export_job.main([root, dest], spark=spark, console=out) == 0, out.file.getvalue()
    assert "verified: 19 messages" in out.file.getvalue()
    back = export_job.read_export(spark, dest, with_broker=True).select("msg_id", "broker", "body").collect()
    assert {r.msg_id: (r.broker, bytes(r.body)) for r in back} == sent

    streamed, ckpt = str(tmp_path / "stream"), str(tmp_path / "ckpt")
    args = [root, streamed, "--checkpoint", ckpt, "--available-now"]
    assert stream_job.main(args, spark=spark, console=_console()) == 0
    rows = export_job.read_export(spark, streamed, with_broker=True).select("msg_id", "broker", "body").collect()
    assert {r.msg_id: (r.broker, bytes(r.body)) for r in rows} == sent
