"""Delivery rules in the broker core: delays parked under SCHEDULE_TOPIC_XXXX and delivered when
due, delivery times parked under the timer topic, transaction halves under the half topic, and
system topics closed to clients. Driven without a process: a real store, frames in, answers out."""

from __future__ import annotations

import json
import os
import time

import pytest

from shmq.broker.answers import Peer
from shmq.broker.core import BrokerCore
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.model import system_topics as st
from shmq.store.write.rewrite import rewrite_record

from .conftest import serve


@pytest.fixture
def config(config: dict) -> dict:
    return dict(config, messageDelayLevel="50ms 100ms 150ms", timerMaxDelaySec=60)


def send(
    req_id: int,
    topic: str,
    body: bytes,
    props: dict[str, str],
    queue_id: int = 0,
    sysflag: int = 0,
    flags: int = P.FLAG_INSPECT,
) -> tuple[int, bytes]:
    rec = fmt.encode_message(topic, body, properties={fmt.PROPERTY_UNIQ_KEY: f"U{req_id}", **props}, sysflag=sysflag)
    return P.SEND, P.encode_send(req_id, time.monotonic_ns(), queue_id, flags, 0, topic, [], rec)


def stored(core: BrokerCore, topic: str, qid: int) -> list[fmt.StoredRecord]:
    return core.store.get_message(topic, qid, 0, 1000).messages


