"""The consumer controls given ``namesrv=``: each call on a queue goes to the part of its broker
(real brokers, a route table written by the test)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

import shmq
from shmq import BadArgumentError, ConsumeFrom, ConsumeResult, LitePullConsumer, Message, MessageQueue, PushConsumer
from tests.pulling import poll_until
from tests.waiting import wait_for

from .conftest import Brokers, Routes


def _two_brokers(brokers: Brokers, routes: Routes) -> list[str]:
    """Two brokers with topic T of 2 queues each; 20 messages in every queue, bodies "<broker>:<i>"."""
    bs = [brokers.start(), brokers.start()]
    for b in bs:
        shmq.Admin(b.name).create_topic("T", 2)
        with shmq.Producer("cp", broker=b.name) as p:
            for q in range(2):
                for i in range(20):
                    p.send(Message("T", f"{b.name}:{q}:{i}".encode()), selector=lambda qs, m, a, q=q: qs[q])
    routes.publish(*((b, b.name, 0) for b in bs))
    return [b.name for b in bs]


def _queue_of(m) -> tuple[str, int]:
    """(broker name, queue id) a message of ``_two_brokers`` was sent to (its body says)."""
    broker, queue, _ = m.body.decode().split(":")
    return broker, int(queue)


def test_lite_controls_route_each_queue_to_its_broker(brokers, routes):
    names = _two_brokers(brokers, routes)
    early = LitePullConsumer("cg", namesrv=routes.namesrv)
    with pytest.raises(shmq.ShmqError, match="the consumer before assign"):
        early.assign([MessageQueue("T", names[0], 0)])
    early.shutdown()
    with LitePullConsumer("cg", namesrv=routes.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET) as c:
        assert wait_for(lambda: len(c.fetch_message_queues("T")) == 4, 30)
        mqs = c.fetch_message_queues("T")
        assert mqs == sorted(MessageQueue("T", n, q) for n in names for q in range(2))
        a0, a1, b0, b1 = mqs
        c.assign(mqs)
        assert c.assignment() == set(mqs)
        c.seek(b1, 15)
        c.pause([a0])
        got = poll_until(c, 20 + 20 + 5, timeout=30)
        assert Counter(_queue_of(m) for m in got) == {
            (a1.broker_name, 1): 20,
            (b0.broker_name, 0): 20,
            (b1.broker_name, 1): 5,
        }
        assert [m.queue_offset for m in got if _queue_of(m) == (b1.broker_name, 1)] == list(range(15, 20))
        c.resume([a0])
        rest = poll_until(c, 20, timeout=30)
        assert sorted(m.queue_offset for m in rest) == list(range(20)) and {_queue_of(m) for m in rest} == {
            (names[0], 0)
        }
        c.commit_sync()
        assert [c.committed(mq) for mq in mqs] == [20, 20, 20, 20]
        stamp = rest[0].store_timestamp
        assert c.offset_for_timestamp(a0, stamp) == 0
        assert c.offset_for_timestamp(b0, stamp + 3_600_000) == 20
        c.seek_to_begin(a1)
        assert len(poll_until(c, 20, timeout=30)) == 20
        with pytest.raises(BadArgumentError, match="no broker 'nowhere' in the cluster of name server"):
            c.seek(MessageQueue("T", "nowhere", 0), 0)
        with pytest.raises(BadArgumentError, match=r"does not exist: the topic has queues 0\.\.1"):
            c.committed(MessageQueue("T", names[1], 5))
        with pytest.raises(BadArgumentError, match="does not exist on any broker"):
            c.fetch_message_queues("Nope")
        with pytest.raises(BadArgumentError, match="Subscribe and assign are mutually exclusive"):
            c.subscribe("T")
        with pytest.raises(BadArgumentError, match="does not exist"):  # checked before any broker changes
            c.assign([a0, MessageQueue("T", names[1], 2)])
        assert c.assignment() == set(mqs)


def test_push_suspend_resume_over_two_brokers_loses_nothing_and_duplicates_nothing(brokers, routes):
    names = _two_brokers(brokers, routes)
    got: Counter[str] = Counter()
    lock = threading.Lock()

    def listener(msgs, ctx):
        with lock:
            got.update(m.body.decode() for m in msgs)
        return ConsumeResult.SUCCESS

    push = PushConsumer("sg", namesrv=routes.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
    push.subscribe("T")
    push.register_listener(listener)
    with push:
        assert wait_for(lambda: sum(got.values()) == 80, 30)
        push.suspend()
        queues = push.assigned_queues()
        for n in names:
            with shmq.Producer("cp", broker=n) as p:
                for i in range(20, 120):
                    p.send(Message("T", f"{n}:x:{i}".encode()))
        time.sleep(0.5)
        assert sum(got.values()) == 80  # nothing new while suspended, on either broker
        assert push.assigned_queues() == queues
        push.resume()
        assert wait_for(lambda: sum(got.values()) >= 280, 30)
        time.sleep(0.3)
    assert len(got) == 280 and max(got.values()) == 1, got.most_common(3)


def test_broadcasting_lite_members_each_read_every_broker(brokers, routes, tmp_path):
    _two_brokers(brokers, routes)
    members = [
        LitePullConsumer(
            "bg",
            namesrv=routes.namesrv,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            model=shmq.MessageModel.BROADCASTING,
            offset_store_dir=str(tmp_path / "off"),
            instance_name=f"m{i}",
        )
        for i in range(2)
    ]
    try:
        for c in members:
            c.subscribe("T")
            c.start()
        for c in members:
            got = poll_until(c, 80, timeout=30)
            assert Counter(_queue_of(m) for m in got) == dict.fromkeys({_queue_of(m) for m in got}, 20)
            assert len(got) == 80 and c.poll(0.3) == []
    finally:
        for c in members:
            c.shutdown()
    # offsets are local, one file per broker and instance
    assert len(list((tmp_path / "off").glob("*/m*/bg.json"))) == 4
