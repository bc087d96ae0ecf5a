"""SimpleConsumer (POP) against a real broker: receive and ack, redelivery after the invisible
time, change_invisible_duration and stale receipts, the DLQ, filters, FIFO groups, separate
progress from a push group, bad arguments, a broker restart."""

from __future__ import annotations

import copy
import multiprocessing
import os
import signal
import time
from collections import Counter

import pytest

import shmq
from shmq import (
    Admin,
    BadArgumentError,
    ConsumeFrom,
    ConsumeResult,
    LitePullConsumer,
    Message,
    Producer,
    PushConsumer,
    ReceiptError,
    SimpleConsumer,
)
from shmq.codec import pop_frames as F
from tests.process.consumers import pop_worker
from tests.waiting import wait_for


def _send(broker: str, n: int, topic: str = "Jobs", **kw) -> None:
    with Producer("sp", broker=broker) as p:
        for i in range(n):
            p.send(Message(topic, b"%d" % i, **kw))


def _drain(sc, want: int, invisible: float = 30.0, timeout: float = 30.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += sc.receive(32, invisible)
    return got


def _consumer(broker: str, group: str = "wg", **kw) -> SimpleConsumer:
    kw.setdefault("subscriptions", {"Jobs": "*"})
    kw.setdefault("await_duration", 0.5)
    return SimpleConsumer(group, broker=broker, **kw).start()


def test_receive_and_ack_each_message_once(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 50)
        with _consumer(broker_name) as sc:
            got = _drain(sc, 50)
            assert sorted(int(m.body) for m in got) == list(range(50))
            assert {m.delivery_attempt for m in got} == {1}
            assert all(m.receipt_handle.broker_name == broker_name for m in got)
            for m in got:
                sc.ack(m)
            assert sc.receive(32, 30.0) == []  # all settled: nothing comes again
            with pytest.raises(ReceiptError, match="no such message is in flight") as e:
                sc.ack(got[0])  # acked already
            assert e.value.status == F.RECEIPT_UNKNOWN
            assert wait_for(lambda: Admin(broker_name).consumer_progress("wg").lag == 0, 30)
        for call in (lambda: sc.receive(1, 1.0), lambda: sc.ack(got[0]), sc.start):
            with pytest.raises(shmq.ShmqError, match="the SimpleConsumer was shut down"):
                call()


def test_ack_async_batches_and_settles(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 64)
        with _consumer(broker_name) as sc:
            got = _drain(sc, 64)
            futures = [sc.ack_async(m) for m in got]
            for f in futures:
                assert f.result(30) is None
            assert sc.receive(32, 30.0) == []


def test_a_message_not_acked_comes_back_with_its_next_attempt(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 1)
        with _consumer(broker_name) as a, _consumer(broker_name) as b:
            (first,) = _drain(a, 1, invisible=1.0)
            again = _drain(b, 1, invisible=30.0)  # the other member gets it once its invisible time ran out
            assert [m.body for m in again] == [b"0"]
            assert again[0].delivery_attempt == 2
            assert again[0].topic == "Jobs"  # the retry topic's copy shows the topic it was sent to
            assert again[0].receipt_handle.topic == "%RETRY%wg"
            with pytest.raises(ReceiptError):
                a.ack(first)  # the first delivery's receipt is settled by the revive
            b.ack(again[0])
            assert a.receive(32, 30.0) == [] and b.receive(32, 30.0) == []


def test_change_invisible_duration_keeps_it_away_and_makes_the_old_receipt_stale(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 1)
        with _consumer(broker_name) as sc, _consumer(broker_name) as other:
            (m,) = _drain(sc, 1, invisible=3.0)
            old = copy.copy(m)
            sc.change_invisible_duration(m, 60.0)
            assert m.receipt_handle.token != old.receipt_handle.token
            time.sleep(3.5)  # past the first invisible time
            assert other.receive(32, 30.0) == []
            with pytest.raises(ReceiptError, match="stale") as e:
                sc.ack(old)
            assert e.value.status == F.RECEIPT_STALE
            assert "\n" not in str(e.value)
            sc.ack(m)
            assert other.receive(32, 30.0) == []


def test_after_max_delivery_attempts_a_message_goes_to_the_dlq(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 1)
        with _consumer(broker_name, max_delivery_attempts=2) as sc:
            attempts = [m.delivery_attempt for m in _drain(sc, 1, invisible=0.5)]
            attempts += [m.delivery_attempt for m in _drain(sc, 1, invisible=0.5)]
            assert attempts == [1, 2]

            def in_dlq() -> bool:
                return any(d.topic == "%DLQ%wg" and d.messages == 1 for d in Admin(broker_name).dlq())

            assert wait_for(in_dlq, 30)
            assert sc.receive(32, 0.5) == []


def test_tag_and_sql_filters_are_applied_by_the_broker(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        with Producer("sp", broker=broker_name) as p:
            for i in range(20):
                p.send(Message("Jobs", b"%d" % i, tags="A" if i % 2 else "B", properties={"n": str(i)}))
        with _consumer(broker_name, "tags", subscriptions={"Jobs": "A"}) as sc:
            got = _drain(sc, 10)
            time.sleep(0.2)
            got += sc.receive(32, 30.0)
            assert sorted(int(m.body) for m in got) == list(range(1, 20, 2))
        with _consumer(broker_name, "sqlg", subscriptions={"Jobs": shmq.sql("n >= 15")}) as sc:
            got = _drain(sc, 5)
            got += sc.receive(32, 30.0)
            assert sorted(int(m.body) for m in got) == [15, 16, 17, 18, 19]


@pytest.mark.parametrize("made_fifo_by", ["consumer", "topic"])
def test_a_fifo_group_gets_a_queues_next_message_only_after_the_previous_is_acked(
    store_dir, broker_name, config, made_fifo_by
):
    """FIFO by the consumer's ``fifo=True``, or by a topic created with ``order=True``."""
    with shmq.Broker(store_dir, broker_name, config):
        if made_fifo_by == "topic":
            assert shmq.Admin(broker_name).create_topic("Jobs", 4, order=True).order
        with Producer("sp", broker=broker_name) as p:
            for i in range(6):
                p.send(Message("Jobs", b"%d" % i), sharding_key="order-1")
        with _consumer(broker_name, "fifo", fifo=made_fifo_by == "consumer") as sc:
            seen: list[int] = []
            while len(seen) < 6:
                batch = sc.receive(1, 30.0)
                assert batch, f"nothing came after {seen}"
                assert sc.receive(1, 30.0) == []  # the queue is held while its message is in flight
                seen += [int(m.body) for m in batch]
                for m in batch:
                    sc.ack(m)
            assert seen == list(range(6))


def test_a_pop_group_and_a_push_group_keep_separate_progress(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 40)
        pushed: list[int] = []
        push = PushConsumer("cg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET)
        push.subscribe("Jobs", "*")
        push.register_listener(lambda msgs, ctx: pushed.extend(int(m.body) for m in msgs) or ConsumeResult.SUCCESS)
        push.start()
        try:
            with _consumer(broker_name) as sc:
                got = _drain(sc, 40)
                for m in got:
                    sc.ack_async(m)
            assert wait_for(lambda: len(pushed) >= 40, 30)
        finally:
            push.shutdown()
        assert sorted(int(m.body) for m in got) == sorted(pushed) == list(range(40))
        admin = Admin(broker_name)
        assert wait_for(lambda: admin.consumer_progress("wg").lag == 0 and admin.consumer_progress("cg").lag == 0, 30)
        assert admin.consumer_progress("wg").model == "POP"


def test_acks_and_receives_go_on_after_a_broker_restart(store_dir, broker_name, config):
    b = shmq.Broker(store_dir, broker_name, config)
    try:
        _send(broker_name, 10)
        sc = _consumer(broker_name, await_duration=1.0)
        try:
            got = _drain(sc, 10)
            b.stop()
            b = shmq.Broker(store_dir, broker_name, config)
            for m in got[:5]:
                sc.ack(m)  # the receipts outlive the restart
            _send(broker_name, 3)
            more = _drain(sc, 3)
            assert sorted(int(m.body) for m in more) == [0, 1, 2]
        finally:
            sc.shutdown()
    finally:
        b.stop()


@pytest.mark.parametrize(
    "num, invisible, words",
    [
        (0, 15.0, "max_message_num must be 1..1024, got 0"),
        (2000, 15.0, "max_message_num must be 1..1024, got 2000"),
        (32, 0, "invisible_duration must be more than 0 s"),
        (32, -1.0, "invisible_duration must be more than 0 s"),
        (32, 12 * 3600 + 1, "at most 43200 s"),
    ],
)
def test_bad_receive_arguments_are_one_line_errors(num, invisible, words):
    sc = SimpleConsumer("wg", broker="no-such-broker", subscriptions={"Jobs": "*"})
    with pytest.raises(BadArgumentError) as e:
        sc.receive(num, invisible)  # checked before anything is sent (not even started)
    assert words in str(e.value) and "\n" not in str(e.value) and "Error" not in str(e.value)


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"await_duration": 61}, "await_duration must be 0..60 s, got 61"),
        ({"await_duration": "5"}, "await_duration must be 0..60 s, got '5'"),
        ({"max_delivery_attempts": 0}, "max_delivery_attempts must be 1..1000, got 0"),
        ({"max_delivery_attempts": 2.5}, "max_delivery_attempts must be 1..1000, got 2.5"),
        ({"subscriptions": {"bad topic": "*"}}, "topic"),
    ],
)
def test_bad_consumer_arguments_are_one_line_errors(kw, words):
    with pytest.raises(shmq.ShmqError) as e:
        SimpleConsumer("wg", broker="no-such-broker", **kw)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_predicate_filter_is_refused():
    with pytest.raises(BadArgumentError, match="cannot filter with a Python predicate"):
        SimpleConsumer("wg", broker="no-such-broker", subscriptions={"Jobs": lambda m: True})
    sc = SimpleConsumer("wg", broker="no-such-broker")
    with pytest.raises(BadArgumentError, match=r"subscribe with tags or shmq\.sql"):
        sc.subscribe("Jobs", lambda m: True)  # type: ignore[arg-type]


