"""The consumer controls against a real broker: LitePullConsumer's assign, seek, pause/resume,
commit_sync, committed, offset_for_timestamp and broadcasting; PushConsumer's suspend/resume
under load; and the one-line errors for queues that are not there or not owned."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

import shmq
from shmq import (
    ArgumentTypeError,
    BadArgumentError,
    ConsumeFrom,
    ConsumeResult,
    LitePullConsumer,
    Message,
    MessageModel,
    MessageQueue,
    Producer,
)
from tests.pulling import poll_until
from tests.waiting import wait_for


def _drain(c: LitePullConsumer, want: int, timeout: float = 30.0) -> list:
    return poll_until(c, want, timeout)


def _send(broker: str, queue_id: int, start: int, count: int, topic: str = "T") -> None:
    """``count`` messages with bodies ``start``.. into one queue (the topic has 4)."""
    with Producer("ctl-producer", broker=broker) as p:
        for i in range(start, start + count):
            p.send(Message(topic, b"%d" % i), selector=lambda queues, msg, arg: queues[queue_id])


def _lite(broker: str, group: str = "cg", **kw) -> LitePullConsumer:
    return LitePullConsumer(group, broker=broker, consume_from=ConsumeFrom.FIRST_OFFSET, **kw).start()


def _offsets(msgs: list, queue_id: int) -> list[int]:
    return [m.queue_offset for m in msgs if m.queue_id == queue_id]


def test_assign_and_seek_read_exactly_from_the_offset(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 0, 0, 30)
        _send(broker_name, 1, 100, 10)
        with _lite(broker_name) as c:
            mqs = c.fetch_message_queues("T")
            assert mqs == [MessageQueue("T", broker_name, q) for q in range(4)]
            q0 = mqs[0]
            c.assign([q0])
            c.seek(q0, 10)
            got = _drain(c, 20)
            assert [m.queue_offset for m in got] == list(range(10, 30))  # from 10 exactly, only queue 0
            assert c.poll(0.3) == []
            c.seek_to_begin(q0)
            assert [m.queue_offset for m in _drain(c, 30)] == list(range(30))
            c.seek_to_end(q0)
            _send(broker_name, 0, 30, 3)
            assert [int(m.body) for m in _drain(c, 3)] == [30, 31, 32]
            c.assign(mqs[:2])  # a new assignment: queue 1 joins, queue 0 goes on where it was
            assert sorted(int(m.body) for m in _drain(c, 10)) == list(range(100, 110))
            assert c.assignment() == set(mqs[:2])


def test_subscribe_and_assign_exclude_each_other(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 0, 0, 1)
        with _lite(broker_name) as c:
            c.assign(c.fetch_message_queues("T"))
            with pytest.raises(BadArgumentError, match="Subscribe and assign are mutually exclusive"):
                c.subscribe("T")
        with _lite(broker_name) as c:
            c.subscribe("T")
            with pytest.raises(BadArgumentError, match="Subscribe and assign are mutually exclusive"):
                c.assign(c.fetch_message_queues("T"))


def test_pause_holds_back_a_queue_while_others_flow_and_resume_brings_each_once(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 0, 0, 200)
        _send(broker_name, 1, 1000, 200)
        with _lite(broker_name, pull_batch_size=10) as c:
            q0, q1 = c.fetch_message_queues("T")[:2]
            c.assign([q0, q1])
            before = _drain(c, 20)  # both queues read ahead into the buffers by now
            assert len(before) >= 20
            c.pause([q0])
            assert c.paused() == {q0}
            during = _drain(c, 200 - len(_offsets(before, 1)))  # queue 1's rest (a leak of queue 0 ends it early)
            _send(broker_name, 0, 200, 50)
            _send(broker_name, 1, 1200, 50)
            during += _drain(c, 50)
            assert _offsets(during, 0) == []  # nothing of the paused queue, not even what was buffered
            assert sorted(_offsets(before + during, 1)) == list(range(250))  # the other flowed on
            c.resume([q0])
            after = _drain(c, 250 - len(_offsets(before, 0)))
            assert c.poll(0.3) == []
    q0_offsets = _offsets(before + during + after, 0)
    assert sorted(q0_offsets) == list(range(250)), Counter(q0_offsets).most_common(3)  # each once, none lost


def test_commit_sync_then_a_new_consumer_starts_at_the_committed_offset(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 0, 0, 60)
        with _lite(broker_name, auto_commit=False, pull_batch_size=25) as c:
            q0, q1 = c.fetch_message_queues("T")[:2]
            assert c.committed(q1) == -1  # never consumed by the group
            c.assign([q0])
            assert len(c.poll(30.0)) == 25
            c.commit_sync()
            assert c.committed(q0) == 25  # the broker has it when commit_sync returns
            assert len(_drain(c, 10)) >= 10  # polled, not committed (no auto commit)
        with _lite(broker_name, auto_commit=False) as c:
            c.assign([q0])
            again = _drain(c, 35)
    assert [m.queue_offset for m in again] == list(range(25, 60))


def test_offset_for_timestamp_on_real_store_timestamps(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 0, 0, 5)
        time.sleep(0.05)  # the next messages are stored at a later millisecond
        _send(broker_name, 0, 5, 5)
        with _lite(broker_name) as c:
            q0 = c.fetch_message_queues("T")[0]
            c.assign([q0])
            msgs = _drain(c, 10)
            stamps = [m.store_timestamp for m in msgs]
            ts = stamps[5]
            assert c.offset_for_timestamp(q0, ts) == stamps.index(ts)  # the first stored at or after it
            assert stamps.index(ts) <= 5
            assert c.offset_for_timestamp(q0, 0) == 0
            assert c.offset_for_timestamp(q0, stamps[-1] + 60_000) == 10  # all older: the max offset


def test_broadcasting_lite_members_each_read_everything_and_keep_offsets_locally(
    store_dir, broker_name, config, tmp_path
):
    kw = {"model": MessageModel.BROADCASTING, "offset_store_dir": str(tmp_path)}
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 0, 0, 20)
        _send(broker_name, 2, 20, 20)
        with _lite(broker_name, "bg", instance_name="a", **kw) as a, _lite(broker_name, "bg", **kw) as b:
            a.subscribe("T")
            b.subscribe("T")
            for c in (a, b):
                assert sorted(int(m.body) for m in _drain(c, 40)) == list(range(40))
            q0 = MessageQueue("T", broker_name, 0)
            a.commit_sync()
            assert a.committed(q0) == 20
        assert (tmp_path / "a" / "bg.json").exists()  # a named instance keeps its file
        _send(broker_name, 0, 40, 5)
        with _lite(broker_name, "bg", instance_name="a", **kw) as a:
            a.subscribe("T")
            assert sorted(int(m.body) for m in _drain(a, 5)) == list(range(40, 45))
            assert a.poll(0.3) == []


def test_controls_on_queues_not_there_or_not_owned_say_so_in_one_line(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 0, 0, 3)
        with _lite(broker_name) as c:
            q0, q1 = c.fetch_message_queues("T")[:2]
            cases = [
                (lambda: c.fetch_message_queues("Nope"), "topic 'Nope' does not exist"),
                (lambda: c.assign([MessageQueue("T", broker_name, 9)]), "does not exist: the topic has queues 0..3"),
                (lambda: c.assign([MessageQueue("Nope", broker_name, 0)]), "topic 'Nope' does not exist"),
                (lambda: c.assign([MessageQueue("T", "elsewhere", 0)]), "reads broker"),
                (lambda: c.committed(MessageQueue("Nope", broker_name, 0)), "does not exist"),
                (lambda: c.offset_for_timestamp(MessageQueue("T", broker_name, 4), 0), "does not exist"),
            ]
            c.assign([q0])
            cases += [
                (lambda: c.pause([q1]), "is not assigned to this consumer"),
                (lambda: c.resume([q1]), "is not assigned to this consumer"),
                (lambda: c.seek(q1, 0), "is not assigned to this consumer"),
                (lambda: c.seek(q0, 4), "cannot seek queue 0 of topic 'T'"),
                (lambda: c.seek(q0, -1), "cannot seek"),
                (lambda: c.pause([MessageQueue("T", broker_name, 7)]), "does not exist"),
            ]
            for call, text in cases:
                with pytest.raises(BadArgumentError) as e:
                    call()
                assert text in str(e.value) and "\n" not in str(e.value), str(e.value)
            with pytest.raises(ArgumentTypeError, match=r"got MessageQueue \(write \[mq\] for one queue\)"):
                c.pause(q0)
            assert c.assignment() == {q0} and c.paused() == set()  # nothing half done


def test_push_suspend_resume_under_load_loses_nothing_and_duplicates_nothing(store_dir, broker_name, config):
    total = 3000
    got: Counter[int] = Counter()
    lock = threading.Lock()

    def listener(msgs, ctx):
        with lock:
            got.update(int(m.body) for m in msgs)
        return ConsumeResult.SUCCESS

    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 0, 0, 1)  # the topic, before the consumer joins
        push = shmq.PushConsumer("sg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET)
        push.subscribe("T")
        push.register_listener(listener)
        with push:
            assert wait_for(lambda: len(push.assigned_queues()) == 4, 30)
            half = total // 2

            def produce() -> None:  # the load flowing when the suspend comes
                _send(broker_name, 0, 1, half - 1)

            producer = threading.Thread(target=produce)
            producer.start()
            try:
                assert wait_for(lambda: sum(got.values()) >= 300, 30)
                push.suspend()
                queues = push.assigned_queues()
                stable = [-1]

                def settled() -> bool:  # what was pulled before the suspend is consumed, then nothing
                    now = sum(got.values())
                    done, stable[0] = now == stable[0], now
                    return done

                assert wait_for(settled, 30, step=0.5)
                held = sum(got.values())
            finally:
                producer.join(60)
            _send(broker_name, 1, half, total - half)  # sent while suspended
            time.sleep(0.5)
            assert sum(got.values()) == held <= half  # nothing new while suspended
            assert push.assigned_queues() == queues  # no rebalance: it kept its queues
            push.resume()
            assert wait_for(lambda: sum(got.values()) >= total, 30)
            time.sleep(0.3)
    assert sorted(got) == list(range(total)) and max(got.values()) == 1, got.most_common(3)
