"""Message trace: records of a send and its consumes found by message id; a full buffer drops, never blocks."""

from __future__ import annotations

import time

import shmq
from shmq import Admin, ConsumeFrom, ConsumeResult, Message, MessageBatch, Producer, PushConsumer
from shmq.model.system_topics import TRACE_TOPIC
from tests.waiting import wait_for


def _consume(broker: str, group: str, topic: str, n: int, trace: bool | str = True, fail_first: bool = False):
    seen: list = []

    def listener(msgs, ctx):
        seen.extend(msgs)
        if fail_first and len(seen) == 1:
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    c = PushConsumer(group, broker=broker, consume_from=ConsumeFrom.FIRST_OFFSET, trace=trace)
    c.subscribe(topic, "*")
    c.register_listener(listener)
    with c:
        assert wait_for(lambda: len(seen) >= n, 10)
        assert c.tracer is not None and c.tracer.flush(5)
    return seen


def test_trace_of_a_send_and_its_consume(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        with Producer("pg", broker=broker_name, trace=True) as p:
            r = p.send(Message("Orders", b"body!", tags="TagA", keys="k1 k2"))
            assert p.tracer is not None and p.tracer.flush(5) and p.tracer.sent == 1
        seen = _consume(broker_name, "cg", "Orders", 2, fail_first=True)  # delivered twice: failed, then consumed
        admin = Admin(broker=broker_name)
        assert wait_for(lambda: len(admin.view_trace(r.msg_id)) == 5, 30)
        records = admin.view_trace(r.msg_id)
        assert [t.type for t in records] == ["Pub", "SubBefore", "SubAfter", "SubBefore", "SubAfter"]
        pub = records[0]
        assert (pub.group, pub.topic, pub.msg_id, pub.tags, pub.keys, pub.status, pub.success) == (
            "pg",
            "Orders",
            r.msg_id,
            "TagA",
            "k1 k2",
            "SEND_OK",
            True,
        )
        assert (pub.offset_msg_id, pub.queue_id, pub.queue_offset, pub.store_time, pub.body_length) == (
            r.offset_msg_id,
            r.queue.queue_id,
            r.queue_offset,
            r.store_timestamp,
            5,
        )
        assert pub.cost_ms is not None and pub.cost_ms >= 0 and pub.client_host and pub.client_pid > 0
        before, after = records[1], records[2]
        assert (before.group, before.topic, before.reconsume_times, before.store_time) == (
            "cg",
            "Orders",
            0,
            r.store_timestamp,
        )
        assert before.request_id == after.request_id and records[3].request_id != before.request_id
        assert (after.status, after.success, after.batch) == ("RECONSUME_LATER", False, 1)
        assert (records[4].status, records[4].success, records[3].reconsume_times) == ("SUCCESS", True, 1)
        assert seen[0].msg_id == r.msg_id
        assert admin.view_trace("0" * 32) == []  # an id nothing traced


def test_trace_to_a_chosen_topic_and_of_batches(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        with Producer("pg", broker=broker_name, trace="MyTrace") as p:
            rb = p.send_batch(MessageBatch("B", [b"a", b"bb", b"ccc"], tags="T", keys=["x", None, "z"]))
            assert p.tracer is not None and p.tracer.flush(5)
        admin = Admin(broker=broker_name)
        ids = rb.msg_id.split(",")
        assert admin.view_trace(ids[0]) == []  # not in the system trace topic
        third = admin.view_trace(ids[2], topic="MyTrace")
        assert [(t.type, t.keys, t.body_length, t.queue_offset, t.batch) for t in third] == [
            ("Pub", "z", 3, rb.queue_offset + 2, 3)
        ]
        assert admin.topics()["MyTrace"].system is False


def test_garbage_in_the_trace_topic_is_ignored(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        with Producer("pg", broker=broker_name, trace=True) as p:
            r = p.send(Message("G", b"x"))
            assert p.tracer is not None and p.tracer.flush(5)
            # any client may write the trace topic: lines that are not records are skipped
            bad = f'not json {r.msg_id}\n{{"type": "Pub", "msg_id": "{r.msg_id}", "timestamp": "x"}}\n[1, 2]\n'
            p.send(Message(TRACE_TOPIC, bad.encode(), keys=r.msg_id))
        records = Admin(broker=broker_name).view_trace(r.msg_id)
        assert [t.type for t in records] == ["Pub"]


def test_a_full_trace_buffer_drops_and_counts_without_blocking(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        p = Producer("pg", broker=broker_name, trace=True)
        tracer = p.tracer
        assert tracer is not None
        tracer.buffer_size = 4
        with p:
            with tracer._lock:  # its thread is stuck (as behind a broker slow to take trace messages)
                t0 = time.monotonic()
                results = [p.send(Message("D", b"%d" % i)) for i in range(50)]
                assert time.monotonic() - t0 < 30  # no send waits for the stuck trace thread
                assert tracer.dropped == 46 and tracer.pending == 4
            assert tracer.flush(5) and tracer.sent == 4
        admin = Admin(broker=broker_name)
        assert [len(admin.view_trace(r.msg_id)) for r in results[:5]] == [1, 1, 1, 1, 0]
