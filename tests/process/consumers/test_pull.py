"""PullConsumer against a real broker: round trip, long polling, illegal offsets, tags, time search, errors."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import shmq
from shmq import Message, Producer, PullConsumer, PullStatus
from shmq.errors import BrokerGoneError, BrokerNotFoundError

from .procs import expect_line, spawn, stop


def _to_queue(qid: int):
    return lambda queues, msg, arg: queues[qid]


def test_pull_round_trip_commit_and_batch(store_dir, broker_name, config):
    with (
        shmq.Broker(store_dir, broker_name, config),
        Producer("pg", broker=broker_name) as p,
        PullConsumer("cg", broker=broker_name) as c,
    ):
        sent = [
            p.send(
                Message("Orders", b"body-%d" % i, tags="TagA", keys=f"k{i} x{i}", properties={"n": str(i)}),
                selector=_to_queue(1),
            )
            for i in range(40)
        ]
        queues = c.fetch_queues("Orders")
        assert [q.queue_id for q in queues] == [0, 1, 2, 3]
        mq = queues[1]
        assert (c.min_offset(mq), c.max_offset(mq)) == (0, 40)
        r = c.pull(mq, "*", offset=0, max_nums=32)
        assert r.status is PullStatus.FOUND and r.next_begin_offset == r.next_offset == 32
        assert (r.min_offset, r.max_offset) == (0, 40)
        m = r.messages[5]
        assert (m.topic, m.body, m.tags, m.keys, m.properties["n"]) == ("Orders", b"body-5", "TagA", "k5 x5", "5")
        assert (m.queue_id, m.queue_offset, m.msg_id) == (1, 5, sent[5].msg_id)
        assert m.commit_log_offset == sent[5].phys_offsets[0] and m.store_timestamp >= m.born_timestamp > 0
        b = c.pull_batch(mq, offset=32, max_nums=100)
        assert b.status is PullStatus.FOUND and len(b.batch) == 8 and b.next_offset == 40
        assert np.array_equal(b.batch.queue_offset, np.arange(32, 40))
        assert bytes(b.batch.body(0)) == b"body-32"
        c.commit(mq, 40)
        assert c.fetch_consume_offset(mq) == 40
        assert c.fetch_consume_offset(queues[2], from_store=True) == -1
    with shmq.Broker(store_dir, broker_name, config), PullConsumer("cg", broker=broker_name) as c:
        assert c.fetch_consume_offset(queues[1]) == 40  # persisted by the broker


def test_long_poll_returns_when_a_message_arrives(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config), PullConsumer("cg", broker=broker_name) as c:
        mq = shmq.MessageQueue("Poll", broker_name, 2)
        t = time.monotonic()
        r = c.pull(mq, offset=0, timeout=0.3)
        assert r.status is PullStatus.NO_NEW_MSG and 0.29 < time.monotonic() - t < 10  # its timeout, not at once
        producer = spawn("produce", broker_name, "Poll", 4, opts={"order_ids": 1})  # all to queue 0
        try:
            t = time.monotonic()
            r = c.pull(shmq.MessageQueue("Poll", broker_name, 0), offset=0, timeout=60.0)
            elapsed = time.monotonic() - t
            expect_line(producer, "sent")
        finally:
            stop(producer)
        assert r.status is PullStatus.FOUND and elapsed < 40  # the producer's start-up, not the 60 s timeout
        # one message while a pull waits: it must end the wait at once
        sender = Producer("pg", broker=broker_name).start()
        timer = threading.Timer(0.2, lambda: sender.send(Message("Poll", b"late"), selector=_to_queue(2)))
        timer.start()
        t = time.monotonic()
        r = c.pull(mq, offset=0, timeout=60.0)
        elapsed = time.monotonic() - t
        timer.join()
        sender.shutdown()
        assert r.status is PullStatus.FOUND and r.messages[0].body == b"late"
        assert 0.19 < elapsed < 20, elapsed  # woken by the message, not by the 60 s timeout


def test_offset_illegal_and_tag_filter(store_dir, broker_name, config):
    with (
        shmq.Broker(store_dir, broker_name, config),
        Producer("pg", broker=broker_name) as p,
        PullConsumer("cg", broker=broker_name) as c,
    ):
        for i in range(30):
            p.send(Message("Tags", b"%d" % i, tags=("TagA", "TagB", "TagC")[i % 3]), selector=_to_queue(0))
        mq = c.fetch_queues("Tags")[0]
        r = c.pull(mq, offset=31)
        assert r.status is PullStatus.OFFSET_ILLEGAL and r.next_begin_offset == 30
        r = c.pull(mq, offset=-5)
        assert r.status is PullStatus.OFFSET_ILLEGAL and r.next_begin_offset == 0
        t = time.monotonic()
        assert c.pull(mq, offset=30, timeout=0.05).status is PullStatus.NO_NEW_MSG
        assert time.monotonic() - t < 10  # its short timeout, never a long poll's
        r = c.pull(mq, "TagA || TagC", offset=0, max_nums=30)
        assert r.status is PullStatus.FOUND and r.next_offset == 30
        assert [m.body for m in r.messages] == [b"%d" % i for i in range(30) if i % 3 != 1]
        assert {m.tags for m in r.messages} == {"TagA", "TagC"}
        r = c.pull(mq, "TagZ", offset=0, max_nums=10)
        assert r.status is PullStatus.NO_MATCHED_MSG and r.next_offset == 10 and r.messages == []
        assert len(c.fetch_queues("NoSuchTopic")) == 0


def test_search_offset_by_time(store_dir, broker_name, config):
    with (
        shmq.Broker(store_dir, broker_name, config),
        Producer("pg", broker=broker_name) as p,
        PullConsumer("cg", broker=broker_name) as c,
    ):
        for _i in range(5):
            p.send(Message("Time", b"early"), selector=_to_queue(0))
        time.sleep(0.05)
        middle = int(time.time() * 1000)
        time.sleep(0.05)
        stamps = [p.send(Message("Time", b"late"), selector=_to_queue(0)).store_timestamp for _ in range(5)]
        mq = c.fetch_queues("Time")[0]
        assert c.search_offset(mq, 0) == 0
        assert c.search_offset(mq, middle) == 5
        assert c.search_offset(mq, stamps[-1] + 1000) == 10
        assert c.pull(mq, offset=c.search_offset(mq, middle)).messages[0].body == b"late"


def test_no_broker_and_dead_broker_fail_clearly(store_dir, broker_name, config):
    t = time.monotonic()
    with pytest.raises(BrokerNotFoundError, match=broker_name):
        PullConsumer("cg", broker=broker_name, start_timeout=0.3).start()
    assert time.monotonic() - t < 10  # its start timeout, not a hang
    push = shmq.PushConsumer("cg", broker=broker_name, start_timeout=0.3)
    push.subscribe("T")
    push.register_listener(lambda msgs, ctx: shmq.ConsumeResult.SUCCESS)
    with pytest.raises(BrokerNotFoundError, match="no broker named"):
        push.start()
    broker = shmq.Broker(store_dir, broker_name, config)
    c = PullConsumer("cg", broker=broker_name, start_timeout=0.3).start()
    mq = shmq.MessageQueue("Dead", broker_name, 0)

    # a pull waiting when the broker dies waits for it to come back until its timeout, then fails clearly
    def pull_until_gone() -> None:
        with pytest.raises(BrokerGoneError):
            c.pull(mq, offset=0, timeout=1.5)

    waiting = threading.Thread(target=pull_until_gone)
    waiting.start()
    time.sleep(0.2)
    t = time.monotonic()
    broker.kill()
    waiting.join(30)
    assert not waiting.is_alive() and time.monotonic() - t < 20
    with pytest.raises(BrokerGoneError, match="did not come back"):
        c.pull(mq, offset=0, timeout=0.2)
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        p.send(Message("Dead", b"after"), selector=_to_queue(0))
        r = c.pull(mq, offset=0, timeout=30.0)  # the same consumer attaches to the new broker by itself
        assert r.status is PullStatus.FOUND and r.messages[0].body == b"after"
        c.shutdown()
