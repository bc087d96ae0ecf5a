"""MessageExt and SendResult make some fields on first use; they must read as if made up front."""

from __future__ import annotations

import pytest

from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.model.message import MessageQueue, SendResult, SendStatus
from shmq.model.message_ext import MessageExt


def _stored(props: dict[str, str]) -> MessageExt:
    return MessageExt.stored("T", b"body", fmt.encode_properties(props), 2, 7, 4096, 11, 12, 0, 0x7F000001, 180, 0)


def test_stored_message_decodes_properties_on_first_use():
    m = _stored({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AB" * 16, "color": "red"})
    assert m.tags == "TagA" and m.keys == "k1 k2" and m.key_list == ["k1", "k2"]
    assert m.msg_id == "AB" * 16 and m.properties["color"] == "red"
    assert m.offset_msg_id == ids.offset_msg_id(0x7F000001, 4096)
    eager = MessageExt(
        "T",
        b"body",
        "TagA",
        "k1 k2",
        dict(m.properties),
        2,
        7,
        4096,
        11,
        12,
        0,
        "AB" * 16,
        ids.offset_msg_id(0x7F000001, 4096),
        180,
        0,
    )
    assert m == eager and repr(m) == repr(eager)
    m.tags = "TagB"
    assert m.tags == "TagB" and m != eager


def test_stored_message_without_uniq_key_uses_the_offset_id():
    m = _stored({})
    assert m.tags is None and m.keys is None and m.properties == {}
    assert m.msg_id == m.offset_msg_id == ids.offset_msg_id(0x7F000001, 4096)


def test_redelivered_is_a_copy_one_time_more():
    m = _stored({"TAGS": "A"})
    again = m.redelivered()
    assert again.reconsume_times == 1 and m.reconsume_times == 0
    assert again.tags == "A" and again.body == m.body and again.queue_offset == m.queue_offset
    with pytest.raises(TypeError):
        hash(m)


def test_send_result_ids_on_first_use():
    calls = []

    def make_ids() -> str:
        calls.append(1)
        return "A,B"

    mq = MessageQueue("T", "b", 0)
    r = SendResult(SendStatus.SEND_OK, make_ids, None, mq, 5, 0, 2, [100, 200], store_host=9)
    assert r.msg_id == "A,B" and r.msg_id == "A,B" and len(calls) == 1
    assert r.offset_msg_id == ids.offset_msg_id(9, 100) + "," + ids.offset_msg_id(9, 200)
    one = SendResult(SendStatus.SEND_OK, "U", None, mq, 5, phys_offsets=[300], store_host=9)
    assert one.offset_msg_id == ids.offset_msg_id(9, 300)
    assert one == SendResult(SendStatus.SEND_OK, "U", ids.offset_msg_id(9, 300), mq, 5, phys_offsets=[300])
