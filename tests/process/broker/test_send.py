"""Producer -> broker -> store round trips, checked by reading the store files after the broker stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import zlib

import pytest

import shmq
from shmq import Message, Producer, SendStatus
from shmq.client.producer.producer import SelectMessageQueueByHash, split_batch
from shmq.codec import record as fmt
from shmq.errors import BadTopicError, BrokerBusyError, BrokerNotFoundError, MessageTooLargeError
from tests.waiting import wait_for

from .conftest import open_store


def _check(store, result, body: bytes, tags: str | None = None) -> None:
    rec = store.look_message_by_offset(result.phys_offsets[0])
    assert bytes(rec.body) == body
    assert rec.queue_id == result.queue.queue_id and rec.queue_offset == result.queue_offset
    assert rec.uniq_key == result.msg_id and rec.tags == tags
    assert rec.offset_msg_id == result.offset_msg_id  # made on first use from store host + offset
    got = store.get_message(result.queue.topic, result.queue.queue_id, result.queue_offset, 1)
    assert bytes(got.messages[0].body) == body


def test_sync_async_oneway_batch_round_trip(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        sync = [
            (
                p.send(Message("Orders", b"sync%d" % i, tags="TagA", keys=f"k{i} kk", properties={"a": str(i)})),
                b"sync%d" % i,
            )
            for i in range(50)
        ]
        called = []
        done = threading.Event()

        def cb(r):
            called.append(r)
            if len(called) == 200:
                done.set()

        futs = [(p.send_async(Message("Orders", b"async%d" % i), callback=cb), b"async%d" % i) for i in range(200)]
        for i in range(100):
            p.send_oneway(Message("Oneway", b"oneway%d" % i))
        batch = p.send_batch([Message("Orders", b"batch%d" % i, tags="B") for i in range(64)])
        async_results = [(f.result(5), body) for f, body in futs]
        assert done.wait(5) and all(isinstance(r, shmq.SendResult) for r in called)
        last = p.send(Message("Oneway", b"fence"))  # the oneway sends were stored before it
    assert all(r.status is SendStatus.SEND_OK for r, _ in sync + async_results) and batch.count == 64
    store = open_store(store_dir, config)
    try:
        for r, body in sync:
            _check(store, r, body, "TagA")
            assert store.query_message("Orders", r.msg_id)[0].properties["a"] == body[4:].decode()
        for r, body in async_results:
            _check(store, r, body)
        assert store.query_message("Orders", "k7")[0].body == b"sync7"
        offset_ids = batch.offset_msg_id.split(",")
        for i, (phys, uniq) in enumerate(zip(batch.phys_offsets, batch.msg_id.split(","))):
            rec = store.look_message_by_offset(phys)
            assert bytes(rec.body) == b"batch%d" % i and rec.uniq_key == uniq
            assert rec.offset_msg_id == offset_ids[i]
            assert rec.queue_offset == batch.queue_offset + i and rec.tags == "B"
        oneway = set()
        for qid in range(4):
            res = store.get_message("Oneway", qid, 0, 1000)
            oneway.update(bytes(m.body) for m in res.messages)
        assert oneway == {b"oneway%d" % i for i in range(100)} | {b"fence"}
        assert last.status is SendStatus.SEND_OK
    finally:
        store.shutdown()


def test_compressed_body_and_delay_property(store_dir, broker_name, config):
    body = b"compress me " * 1000
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        r = p.send(Message("Big", body, delay_level=3))
    store = open_store(store_dir, config)
    try:
        rec = store.look_message_by_offset(r.phys_offsets[0])
        assert rec.sysflag & fmt.FLAG_COMPRESSED and len(rec.body) < len(body)
        assert zlib.decompress(rec.body) == body and rec.properties["DELAY"] == "3"
    finally:
        store.shutdown()


def test_hash_selector_keeps_order_in_one_queue(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        queues = p.fetch_publish_queues("Ordered")
        assert [q.queue_id for q in queues] == [0, 1, 2, 3]
        results = [
            p.send(Message("Ordered", b"%d" % i), selector=SelectMessageQueueByHash(), arg="order-42")
            for i in range(100)
        ]
        custom = p.send(Message("Ordered", b"c"), selector=lambda qs, m, arg: qs[arg % len(qs)], arg=7)
    assert len({r.queue.queue_id for r in results}) == 1
    assert [r.queue_offset for r in results] == list(range(results[0].queue_offset, results[0].queue_offset + 100))
    assert custom.queue.queue_id == 3
    store = open_store(store_dir, config)
    try:
        qid = results[0].queue.queue_id
        got = store.get_message("Ordered", qid, 0, 200).messages
        assert [bytes(m.body) for m in got if m.body != b"c"] == [b"%d" % i for i in range(100)]
    finally:
        store.shutdown()


def test_bad_input_raises_and_broker_keeps_serving(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        with pytest.raises(MessageTooLargeError):
            p.send(Message("T", b"x" * (4 * 1024 * 1024 + 1)))
        with pytest.raises(BadTopicError):
            p.send(Message("bad topic!", b"x"))
        with pytest.raises(BadTopicError):
            p.send(Message("", b"x"))
        with pytest.raises(BadTopicError):
            p.send(Message("t" * 128, b"x"))
        with pytest.raises(TypeError):
            p.send(Message("T", "not bytes"))  # type: ignore[arg-type]
        megs = [Message("T", os.urandom(1024 * 1024)) for _ in range(5)]  # incompressible
        with pytest.raises(MessageTooLargeError):
            p.send_batch(megs)
        parts = split_batch(megs)
        assert [len(b) for b in parts] == [3, 2]
        assert [p.send_batch(b).count for b in parts] == [3, 2]
        big = p.send(Message("T", os.urandom(4 * 1024 * 1024)))
        assert big.status is SendStatus.SEND_OK
        assert p.send(Message("T", b"still fine")).status is SendStatus.SEND_OK


def test_busy_broker_rejects_after_retries(store_dir, broker_name, config):
    config["waitTimeMillsInSendQueue"] = 0  # every request has waited "too long"
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name, send_msg_timeout=60.0) as p:
        t = time.monotonic()
        with pytest.raises(BrokerBusyError, match="TIMEOUT_CLEAN_QUEUE"):
            p.send(Message("T", b"x"))
        assert time.monotonic() - t < 20  # after its few retries, not at the 60 s send timeout


def test_no_broker_fails_fast(broker_name):
    p = Producer("pg", broker=broker_name, start_timeout=0.5)
    t = time.monotonic()
    with pytest.raises(BrokerNotFoundError, match="shmq broker"):
        p.start()
    assert time.monotonic() - t < 10  # its 0.5 s start timeout, not a hang


def test_broker_name_from_environment(store_dir, broker_name, config, monkeypatch):
    monkeypatch.setenv("SHMQ_BROKER", broker_name)
    with shmq.Broker(store_dir, broker_name, config), Producer("pg") as p:
        assert p.broker_name == broker_name and p.send(Message("T", b"x")).status is SendStatus.SEND_OK


def test_shmq_broker_command_takes_its_name_from_environment(store_dir, broker_name, tmp_path):
    """`shmq broker --store DIR` without --name serves under $SHMQ_BROKER, where clients look."""
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=4194304\n")
    env = dict(os.environ, SHMQ_BROKER=broker_name)
    proc = subprocess.Popen(
        [sys.executable, "-m", "shmq", "broker", "--store", store_dir, "--config", str(conf)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: f"shmq.{broker_name}.state" in os.listdir("/dev/shm") or proc.poll() is not None, 30)
        assert proc.poll() is None, proc.stderr.read()
        with Producer("pg", broker=broker_name, start_timeout=30) as p:
            assert p.send(Message("T", b"x")).status is SendStatus.SEND_OK
    finally:  # SIGTERM also when the test failed: a broker under another name removes its own objects
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read()


def test_a_broker_given_no_name_serves_under_the_environment_name(store_dir, broker_name, config, monkeypatch):
    """shmq.Broker(DIR) with $SHMQ_BROKER set serves where its clients look: the same rule."""
    monkeypatch.setenv("SHMQ_BROKER", broker_name)
    with shmq.Broker(store_dir, config=config) as b, Producer("pg") as p:
        assert b.name == broker_name and p.send(Message("T", b"x")).status is SendStatus.SEND_OK


def test_sync_callers_reading_answers_leave_none_behind(store_dir, broker_name, config):
    """Sync senders read the response ring themselves (``BrokerConnection.poll``) while async
    sends of other threads are answered on the same ring: every answer reaches its own
    future, including those that arrive just as a sync caller stops reading."""
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name, auto_batch=False) as p:
        sync: list = []
        futures: list = []

        def sync_sender(t: int) -> None:
            sync.extend(p.send(Message("Mixed", b"s%d-%d" % (t, i))) for i in range(300))

        def async_sender() -> None:
            for i in range(1000):
                futures.append(p.send_async(Message("Mixed", b"a%d" % i)))
                if i % 50 == 0:
                    time.sleep(0.001)  # answers arrive while no sync caller reads, too

        threads = [threading.Thread(target=sync_sender, args=(t,)) for t in range(3)]
        threads.append(threading.Thread(target=async_sender))
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        results = sync + [f.result(5) for f in futures]
    assert len(results) == 1900 and all(r.status is SendStatus.SEND_OK for r in results)
    assert len({(r.queue.queue_id, r.queue_offset) for r in results}) == 1900
    assert len({r.msg_id for r in results}) == 1900


def test_a_failing_periodic_check_does_not_kill_the_producers_reader(store_dir, broker_name, config, caplog):
    """Regression: the producer's expiry check raised (a dict changed size under it while another
    thread sent) and took the reader thread down: every later send waited forever."""
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        conn = p._conn
        original, failed = conn.on_tick, threading.Event()

        def flaky(now: float) -> None:
            if not failed.is_set():
                failed.set()
                raise RuntimeError("dictionary changed size during iteration")
            assert original is not None
            original(now)

        conn.on_tick = flaky
        p.send(Message("T", b"wake the reader"))
        assert failed.wait(2)
        time.sleep(0.2)  # a few more checks
        assert p.send(Message("T", b"after"), timeout=2).status is SendStatus.SEND_OK
        assert p.send_async(Message("T", b"async")).result(2).status is SendStatus.SEND_OK
    assert "periodic check failed" in caplog.text
