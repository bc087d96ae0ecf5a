"""What a user sees printing results: one short line per object, never a body in full, the
columns of a pulled batch or the commitlog mappings it holds (100+ MB: numpy's preview of
them, with every other field, filled a terminal)."""

from __future__ import annotations

import shmq
from shmq import MessageBatch, MessageQueue, Producer, PullConsumer, PullStatus

BODY = b"0123456789" * 100  # 1,000 bytes
SHORT = 300  # characters: one terminal line or two


def _queue0(queues: list[MessageQueue], msg: object, arg: object) -> MessageQueue:
    return queues[0]


def test_results_of_a_big_batch_print_short(store_dir, broker_name, config) -> None:
    batch = MessageBatch("Big", [BODY] * 2000, tags="T", keys=[f"k{i}" for i in range(2000)])
    assert (
        repr(batch) == "MessageBatch(topic='Big', messages=2000, bytes=2000000, tags='T', "
        "keys=['k0', 'k1', 'k2', …] (2000 keys))"
    )
    with (
        shmq.Broker(store_dir, broker_name, config) as broker,
        Producer("pg", broker=broker_name) as p,
        PullConsumer("cg", broker=broker_name) as c,
    ):
        assert repr(broker) == f"Broker(name={broker_name!r}, store_dir={store_dir!r}, pid={broker.pid}, state=running)"
        assert repr(p) == f"Producer(group='pg', broker={broker_name!r}, state=running)"
        assert repr(c) == f"PullConsumer(group='cg', broker={broker_name!r}, state=running)"
        sent = p.send_batch(batch, selector=_queue0)
        ids = sent.msg_id.split(",")
        assert repr(sent) == (
            f"SendResult(status=SEND_OK, count=2000, msg_id=[{ids[0]!r}, {ids[1]!r}, {ids[2]!r}, "
            f"…] (2000 ids), queue={sent.queue!r}, queue_offset=0..1999)"
        )
        mq = sent.queue
        pulled = c.pull_batch(mq, offset=0, max_nums=2000)
        assert pulled.status is PullStatus.FOUND and len(pulled.batch) == 2000
        stored = int(pulled.batch.size.sum())
        assert stored > 2000 * len(BODY)
        text = repr(pulled)
        assert len(text) < SHORT and "array" not in text and "0123456789" not in text, text
        assert text == (
            f"PullResult(status=FOUND, topic='Big', queue_id=0, messages=2000, queue_offset=0..1999, "
            f"bytes={stored}, next_begin_offset=2000, min_offset=0, max_offset=2000)"
        )
        assert repr(pulled.batch) == (
            f"PulledBatch(topic='Big', queue_id=0, messages=2000, queue_offset=0..1999, "
            f"bytes={stored}, next_offset=2000)"
        )
        one = c.pull(mq, offset=1999, max_nums=1)
        assert repr(one).startswith(
            "PullResult(status=FOUND, topic='Big', queue_id=0, messages=1, queue_offset=1999, bytes="
        )
        m = one.messages[0]
        assert repr(m) == (
            f"MessageExt(topic='Big', queue_id=0, queue_offset=1999, msg_id={m.msg_id!r}, "
            f"tags='T', keys='k1999', body={BODY[:60]!r}… (1000 bytes))"
        )
        empty = c.pull(mq, offset=2000, max_nums=1, timeout=0.01)
        assert repr(empty) == ("PullResult(status=NO_NEW_MSG, next_begin_offset=2000, min_offset=0, max_offset=2000)")
    assert repr(p) == f"Producer(group='pg', broker={broker_name!r}, state=stopped)"
    assert repr(broker) == f"Broker(name={broker_name!r}, store_dir={store_dir!r}, pid={broker.pid}, state=exited 0)"
