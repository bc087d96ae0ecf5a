"""LitePullConsumer against a real broker: poll order and once-only delivery, auto commit and
commit(), seek, rebalance with members joining and dying, poll's timeout."""

from __future__ import annotations

import signal
import time
from collections import defaultdict

import pytest

import shmq
from shmq import BadArgumentError, ConsumeFrom, LitePullConsumer, Message, MessageQueue, Producer
from tests.pulling import poll_until as _drain
from tests.waiting import wait_for

from .procs import expect_line, received, spawn, stop


def _send(broker: str, topic: str, start: int, count: int) -> None:
    with Producer("lp-producer", broker=broker) as p:
        for i in range(start, start + count):
            p.send(Message(topic, b"%d" % i))


def _consumer(broker: str, group: str, **kw) -> LitePullConsumer:
    c = LitePullConsumer(group, broker=broker, consume_from=ConsumeFrom.FIRST_OFFSET, **kw).start()
    c.subscribe("T", "*")
    assert wait_for(lambda: len(c.assignment()) == 4, 30), c.assignment()
    return c


def test_poll_gets_every_message_once_in_queue_order(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, "T", 0, 400)
        with _consumer(broker_name, "lg") as c:
            got = _drain(c, 400)
            assert c.poll(0.1) == []  # nothing more: no duplicate
    bodies = [int(m.body) for m in got]
    assert sorted(bodies) == list(range(400))
    per_queue = defaultdict(list)
    for m in got:
        per_queue[m.queue_id].append(m.queue_offset)
    assert all(
        offs == sorted(offs) and offs == list(range(offs[0], offs[0] + len(offs))) for offs in per_queue.values()
    ), per_queue


def test_poll_returns_at_most_pull_batch_size(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, "T", 0, 100)
        with _consumer(broker_name, "lg", pull_batch_size=7) as c:
            sizes = []
            while sum(sizes) < 100:
                sizes.append(len(c.poll(2.0)))
                assert sizes[-1]
    assert sum(sizes) == 100 and max(sizes) == 7, sizes


def test_poll_times_out_with_nothing_sent(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, "T", 0, 1)
        with _consumer(broker_name, "lg") as c:
            assert len(_drain(c, 1)) == 1
            t0 = time.monotonic()
            assert c.poll(0.3) == []
            assert 0.28 <= time.monotonic() - t0 < 10  # its timeout, not at once
            _send(broker_name, "T", 1, 1)  # and a message that comes ends a waiting poll at once
            t0 = time.monotonic()
            assert [m.body for m in c.poll(60.0)] == [b"1"]
            assert time.monotonic() - t0 < 20  # woken by the message, not by the 60 s timeout


def test_auto_commit_at_shutdown_and_a_new_consumer_resumes(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, "T", 0, 100)
        with _consumer(broker_name, "lg", pull_batch_size=30) as c:
            first = _drain(c, 30)
            assert len(first) == 30
        with _consumer(broker_name, "lg") as c:
            rest = _drain(c, 70)
            assert c.poll(0.1) == []
    assert sorted(int(m.body) for m in first + rest) == list(range(100))


def test_auto_commit_interval_commits_while_running(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, "T", 0, 40)
        with (
            _consumer(broker_name, "lg", auto_commit_interval=0.05) as c,
            shmq.PullConsumer("lg", broker=broker_name) as reader,
        ):
            assert len(_drain(c, 40)) == 40
            queues = sorted(c.assignment())
            assert wait_for(lambda: sum(reader.fetch_consume_offset(q) for q in queues) == 40, 30)


def test_manual_commit_only_what_commit_covered(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, "T", 0, 100)
        with _consumer(broker_name, "lg", auto_commit=False, pull_batch_size=40) as c:
            committed = _drain(c, 40)
            c.commit()
            uncommitted = _drain(c, 20)
            assert len(committed) == 40 and uncommitted
        with _consumer(broker_name, "lg", auto_commit=False) as c:
            again = _drain(c, 60)
    assert {int(m.body) for m in committed}.isdisjoint(int(m.body) for m in again)
    assert {int(m.body) for m in uncommitted} <= {int(m.body) for m in again}
    assert sorted(int(m.body) for m in committed + again) == list(range(100))


def test_seek_rereads_and_skips(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        with Producer("lp-producer", broker=broker_name) as p:
            for i in range(20):
                p.send(Message("T", b"%d" % i), selector=lambda queues, msg, arg: queues[0])
        with _consumer(broker_name, "lg") as c:
            mq = MessageQueue("T", broker_name, 0)
            assert [m.queue_offset for m in _drain(c, 20)] == list(range(20))
            c.seek(mq, 5)
            assert [m.queue_offset for m in _drain(c, 15)] == list(range(5, 20))
            c.seek(mq, 18)
            assert [int(m.body) for m in _drain(c, 2)] == [18, 19]
            with pytest.raises(BadArgumentError):
                c.seek(MessageQueue("Other", broker_name, 0), 0)


def test_members_split_queues_and_a_dead_members_queues_move_within_a_second(store_dir, broker_name, config, tmp_path):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, "T", 0, 4)  # the topic with its 4 queues
        with _consumer(broker_name, "lg") as c:
            assert len(_drain(c, 4)) == 4  # polled, so committed when two queues are handed over
            other = spawn("lite", broker_name, "lg", str(tmp_path / "other"))
            try:
                expect_line(other, "ready")
                assert wait_for(lambda: len(c.assignment()) == 2, 30), c.assignment()
                _send(broker_name, "T", 4, 200)
                mine = _drain(c, 100, 5)
                assert wait_for(lambda: len(received(str(tmp_path / "other"))) == 100, 30)
                theirs = [int(b) for b, _, _ in received(str(tmp_path / "other"))]
                assert sorted([int(m.body) for m in mine] + theirs) == list(range(4, 204))
                assert {m.queue_id for m in mine} == {mq.queue_id for mq in c.assignment()}
                other.send_signal(signal.SIGKILL)
                other.wait(5)
                assert wait_for(lambda: len(c.assignment()) == 4, 30)
            finally:
                stop(other)


def test_subscribe_filters_by_tags_sql_and_predicate(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        with Producer("lp-producer", broker=broker_name) as p:
            for i in range(40):
                p.send(Message("T", b"%d" % i, tags="A" if i % 2 else "B", properties={"n": str(i)}))
        with _consumer(broker_name, "tags") as c:
            c.subscribe("T", "A")
            assert sorted(int(m.body) for m in _drain(c, 20)) == list(range(1, 40, 2))
        with _consumer(broker_name, "pred") as c:
            c.subscribe("T", lambda m: int(m.body) < 5)
            assert sorted(int(m.body) for m in _drain(c, 5)) == list(range(5))
            assert c.poll(0.1) == []
        with _consumer(broker_name, "sql") as c:
            c.subscribe("T", shmq.sql("n >= 35"))
            assert sorted(int(m.body) for m in _drain(c, 5)) == list(range(35, 40))
            assert c.poll(0.1) == []
