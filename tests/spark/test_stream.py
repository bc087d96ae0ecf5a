"""Streaming from a store: real broker, real Spark (the shared session), real checkpoint and
Parquet sink. The source is read while the broker writes, a query is stopped mid-way and
restarted from its checkpoint, and the sink must hold every sent message exactly once."""

from __future__ import annotations

import os
import threading
import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

import shmq
from shmq import Message, Producer
from shmq.errors import ConfigError
from shmq.model.system_topics import TRACE_TOPIC
from shmq.spark.stream import ShmqStreamReader, StreamDataLossError, StreamOptions
from shmq.spark.stream_offsets import queue_key
from tests.waiting import wait_for

Sent = dict[str, tuple[str, bytes]]  # msg_id -> (topic, body)


def _send(producer: Producer, topic: str, n: int, tag: str, sent: Sent) -> None:
    for i in range(n):
        body = f"{tag}-{i}".encode() * (1 + i % 3)
        r = producer.send(Message(topic, body, tags=tag, keys=f"k{i}"))
        sent[r.msg_id] = (topic, body)


def _sink_rows(spark, out: str) -> list[tuple[str, str, bytes]]:
    df = spark.read.parquet(out)  # the file sink's log: only committed batches
    return [(r.msg_id, r.topic, bytes(r.body)) for r in df.select("msg_id", "topic", "body").collect()]


def _start(spark, store: str, ckpt: str, out: str, **options: str):
    reader = spark.readStream.format("shmq")
    for k, v in options.items():
        reader = reader.option(k, v)
    return (
        reader.load(store)
        .writeStream.format("parquet")
        .option("checkpointLocation", ckpt)
        .option("path", out)
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def test_stream_restarted_from_its_checkpoint_holds_every_message_once(
    spark, store_dir, broker_name, config, tmp_path
) -> None:
    ckpt, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    sent: Sent = {}
    with shmq.Broker(store_dir, name=broker_name, config=config):
        producer = Producer("pg", broker=broker_name).start()
        try:
            _send(producer, "S", 200, "before", sent)
            # S2 does not exist yet: named in the option, picked up once it appears
            q = _start(spark, store_dir, ckpt, out, topic="S,S2", maxRecordsPerTrigger="150")
            stop = threading.Event()
            errors: list[BaseException] = []

            def produce() -> None:
                try:
                    i = 0
                    while not stop.is_set() and i < 30:
                        _send(producer, "S" if i % 2 else "S2", 20, f"live{i}", sent)
                        i += 1
                        time.sleep(0.05)
                except BaseException as e:  # noqa: BLE001 - surfaced by the assert below
                    errors.append(e)

            t = threading.Thread(target=produce)
            t.start()
            try:
                assert wait_for(lambda: sum(p["numInputRows"] for p in q.recentProgress) >= 150, 60, 0.1)
                q.stop()  # mid-way: the producer is still sending
                before_restart = len(_sink_rows(spark, out))
                q = _start(spark, store_dir, ckpt, out, topic="S,S2", maxRecordsPerTrigger="150")
            finally:
                t.join()
            assert not errors
            try:
                q.processAllAvailable()
                progress = q.recentProgress
            finally:
                q.stop()
        finally:
            producer.shutdown()
    rows = _sink_rows(spark, out)
    assert 0 < before_restart < len(sent)
    assert len(rows) == len(sent) == 800  # no row lost, none written twice
    assert {m: (t, b) for m, t, b in rows} == sent
    assert {t for _, t, _ in rows} == {"S", "S2"}
    assert all(p["numInputRows"] <= 150 for p in progress)


def test_available_now_reads_to_the_end_it_saw_in_rate_limited_batches(
    spark, store_dir, broker_name, config, tmp_path
) -> None:
    sent: Sent = {}
    with shmq.Broker(store_dir, name=broker_name, config=config):
        producer = Producer("pg", broker=broker_name).start()
        try:
            _send(producer, "A", 250, "a", sent)
            _send(producer, "B", 120, "b", sent)
            _send(producer, TRACE_TOPIC, 5, "trace", {})  # a system topic: not streamed unless named
        finally:
            producer.shutdown()
    out = str(tmp_path / "out")
    q = (
        spark.readStream.format("shmq")
        .option("maxRecordsPerTrigger", "100")
        .load(store_dir)
        .writeStream.format("parquet")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .option("path", out)
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120)
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes == [100, 100, 100, 70]
    assert {m: (t, b) for m, t, b in _sink_rows(spark, out)} == sent


def _reader(store: str, **options: str) -> ShmqStreamReader:
    return ShmqStreamReader(StreamOptions({"path": store, **options}))


def test_cleanup_past_the_checkpoint_fails_clearly_or_skips_when_asked(store_dir, broker_name, config) -> None:
    """No Spark needed: the planning methods are plain calls on a store whose oldest commitlog
    segment cleanup deleted (every hour is a delete hour, nothing is kept)."""
    config.update(
        fileReservedTime=0,
        deleteWhen=";".join(f"{h:02d}" for h in range(24)),
        cleanResourceInterval=200,
        defaultTopicQueueNums=1,
    )
    with shmq.Broker(store_dir, name=broker_name, config=config):
        producer = Producer("pg", broker=broker_name).start()
        try:
            for i in range(1200):  # 4 KiB each: past the 4 MiB first commitlog segment
                producer.send(Message("L", bytes([i % 256]) * 4096))
        finally:
            producer.shutdown()
        first = os.path.join(store_dir, "commitlog", "0" * 20)
        assert wait_for(lambda: not os.path.exists(first), 20, 0.05)
    key = queue_key("L", 0)
    reader = _reader(store_dir)
    head = reader.initialOffset()[key]
    assert 0 < head < 1200
    end = reader.latestOffset({key: 0}, reader.getDefaultReadLimit())
    assert end == {key: 1200}
    with pytest.raises(StreamDataLossError, match=f"L/0: queue offsets 0..{head - 1} "):
        reader.partitions({key: 0}, end)
    parts = _reader(store_dir, failOnDataLoss="false").partitions({key: 0}, end)
    assert parts[0].slice.start == head
    assert sum(p.slice.end - p.slice.start for p in parts) == 1200 - head


def test_options_starting_latest_and_bad_values(store_dir, broker_name, config) -> None:
    with shmq.Broker(store_dir, name=broker_name, config=config):
        producer = Producer("pg", broker=broker_name).start()
        try:
            _send(producer, "T", 8, "t", {})
        finally:
            producer.shutdown()
    earliest = _reader(store_dir, topic="T").initialOffset()
    latest = _reader(store_dir, topic="T", startingOffsets="LATEST").initialOffset()
    assert sum(earliest.values()) == 0 and sum(latest.values()) == 8
    assert list(latest) == sorted(latest) == [queue_key("T", q) for q in range(4)]
    assert _reader(store_dir, topic="T", startingOffsets="latest").latestOffset(latest, ReadAllAvailable()) == latest
    for bad in ({"startingOffsets": "now"}, {"maxRecordsPerTrigger": "0"}, {"failOnDataLoss": "maybe"}):
        with pytest.raises(ConfigError):
            _reader(store_dir, **bad)