def tick_until(core: BrokerCore, done, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        core.tick(time.monotonic_ns())
        time.sleep(0.005)


def test_a_delayed_send_waits_in_its_level_queue_and_reaches_its_topic_when_due(core):
    t0 = int(time.time() * 1000)
    got = serve(core, Peer(1), send(1, "T", b"later", {fmt.PROPERTY_DELAY: "2"}, queue_id=3))
    assert got[0][0] == P.SEND_RESULT
    parked = stored(core, st.SCHEDULE_TOPIC, 1)
    assert [bytes(m.body) for m in parked] == [b"later"] and stored(core, "T", 3) == []
    assert parked[0].properties[fmt.PROPERTY_REAL_TOPIC] == "T" and parked[0].properties[fmt.PROPERTY_REAL_QID] == "3"
    due = int(core.store.find_consume_queue(st.SCHEDULE_TOPIC, 1).get_range(0, 1)["tags_code"][0])
    assert 100 <= due - t0 <= 150  # the tag field holds the due time
    core.tick(time.monotonic_ns())
    assert stored(core, "T", 3) == []  # not due yet
    tick_until(core, lambda: stored(core, "T", 3))
    [m] = stored(core, "T", 3)
    assert time.time() * 1000 >= due and bytes(m.body) == b"later" and m.uniq_key == "U1"
    assert not {fmt.PROPERTY_DELAY, fmt.PROPERTY_REAL_TOPIC, fmt.PROPERTY_REAL_QID} & set(m.properties)
    core.persist()
    with open(os.path.join(core.store.store_dir, "config", "delayOffset.json")) as f:
        assert json.load(f) == {"offsetTable": {"2": 1}}


def test_levels_above_the_last_use_the_last_and_unflagged_records_are_not_read(core):
    serve(
        core,
        Peer(1),
        send(1, "T", b"far", {fmt.PROPERTY_DELAY: "40"}),
        send(2, "T", b"plain", {fmt.PROPERTY_DELAY: "1"}, flags=0),
    )
    assert [bytes(m.body) for m in stored(core, st.SCHEDULE_TOPIC, 2)] == [b"far"]
    assert [bytes(m.body) for m in stored(core, "T", 0)] == [b"plain"]  # not flagged: stored as sent


def test_delivery_times_park_under_the_timer_topic_and_past_or_too_far_ones_do_not(core):
    now = int(time.time() * 1000)
    got = serve(
        core,
        Peer(1),
        send(1, "T", b"at", {fmt.PROPERTY_TIMER_DELIVER_MS: str(now + 5000)}),
        send(2, "T", b"after", {fmt.PROPERTY_TIMER_DELAY_MS: "2000"}),
        send(3, "T", b"past", {fmt.PROPERTY_TIMER_DELIVER_MS: str(now - 10)}),
        send(4, "T", b"too far", {fmt.PROPERTY_TIMER_DELAY_MS: str(61_000)}),
        send(5, "T", b"junk", {fmt.PROPERTY_DELAY: "x"}),
    )
    by_id = {r.req_id: (k, r) for k, r in got}  # errors are answered before stored sends
    assert [by_id[i][0] for i in range(1, 6)] == [P.SEND_RESULT] * 3 + [P.ERROR] * 2
    assert "timerMaxDelaySec" in by_id[4][1].message and "DELAY" in by_id[5][1].message
    parked = stored(core, st.TIMER_TOPIC, 0)
    assert [bytes(m.body) for m in parked] == [b"at", b"after"]
    assert int(parked[1].properties[fmt.PROPERTY_TIMER_DELIVER_MS]) - now >= 2000
    assert fmt.PROPERTY_TIMER_DELAY_MS not in parked[1].properties
    entries = core.store.find_consume_queue(st.TIMER_TOPIC, 0).get_range(0, 2)
    assert entries["tags_code"].tolist() == [int(m.properties[fmt.PROPERTY_TIMER_DELIVER_MS]) for m in parked]
    assert [bytes(m.body) for m in stored(core, "T", 0)] == [b"past"]


def test_a_transaction_half_is_hidden_in_the_half_topic_and_cannot_be_delayed(core):
    got = serve(
        core,
        Peer(1),
        send(1, "T", b"half", {fmt.PROPERTY_PGROUP: "tpg"}, queue_id=2, sysflag=fmt.TRANSACTION_PREPARED),
        send(2, "T", b"both", {fmt.PROPERTY_DELAY: "1"}, sysflag=fmt.TRANSACTION_PREPARED),
    )
    by_id = {r.req_id: (k, r) for k, r in got}
    assert by_id[1][0] == P.SEND_RESULT and by_id[2][0] == P.ERROR and "cannot also be delayed" in by_id[2][1].message
    [half] = stored(core, st.TRANS_HALF_TOPIC, 0)
    assert half.sysflag & fmt.TRANSACTION_MASK == 0 and half.properties[fmt.PROPERTY_TRAN_MSG] == "true"
    assert (half.properties[fmt.PROPERTY_REAL_TOPIC], half.properties[fmt.PROPERTY_REAL_QID]) == ("T", "2")
    assert stored(core, "T", 2) == []


def test_clients_cannot_send_to_system_topics_but_to_the_trace_topic(core):
    got = serve(
        core,
        Peer(1),
        send(1, st.SCHEDULE_TOPIC, b"x", {}, flags=0),
        send(2, "%RETRY%g", b"x", {}, flags=0),
        send(3, st.TRACE_TOPIC, b"t", {}, flags=0),
    )
    by_id = {r.req_id: (k, r) for k, r in got}
    assert [by_id[i][0] for i in (1, 2, 3)] == [P.ERROR, P.ERROR, P.SEND_RESULT]
    assert by_id[1][1].code == P.NO_PERMISSION and "system topic" in by_id[1][1].message
    assert core.topics.get(st.SCHEDULE_TOPIC).write_queue_nums == 3  # one queue per level, made at start


def test_put_internal_stores_counts_and_can_park(core):
    rec = fmt.encode_message("%RETRY%g", b"again", properties={fmt.PROPERTY_DELAY: "1", fmt.PROPERTY_UNIQ_KEY: "U9"})
    r = core.put_internal([("%RETRY%g", 0, rec)], inspect=True)
    assert r.msg_num == 1 and [bytes(m.body) for m in stored(core, st.SCHEDULE_TOPIC, 0)] == [b"again"]
    assert core.topics.get("%RETRY%g").write_queue_nums == 1
    tick_until(core, lambda: stored(core, "%RETRY%g", 0))
    assert [m.uniq_key for m in stored(core, "%RETRY%g", 0)] == ["U9"]


def test_rewrite_keeps_what_it_is_not_told_to_change():
    raw = fmt.encode_message(
        "T",
        b"body",
        queue_id=1,
        flag=7,
        properties={"a": "1", "b": "2"},
        born_timestamp=5,
        born_host=9,
        reconsume_times=2,
    )
    out = fmt.decode_record(rewrite_record(raw, topic="U", set_props={"c": "3"}, drop_props=("a",), reconsume_times=3))
    assert (out.topic, bytes(out.body), out.flag, out.born_timestamp, out.born_host, out.reconsume_times) == (
        "U",
        b"body",
        7,
        5,
        9,
        3,
    )
    assert out.properties == {"b": "2", "c": "3"} and out.body_crc == fmt.body_crc(b"body")


def test_a_failing_timed_service_is_tried_every_tick_but_logged_once_a_minute(core, caplog):
    class Broken:
        ticks = 0

        def tick(self, now_ms: int) -> int:
            Broken.ticks += 1
            raise OSError("disk full")

        def persist(self, durable: bool = True) -> None:
            pass

        def next_due_ms(self) -> int | None:
            return None

    core.services.append(Broken())
    with caplog.at_level("ERROR", logger="shmq.broker"):
        for _ in range(50):
            core.tick(time.monotonic_ns())
    assert Broken.ticks == 50
    assert [r.getMessage() for r in caplog.records if "Broken failed" in r.getMessage()] == [
        "Broken failed (0 more failures since the last report; tried again every tick)"
    ]
