"""Offsets below a queue's min (its oldest files were cleaned up): OFFSET_ILLEGAL and a resume from the min."""

from __future__ import annotations

import logging
import threading

import shmq
from shmq import ConsumeFrom, ConsumeResult, MessageQueue, PullConsumer, PullStatus, PushConsumer
from shmq.store.message_store import MessageStore
from tests.client.consumer.conftest import SMALL, delete_commitlog_head, put_many
from tests.waiting import wait_for


def _cleaned_store(store_dir: str) -> tuple[int, int]:
    """A store whose queue T/0 lost its head to cleanup; (min offset, max offset) of that queue."""
    store = MessageStore(store_dir, dict(SMALL)).start()
    try:
        put_many(store, "T", 0, 1200, body_size=200)
        delete_commitlog_head(store, 2)
        lo, hi = store.get_min_offset_in_queue("T", 0), store.get_max_offset_in_queue("T", 0)
    finally:
        store.shutdown()
    assert 0 < lo < hi == 1200
    return lo, hi


def test_pull_below_the_min_offset_is_illegal_and_points_at_the_min(store_dir, broker_name):
    lo, hi = _cleaned_store(store_dir)
    with shmq.Broker(store_dir, broker_name, dict(SMALL)), PullConsumer("cg", broker=broker_name) as c:
        shmq.Admin(broker=broker_name).create_topic("T", queues=4)  # written without a broker: no config yet
        mq = MessageQueue("T", broker_name, 0)
        assert (c.min_offset(mq), c.max_offset(mq)) == (lo, hi)
        r = c.pull(mq, offset=0, max_nums=8, timeout=0)
        assert r.status is PullStatus.OFFSET_ILLEGAL and r.next_begin_offset == lo and r.messages == []
        r = c.pull(mq, offset=r.next_begin_offset, max_nums=8, timeout=0)
        assert r.status is PullStatus.FOUND and [m.queue_offset for m in r.messages] == list(range(lo, lo + 8))


def test_push_consumer_below_the_min_resumes_from_the_min(store_dir, broker_name, caplog):
    lo, hi = _cleaned_store(store_dir)
    offsets: list[int] = []
    lock = threading.Lock()

    def listener(msgs, ctx) -> ConsumeResult:
        with lock:
            offsets.extend(m.queue_offset for m in msgs)
        return ConsumeResult.SUCCESS

    with shmq.Broker(store_dir, broker_name, dict(SMALL)):
        shmq.Admin(broker=broker_name).create_topic("T", queues=4)
        with PullConsumer("cg", broker=broker_name) as c:  # the group's offset is from before the cleanup
            c.commit(MessageQueue("T", broker_name, 0), 3)
            assert wait_for(lambda: c.fetch_consume_offset(MessageQueue("T", broker_name, 0), from_store=True) == 3, 30)
        push = PushConsumer("cg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET)
        push.subscribe("T", "*")
        push.register_listener(listener)
        with caplog.at_level(logging.WARNING, logger="shmq.client.consumer.push"), push:
            assert wait_for(lambda: len(offsets) >= hi - lo, 20), len(offsets)
        assert sorted(set(offsets)) == list(range(lo, hi))
        assert "offset 3 of T/0 is illegal" in caplog.text and f"moving to {lo}" in caplog.text