def test_acking_a_message_no_simple_consumer_received_is_refused():
    sc = SimpleConsumer("wg", broker="no-such-broker")
    with pytest.raises(BadArgumentError, match="no receipt_handle"):
        sc.ack(shmq.MessageExt("Jobs", b"x"))
    assert shmq.MessageExt("Jobs", b"x", reconsume_times=2).delivery_attempt == 3
    assert shmq.MessageExt("Jobs", b"x").receipt_handle is None


def _rows(path) -> list[tuple[str, int]]:
    try:
        with open(path) as f:
            return [(b, int(a)) for b, a in (line.split() for line in f if line.endswith("\n"))]
    except FileNotFoundError:
        return []


def _workers(ctx, broker: str, paths, invisible: float = 30.0, hold: bool = False) -> list:
    procs = [ctx.Process(target=pop_worker.work, args=(broker, "wg", str(p), invisible, hold)) for p in paths]
    for p in procs:
        p.start()
    return procs


def _stop(procs, paths) -> None:
    for p in paths:
        open(str(p) + ".stop", "w").close()
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join(10)


def test_four_worker_processes_share_a_topic_and_each_message_is_acked_once(store_dir, broker_name, config, tmp_path):
    ctx = multiprocessing.get_context("spawn")
    paths = [tmp_path / f"w{i}" for i in range(4)]
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 600)
        procs = _workers(ctx, broker_name, paths)
        assert wait_for(lambda: all(os.path.exists(f"{p}.ready") for p in paths), 60)
        try:
            assert wait_for(lambda: sum(len(_rows(p)) for p in paths) >= 600, 60)
            time.sleep(0.5)  # a duplicate would show up now
        finally:
            _stop(procs, paths)
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    acked = Counter(b for p in paths for b, _ in _rows(p))
    assert sorted(map(int, acked)) == list(range(600))
    assert set(acked.values()) == {1}


