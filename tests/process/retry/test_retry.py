"""Retry and dead letters against a real broker: RECONSUME_LATER (or an exception) sends the
message back to %RETRY%<group>, it comes back after delay level 3 + reconsume times, after
max_reconsume_times it goes to %DLQ%<group>, and Admin.resend_dlq puts it back on its topic."""

from __future__ import annotations

import itertools
import threading
import time

import shmq
from shmq import Admin, ConsumeFrom, ConsumeResult, Message, MessageModel, MessageQueue, Producer, PushConsumer
from tests.waiting import wait_for


def _consumer(broker: str, group: str, listener, topic: str = "T", orderly: bool = False, **kw) -> PushConsumer:
    c = PushConsumer(group, broker=broker, consume_from=ConsumeFrom.FIRST_OFFSET, **kw)
    c.subscribe(topic, "*")
    c.register_listener(listener, orderly=orderly)
    return c


def _queue(broker: str, topic: str) -> list[shmq.MessageExt]:
    """Every message stored in queue 0 of ``topic`` (a retry topic or DLQ has one queue)."""
    return _queue_of(broker, topic, 0)


def _queue_of(broker: str, topic: str, qid: int) -> list[shmq.MessageExt]:
    pc = shmq.PullConsumer("inspector", broker=broker).start()
    try:
        r = pc.pull(MessageQueue(topic, broker, qid), "*", offset=0, max_nums=1000, timeout=0)
        return list(r.messages) if r.status is shmq.PullStatus.FOUND else []
    finally:
        pc.shutdown()


class Recorder:
    """A listener that fails ``fails(msg)`` deliveries and records each delivery."""

    def __init__(self, fail) -> None:
        self.fail = fail
        self.seen: list[tuple[float, shmq.MessageExt]] = []
        self.lock = threading.Lock()

    def __call__(self, msgs, ctx):
        with self.lock:
            self.seen.extend((time.monotonic(), m) for m in msgs)
        return ConsumeResult.RECONSUME_LATER if any(self.fail(m) for m in msgs) else ConsumeResult.SUCCESS

    def of(self, body: bytes) -> list[tuple[float, shmq.MessageExt]]:
        with self.lock:
            return [(t, m) for t, m in self.seen if m.body == body]


# levels 3, 4, 5 (a first, second and third retry) steep enough that no scheduling delay of a
# loaded machine can make a later gap look shorter than an earlier one
STEEP_LEVELS = "20ms 40ms 60ms 600ms 1800ms" + " 2000ms" * 13
STEEP_MS = [int(x[:-2]) for x in STEEP_LEVELS.split()]


def test_failing_n_times_sees_the_message_n_plus_1_times_with_growing_delay(store_dir, broker_name, config):
    n = 3
    rec = Recorder(lambda m: m.body == b"x" and m.reconsume_times < n)
    steep = {**config, "messageDelayLevel": STEEP_LEVELS}
    with shmq.Broker(store_dir, broker_name, steep), Producer("pg", broker=broker_name) as p:
        sent = p.send(Message("T", b"x", tags="A", keys="k1", properties={"a": "1"}))
        p.send(Message("T", b"ok"))
        with _consumer(broker_name, "g", rec):
            assert wait_for(lambda: len(rec.of(b"x")) == n + 1, 30), rec.of(b"x")
            time.sleep(0.2)  # nothing more comes: the last delivery succeeded
        retries = _queue(broker_name, "%RETRY%g")
    seen = rec.of(b"x")
    assert [m.reconsume_times for _, m in seen] == list(range(n + 1))
    # every delivery shows the message as sent: topic, id, tags, keys, properties
    assert all(
        m.topic == "T" and m.msg_id == sent.msg_id and m.tags == "A" and m.keys == "k1" and m.properties["a"] == "1"
        for _, m in seen
    )
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(seen)]
    for k, gap in enumerate(gaps):  # level 3 + k: 60 ms, 600 ms, 1.8 s
        assert gap >= STEEP_MS[2 + k] / 1000 - 0.005, (k, gaps)
    assert gaps[0] < gaps[1] < gaps[2], gaps
    assert len(rec.of(b"ok")) == 1
    assert [m.reconsume_times for m in retries] == [1, 2, 3]
    first = retries[0].properties
    assert first["RETRY_TOPIC"] == "T" and first["MAX_RECONSUME_TIMES"] == "16" and "DELAY" not in first
    assert {m.properties["ORIGIN_MESSAGE_ID"] for m in retries} == {sent.offset_msg_id}


def test_after_the_max_the_dlq_holds_it_and_resend_brings_it_back(store_dir, broker_name, config):
    state = {"fail": True}
    rec = Recorder(lambda m: state["fail"] and m.body == b"dead")
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        sent = p.send(Message("T", b"dead", keys="kd"))
        with _consumer(broker_name, "dg", rec, max_reconsume_times=2):
            assert wait_for(lambda: len(_queue(broker_name, "%DLQ%dg")) == 1, 10)
            time.sleep(0.3)  # the consumer no longer sees it
            assert [m.reconsume_times for _, m in rec.of(b"dead")] == [0, 1, 2]
            dead = _queue(broker_name, "%DLQ%dg")[0]
            assert (
                dead.reconsume_times,
                dead.properties["RETRY_TOPIC"],
                dead.properties["MAX_RECONSUME_TIMES"],
                dead.msg_id,
                dead.body,
            ) == (3, "T", "2", sent.msg_id, b"dead")
            state["fail"] = False
            admin = Admin(broker=broker_name)
            r = admin.resend_dlq("dg")
            assert r.resent == [sent.msg_id] and r.remaining == 0 and not r.skipped
            assert wait_for(lambda: len(rec.of(b"dead")) == 4, 30)
            back = rec.of(b"dead")[-1][1]
            assert (back.topic, back.reconsume_times, back.msg_id, back.keys) == ("T", 0, sent.msg_id, "kd")
            assert admin.resend_dlq("dg").resent == []  # resent once, never twice
            time.sleep(0.2)
            assert len(rec.of(b"dead")) == 4


