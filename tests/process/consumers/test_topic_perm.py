"""Topic perms through shmq.Admin, enforced on the consumer side (consumers read the files directly)."""

from __future__ import annotations

import logging
import threading

import pytest

import shmq
from shmq import Admin, ConsumeFrom, ConsumeResult, PullConsumer, PushConsumer
from tests.waiting import wait_for

from .procs import spawn, stop


def test_admin_topic_api(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        admin = Admin(broker=broker_name)
        t = admin.create_topic("Eight", queues=8, perm=6)
        assert (t.name, t.queues, t.read_queue_nums, t.write_queue_nums, t.perm) == ("Eight", 8, 8, 8, 6)
        assert admin.topics()["Eight"] == t
        t = admin.update_topic("Eight", write_queue_nums=4, perm=4)
        assert (t.read_queue_nums, t.write_queue_nums, t.perm, t.readable, t.writable) == (8, 4, 4, True, False)
        with shmq.PullConsumer("cg", broker=broker_name) as c:
            assert len(c.fetch_queues("Eight")) == 8
        with pytest.raises(shmq.BrokerError, match="perm"):
            admin.update_topic("Eight", perm=9)
        with pytest.raises(shmq.BrokerError, match="bad topic"):
            admin.create_topic("bad topic")
        assert admin.delete_topic("Eight") and not admin.delete_topic("Eight")
        assert "Eight" not in admin.topics()
    with pytest.raises(shmq.BrokerNotFoundError):
        Admin(broker=broker_name).topics()


def test_write_only_topic_is_not_readable_until_its_perm_allows(store_dir, broker_name, config, caplog):
    """Regression (issue 9 A4): consumers read a topic whose perm (2: write only) forbids reading."""
    got: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs, ctx) -> ConsumeResult:
        with lock:
            got.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    with shmq.Broker(store_dir, broker_name, config):
        admin = Admin(broker=broker_name)
        admin.create_topic("WriteOnly", queues=2, perm=2)
        producer = spawn("produce", broker_name, "WriteOnly", 10)  # another process sends
        try:
            assert producer.stdout.readline().strip() == "sent" and producer.wait(20) == 0
        finally:
            stop(producer)
        push = PushConsumer("pushg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET)
        push.subscribe("WriteOnly", "*")
        push.register_listener(listener)
        with (
            caplog.at_level(logging.WARNING, logger="shmq.client.consumer.push"),
            push,
            PullConsumer("pullg", broker=broker_name) as pull,
        ):
            mqs = pull.fetch_queues("WriteOnly")
            assert len(mqs) == 2 and sum(pull.max_offset(mq) for mq in mqs) == 10  # stored, just not readable
            with pytest.raises(shmq.TopicNotReadableError, match="not readable"):
                pull.pull(mqs[0], offset=0, timeout=0)
            assert wait_for(lambda: "not readable" in caplog.text, 30)
            assert push.assigned_queues() == [] and got == []

            admin.update_topic("WriteOnly", perm=6)
            found = sum(len(pull.pull(mq, offset=0, max_nums=32, timeout=0).messages) for mq in mqs)
            assert found == 10
            assert wait_for(lambda: len(got) == 10, 10), len(got)
            assert len(push.assigned_queues()) == 2