def test_messages_of_a_killed_worker_come_back_to_others_after_their_invisible_time(
    store_dir, broker_name, config, tmp_path
):
    ctx = multiprocessing.get_context("spawn")
    held = tmp_path / "held"
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 8)
        (holder,) = _workers(ctx, broker_name, [held], invisible=2.0, hold=True)
        try:
            assert wait_for(lambda: len(_rows(held)) >= 1, 60)
            os.kill(holder.pid, signal.SIGKILL)
            holder.join(10)
        finally:
            if holder.is_alive():
                holder.kill()
                holder.join(10)
        taken = {b for b, _ in _rows(held)}
        with _consumer(broker_name) as sc:
            got = _drain(sc, 8, timeout=60)
            for m in got:
                sc.ack(m)
        assert sorted(int(m.body) for m in got) == list(range(8))
        assert {m.delivery_attempt for m in got if m.body.decode() in taken} == {2}
        assert {m.delivery_attempt for m in got if m.body.decode() not in taken} == {1} or len(taken) == 8


def test_a_consumer_holding_its_cap_of_unacked_messages_gets_a_one_line_busy_error(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, {**config, "popMaxInflightPerClient": 20}):
        _send(broker_name, 30)
        with _consumer(broker_name) as sc:
            held = _drain(sc, 20)
            assert len(held) == 20
            with pytest.raises(shmq.BrokerBusyError) as e:
                sc.receive(32, 30.0)
            assert str(e.value) == (
                "client holds 20 unacked messages of group wg (popMaxInflightPerClient); "
                "ack or wait for their invisible time"
            )
            for m in held:
                sc.ack_async(m)
            assert len(_drain(sc, 10)) == 10  # room again once acked