def test_resend_by_id_and_max_keeps_progress_across_restarts(store_dir, broker_name, config):
    rec = Recorder(lambda m: m.topic == "T" and m.properties.get("phase") == "1")
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        for i in range(5):
            p.send(Message("T", b"%d" % i, properties={"phase": "1"}))
        with _consumer(broker_name, "rg", rec, max_reconsume_times=0):
            assert wait_for(lambda: len(_queue(broker_name, "%DLQ%rg")) == 5, 10)
        ids = [m.msg_id for m in _queue(broker_name, "%DLQ%rg")]  # in DLQ order
        admin = Admin(broker=broker_name)
        assert admin.resend_dlq("rg", msg_ids=[ids[3]]).resent == [ids[3]]
        r = admin.resend_dlq("rg", max_num=2)
        assert r.resent == ids[:2] and r.remaining == 2
    with shmq.Broker(store_dir, broker_name, config):  # the progress file outlives the broker
        admin = Admin(broker=broker_name)
        assert admin.resend_dlq("rg", msg_ids=[ids[3], ids[0]]).resent == []
        assert admin.resend_dlq("rg").resent == [ids[2], ids[4]]
        assert admin.resend_dlq("rg").resent == []
        assert admin.resend_dlq("nobody").resent == []
        resent = [m for q in range(4) for m in _queue_of(broker_name, "T", q) if m.properties.get("phase")]
    assert sorted(m.msg_id for m in resent) == sorted(ids * 2)  # the first deliveries and one resend each


def test_an_exception_counts_as_reconsume_later(store_dir, broker_name, config):
    seen = []

    def listener(msgs, ctx):
        seen.extend((m.topic, m.reconsume_times) for m in msgs)
        if msgs[0].reconsume_times == 0:
            raise RuntimeError("listener bug")
        return ConsumeResult.SUCCESS

    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        p.send(Message("T", b"boom"))
        with _consumer(broker_name, "eg", listener):
            assert wait_for(lambda: len(seen) == 2, 10)
        assert len(_queue(broker_name, "%RETRY%eg")) == 1
    assert seen == [("T", 0), ("T", 1)]


def test_orderly_suspends_then_sends_to_the_dlq_after_the_max(store_dir, broker_name, config):
    seen = []

    def listener(msgs, ctx):
        m = msgs[0]
        seen.append((m.body, m.reconsume_times))
        ctx.suspend_current_queue_time = 0.02
        return ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT if m.body == b"1" else ConsumeResult.SUCCESS

    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        for i in range(3):
            p.send(Message("O", b"%d" % i), selector=lambda qs, m, a: qs[0])
        with _consumer(broker_name, "og", listener, topic="O", orderly=True, max_reconsume_times=2):
            assert wait_for(lambda: len(seen) >= 5, 10)
            time.sleep(0.2)
        dead = _queue(broker_name, "%DLQ%og")
        # the queue moved on: a restarted member does not see the dead message again
        again = []
        with _consumer(
            broker_name, "og", lambda msgs, ctx: again.extend(msgs) or ConsumeResult.SUCCESS, topic="O", orderly=True
        ):
            time.sleep(0.3)
    assert seen == [(b"0", 0), (b"1", 0), (b"1", 1), (b"1", 2), (b"2", 0)]
    assert [m.body for m in dead] == [b"1"] and dead[0].properties["RETRY_TOPIC"] == "O"
    assert again == []


def test_broadcasting_drops_what_is_not_consumed(store_dir, broker_name, config, tmp_path):
    rec = Recorder(lambda m: m.body == b"bad")
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        for body in (b"bad", b"good"):
            p.send(Message("B", body))
        with _consumer(
            broker_name,
            "bg",
            rec,
            topic="B",
            model=MessageModel.BROADCASTING,
            instance_name="one",
            offset_store_dir=str(tmp_path),
        ):
            assert wait_for(lambda: len(rec.of(b"good")) == 1, 10)
            time.sleep(0.3)
        topics = Admin(broker=broker_name).topics()
    assert len(rec.of(b"bad")) == 1  # logged and dropped: RocketMQ's rule
    assert "%RETRY%bg" not in topics and "%DLQ%bg" not in topics


def test_offsets_move_past_messages_sent_back(store_dir, broker_name, config):
    rec = Recorder(lambda m: m.reconsume_times == 0)
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        for i in range(20):
            p.send(Message("T", b"%d" % i))
        with _consumer(broker_name, "og2", rec):
            assert wait_for(lambda: len(rec.seen) == 40, 10)
        again = Recorder(lambda m: False)
        with _consumer(broker_name, "og2", again):  # a restart replays nothing
            time.sleep(0.4)
        pc = shmq.PullConsumer("og2", broker=broker_name).start()
        committed = {
            t: sum(pc.fetch_consume_offset(q, from_store=True) for q in pc.fetch_queues(t)) for t in ("T", "%RETRY%og2")
        }
        pc.shutdown()
    assert again.seen == []
    assert committed == {"T": 20, "%RETRY%og2": 20}
    assert sorted(m.reconsume_times for _, m in rec.seen) == [0] * 20 + [1] * 20
