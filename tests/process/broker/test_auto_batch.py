"""send_async / send_oneway through the ProduceAccumulator (auto_batch): results, order, delay, errors."""

from __future__ import annotations

import os
import time

import pytest

import shmq
from shmq import Message, Producer, SendStatus
from shmq.errors import BadPropertiesError, BadTopicError, MessageTooLargeError

from .conftest import open_store


def test_async_results_are_per_message_and_in_queue_order(store_dir, broker_name, config):
    with (
        shmq.Broker(store_dir, broker_name, config),
        Producer("pg", broker=broker_name, batch_max_bytes=16 * 1024) as p,
    ):
        futs = [
            p.send_async(Message("Auto", b"m%d" % i, keys=f"key{i}"), selector=lambda qs, m, a: qs[a], arg=2)
            for i in range(1000)
        ]
        results = [f.result(5) for f in futs]
    assert all(r.status is SendStatus.SEND_OK and r.queue.queue_id == 2 and r.count == 1 for r in results)
    assert [r.queue_offset for r in results] == list(range(1000))  # in call order, across several batches
    assert len({r.msg_id for r in results}) == 1000
    store = open_store(store_dir, config)
    try:
        for i in (0, 17, 999):
            rec = store.look_message_by_offset(results[i].phys_offsets[0])
            assert bytes(rec.body) == b"m%d" % i and rec.uniq_key == results[i].msg_id
            assert results[i].offset_msg_id == rec.offset_msg_id
            assert store.query_message("Auto", f"key{i}")[0].body == b"m%d" % i
    finally:
        store.shutdown()


def test_a_lone_message_is_sent_after_the_delay(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name, batch_max_delay=0.02) as p:
        p.send(Message("Auto", b"warm up"))
        t = time.monotonic()
        r = p.send_async(Message("Auto", b"alone")).result(60)
        assert r.status is SendStatus.SEND_OK and time.monotonic() - t < 20  # after the delay, not at shutdown


def test_sync_send_and_shutdown_never_leave_oneway_messages_behind(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name, batch_max_delay=60.0) as p:
        for i in range(300):
            p.send_oneway(Message("Fence", b"%d" % i), selector=lambda qs, m, a: qs[0])
        fence = p.send(Message("Fence", b"fence"), selector=lambda qs, m, a: qs[0])
        assert fence.queue_offset == 300  # every oneway message was stored before it
        for i in range(5):
            p.send_oneway(Message("Fence", b"tail%d" % i), selector=lambda qs, m, a: qs[0])
        # shutdown sent the tail although its delay (a minute) had not passed
    store = open_store(store_dir, config)
    try:
        got = [bytes(m.body) for m in store.get_message("Fence", 0, 0, 1000).messages]
        assert got == [b"%d" % i for i in range(300)] + [b"fence"] + [b"tail%d" % i for i in range(5)]
    finally:
        store.shutdown()