def test_subscribe_and_unsubscribe_after_start_change_what_the_broker_hands_out(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 5, topic="Jobs")
        _send(broker_name, 5, topic="Mail")
        with _consumer(broker_name, subscriptions={}) as sc:
            assert sc.receive(32, 30.0) == []
            sc.subscribe("Mail", "*")
            got = _drain(sc, 5)
            assert {m.topic for m in got} == {"Mail"} and len(got) == 5
            sc.unsubscribe("Mail")
            sc.subscribe("Jobs", "*")
            _send(broker_name, 5, topic="Mail")
            got = _drain(sc, 5)
            time.sleep(0.2)
            got += sc.receive(32, 30.0)
            assert {m.topic for m in got} == {"Jobs"} and len(got) == 5


def test_an_answer_that_came_late_goes_to_the_next_receives_within_their_max(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 5)
        with _consumer(broker_name) as sc:
            late = sc.pop(32, 30_000, 0.0, time.monotonic() + 30)  # a receive that gave up on its answer
            sc.keep_late(late)
            assert wait_for(late.done, 30)
            first, second = sc.receive(2, 30.0), sc.receive(32, 30.0)
            assert len(first) == 2 and len(second) == 3
            assert sorted(int(m.body) for m in first + second) == list(range(5))
            for m in first + second:
                sc.ack(m)


def test_a_clustering_group_cannot_take_a_simple_consumer(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 1)
        lc = LitePullConsumer("cg", broker=broker_name).start()
        try:
            lc.subscribe("Jobs", "*")
            with pytest.raises(shmq.BrokerError) as e:
                _consumer(broker_name, "cg")
            assert "\n" not in str(e.value) and "CLUSTERING" in str(e.value), str(e.value)
        finally:
            lc.shutdown()


def test_a_received_message_carries_what_a_pull_reads(store_dir, broker_name, config):
    big = b"compressible " * 2000  # over the producer's compression threshold
    with shmq.Broker(store_dir, broker_name, config):
        with Producer("sp", broker=broker_name) as p:
            p.send(Message("Jobs", b"small", tags="A", keys="k1 k2", properties={"n": "1"}))
            p.send(Message("Jobs", big, tags="B"))
        with _consumer(broker_name) as sc:
            got = sorted(_drain(sc, 2), key=lambda m: len(m.body))
            for m in got:
                sc.ack(m)
        with shmq.PullConsumer("pc", broker=broker_name) as pc:
            pulled = [m for mq in pc.fetch_queues("Jobs") for m in pc.pull(mq, offset=0, timeout=0.1).messages]
    pulled.sort(key=lambda m: len(m.body))
    assert got[1].body == big and got[1].sysflag & 1  # stored compressed, received whole
    fields = ("topic", "body", "tags", "keys", "properties", "queue_id", "queue_offset", "msg_id", "offset_msg_id")
    fields += ("born_timestamp", "store_timestamp", "store_size", "reconsume_times", "commit_log_offset")
    assert [[getattr(m, f) for f in fields] for m in got] == [[getattr(m, f) for f in fields] for m in pulled]


def test_thousands_of_receipts_queued_at_once_go_out_in_frames_the_ring_takes(store_dir, broker_name, config):
    """4,200 invisible-time changes, then 4,200 acks, queued back to back: every future settles.
    (4,096 receipts queued when a flush runs were once one frame, larger than a consumer's
    request ring takes; how many are queued then depends on the flusher thread's timing, so
    tests/process/pop/test_pop_faults.py's 10,000 acks caught it only on a slow machine.)"""
    with shmq.Broker(store_dir, broker_name, config):
        with Producer("sp", broker=broker_name) as p:
            for start in range(0, 4200, 100):
                p.send_batch([Message("Jobs", b"%d" % i) for i in range(start, start + 100)])
        with _consumer(broker_name) as sc:
            msgs = _drain(sc, 4200, invisible=300.0)
            changed = [sc.change_invisible_duration_async(m, 300.0) for m in msgs]
            for f in changed:
                f.result(60)
            acked = [sc.ack_async(m) for m in msgs]
            for f in acked:
                f.result(60)
            assert sc.receive(32, 1.0) == []
