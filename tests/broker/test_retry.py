"""The retry records (pure): where a message sent back goes, with which properties, and the DLQ
resend progress."""

from __future__ import annotations

import pytest

from shmq.broker.dlq import GroupProgress, parse_progress
from shmq.broker.retry import consumed_record, resent_record, retry_level, send_back_record
from shmq.codec import record as fmt
from shmq.codec.ids import offset_msg_id


def _stored(topic: str = "T", reconsume: int = 0, props: dict | None = None, phys: int = 0) -> bytes:
    raw = bytearray(
        fmt.encode_message(
            topic, b"body", properties={"TAGS": "A", "UNIQ_KEY": "U1", **(props or {})}, reconsume_times=reconsume
        )
    )
    # what the store fills in: physical offset, store time
    raw[fmt.OFF_PHYSICALOFFSET : fmt.OFF_PHYSICALOFFSET + 8] = phys.to_bytes(8, "big")
    raw[fmt.OFF_STORETIMESTAMP : fmt.OFF_STORETIMESTAMP + 8] = (1).to_bytes(8, "big")
    return bytes(raw)


def _send_back(raw: bytes, group="g", max_times=16, level=0, levels=18):
    rec = consumed_record(memoryview(raw), fmt.decode_record(raw).physical_offset, len(raw), group)
    topic, out = send_back_record(memoryview(raw), rec, group, max_times, level, levels)
    return topic, fmt.decode_record(out)


def test_first_send_back_goes_to_the_retry_topic_with_level_3():
    topic, rec = _send_back(_stored(phys=4096), level=0)
    assert topic == "%RETRY%g" and rec.topic == "%RETRY%g" and rec.queue_id == 0 and rec.reconsume_times == 1
    p = rec.properties
    assert (p["DELAY"], p["RETRY_TOPIC"], p["MAX_RECONSUME_TIMES"], p["UNIQ_KEY"], p["TAGS"]) == (
        "3",
        "T",
        "16",
        "U1",
        "A",
    )
    assert p["ORIGIN_MESSAGE_ID"] == offset_msg_id(0, 4096)
    assert bytes(rec.body) == b"body"


def test_a_retry_keeps_its_first_topic_and_origin_and_waits_longer():
    _, rec = _send_back(_stored("%RETRY%g", 4, {"RETRY_TOPIC": "T", "ORIGIN_MESSAGE_ID": "X", "DELAY": "6"}))
    assert (rec.properties["RETRY_TOPIC"], rec.properties["ORIGIN_MESSAGE_ID"], rec.properties["DELAY"]) == (
        "T",
        "X",
        "7",
    )
    assert rec.reconsume_times == 5


def test_dlq_after_the_max_or_when_asked():
    topic, rec = _send_back(_stored("%RETRY%g", 16, {"RETRY_TOPIC": "T", "DELAY": "18"}))
    assert topic == "%DLQ%g" and "DELAY" not in rec.properties and rec.properties["RETRY_TOPIC"] == "T"
    topic, _ = _send_back(_stored(), level=-1)
    assert topic == "%DLQ%g"


def test_levels_are_capped():
    assert retry_level(0, 0, 18) == 3 and retry_level(20, 0, 18) == 18 and retry_level(0, 40, 18) == 18
    assert retry_level(0, 0, 2) == 2 and retry_level(0, 1, 18) == 1


@pytest.mark.parametrize("topic", ["SCHEDULE_TOPIC_XXXX", "%RETRY%other", "%DLQ%g", "RMQ_SYS_TRANS_HALF_TOPIC"])
def test_system_topics_other_than_the_own_retry_topic_are_refused(topic):
    with pytest.raises(ValueError, match="system topic"):
        _send_back(_stored(topic))


def test_a_record_not_at_the_offset_is_refused():
    raw = _stored(phys=100)
    with pytest.raises(ValueError):
        consumed_record(memoryview(raw), 0, len(raw), "g")  # PHYSICALOFFSET says 100
    with pytest.raises(ValueError):
        consumed_record(None, 100, len(raw), "g")
    with pytest.raises(ValueError):
        consumed_record(memoryview(raw)[:-1], 100, len(raw) - 1, "g")


def test_resent_record_goes_back_fresh():
    topic, raw = resent_record(
        memoryview(_stored("%DLQ%g", 17, {"RETRY_TOPIC": "T", "MAX_RECONSUME_TIMES": "16", "ORIGIN_MESSAGE_ID": "X"}))
    )
    rec = fmt.decode_record(raw)
    assert topic == "T" == rec.topic and rec.reconsume_times == 0
    assert "RETRY_TOPIC" not in rec.properties and "MAX_RECONSUME_TIMES" not in rec.properties
    assert rec.properties["ORIGIN_MESSAGE_ID"] == "X" and rec.properties["UNIQ_KEY"] == "U1"
    with pytest.raises(ValueError):
        resent_record(memoryview(_stored("%DLQ%g")))


def test_progress_folds_marks_into_the_offset():
    g = GroupProgress()
    g.mark([2, 3])
    assert (g.offset, g.done) == (0, {2, 3})
    g.mark([0, 1])
    assert (g.offset, g.done) == (4, set())
    g.mark([6])
    g.skip_to(6)
    assert (g.offset, g.done) == (7, set())
    assert parse_progress({"groups": {"a": {"offset": 3, "done": [5]}}})["a"] == GroupProgress(3, {5})
    for bad in ({}, {"groups": {"a": {"offset": -1}}}, {"groups": {"a": {"offset": 1, "done": ["x"]}}}):
        with pytest.raises(ValueError):
            parse_progress(bad)