def test_bad_messages_fail_in_the_caller_and_do_not_spoil_the_batch(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        good = [p.send_async(Message("Auto", b"ok%d" % i)) for i in range(10)]
        with pytest.raises(MessageTooLargeError):
            p.send_oneway(Message("Auto", b"x" * (4 * 1024 * 1024 + 1)))
        with pytest.raises(BadTopicError):
            p.send_oneway(Message("bad topic!", b"x"))
        with pytest.raises(TypeError):
            p.send_oneway(Message("Auto", "text"))  # type: ignore[arg-type]
        with pytest.raises(BadPropertiesError):
            p.send_oneway(Message("Auto", b"x", properties={"k": "a\x01b"}))
        bad = p.send_async(Message("Auto", b"x", tags="a\x02b"))
        with pytest.raises(BadPropertiesError):
            bad.result(1)
        assert all(f.result(5).status is SendStatus.SEND_OK for f in good)


def test_delayed_messages_are_not_batched(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        r = p.send_async(Message("Auto", b"later", delay_level=2)).result(5)
    store = open_store(store_dir, config)
    try:
        assert store.look_message_by_offset(r.phys_offsets[0]).properties["DELAY"] == "2"
    finally:
        store.shutdown()


def test_many_topics_each_sent_rarely_are_stored_together_and_in_order(store_dir, broker_name, config):
    """Groups too small to batch go as single SENDs written back to back; the broker stores the
    SENDs of a pass, of all their topics and queues, with one put. Every answer must still
    match its own record, and each queue must keep the call order."""
    # a loaded machine can hold a request past the broker's 200 ms send-queue limit; the busy
    # answer is then retried after later sends of its queue: the order holds without that shedding
    config["waitTimeMillsInSendQueue"] = 60_000
    topics = [f"Many{i}" for i in range(40)]
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name, send_msg_timeout=60.0) as p:
        for t in topics:
            p.send(Message(t, b"create"))
        futs, bad = [], p.send_async(Message("bad topic!", b"x"))
        for i in range(600):
            t = topics[i % len(topics)]
            futs.append(
                (
                    t,
                    i,
                    p.send_async(
                        Message(t, b"%s-%d" % (t.encode(), i), keys=f"k{i}"),
                        selector=lambda qs, m, a: qs[a % len(qs)],
                        arg=i // len(topics),
                    ),
                )
            )
            p.send_oneway(Message(t, b"oneway-%d" % i))
        results = [(t, i, f.result(60)) for t, i, f in futs]
        with pytest.raises(BadTopicError):
            bad.result(5)
    store = open_store(store_dir, config)
    try:
        last: dict[tuple[str, int], int] = {}
        for t, i, r in results:
            assert r.status is SendStatus.SEND_OK and r.queue.topic == t
            rec = store.look_message_by_offset(r.phys_offsets[0])
            assert bytes(rec.body) == b"%s-%d" % (t.encode(), i) and rec.topic == t
            assert (rec.queue_id, rec.queue_offset) == (r.queue.queue_id, r.queue_offset)
            assert r.queue_offset > last.get((t, r.queue.queue_id), -1)  # call order within the queue
            last[(t, r.queue.queue_id)] = r.queue_offset
        assert store.query_message(topics[3], "k43")[0].body == b"%s-43" % topics[3].encode()
        oneway = sum(
            1
            for t in topics
            for q in range(4)
            for m in store.get_message(t, q, 0, 1000).messages
            if bytes(m.body).startswith(b"oneway")
        )
        assert oneway == 600
    finally:
        store.shutdown()


def test_a_refused_topic_fails_only_its_own_messages_in_a_mixed_frame(store_dir, broker_name, config):
    """Small groups of several topics travel in one SEND_MULTI; a topic the broker refuses
    (not writable) fails its own messages with the broker's reason, the others are stored."""
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name, batch_max_delay=60.0) as p:
        for t in ("Open1", "Open2", "Closed"):
            p.send(Message(t, b"create"))
        p._conn.admin("update_topic", {"topic": "Closed", "perm": 4})  # read only (RocketMQ's PERM_READ)
        futs = [
            (t, p.send_async(Message(t, b"%s-%d" % (t.encode(), i))))
            for i in range(3)
            for t in ("Open1", "Closed", "Open2")
        ]
        futs[0][1].result(5)  # waiting sends everything that waits, together
        for t, f in futs:
            if t == "Closed":
                err = f.exception(5)
                assert (
                    isinstance(err, shmq.client.connection.BrokerError)
                    and err.code == 16
                    and "not writable" in str(err)
                )
            else:
                r = f.result(5)
                assert r.status is SendStatus.SEND_OK and r.queue.topic == t


def test_mixed_frames_are_answered_after_the_group_commit_under_sync_flush(store_dir, broker_name, config):
    with (
        shmq.Broker(store_dir, broker_name, dict(config, flushDiskType="SYNC_FLUSH")) as broker,
        Producer("pg", broker=broker_name, batch_max_delay=60.0) as p,
    ):
        futs = [p.send_async(Message(f"Sync{i % 10}", b"%d" % i)) for i in range(30)]
        results = [f.result(10) for f in futs]
        assert all(r.status is SendStatus.SEND_OK for r in results)
        assert len({(r.queue.topic, r.queue.queue_id, r.queue_offset) for r in results}) == 30
    assert "group commit:" in broker.log()


def test_a_max_size_message_goes_through_a_mixed_frame(store_dir, broker_name, config):
    """A SEND_MULTI is transport, not a user batch: each record gets the single-message size
    limit, not the 4 MiB limit of a batch's total."""
    big = os.urandom(4 * 1024 * 1024)  # maxMessageSize exactly; incompressible, so stored as is
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name, batch_max_delay=60.0) as p:
        futs = [p.send_async(Message("Big", big)), p.send_async(Message("Small", b"s"))]
        results = [f.result(10) for f in futs]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    store = open_store(store_dir, config)
    try:
        assert bytes(store.look_message_by_offset(results[0].phys_offsets[0]).body) == big
    finally:
        store.shutdown()
