"""Retry and dead letters: the records the broker writes when a consumer sends a message back
(RocketMQ's ``consumerSendMsgBack``) and when an operator resends dead letters. Pure: record
bytes in, (topic, record bytes) out.

A message sent back is stored again under ``%RETRY%<group>`` queue 0 with DELAY = the delay
level (the put hooks park it under ``SCHEDULE_TOPIC_XXXX`` until due, then it comes back to
the retry topic, which every clustering member of the group subscribes), RETRY_TOPIC = the
topic it was first sent to, ORIGIN_MESSAGE_ID = the offset id of its first stored copy,
MAX_RECONSUME_TIMES and RECONSUMETIMES + 1. Once it was consumed ``max_reconsume_times``
times (or the consumer asks, delay level -1) it goes to ``%DLQ%<group>`` queue 0 instead,
where it waits for ``Admin.resend_dlq``.
"""

from __future__ import annotations

from shmq.codec import record as fmt
from shmq.codec.ids import offset_msg_id
from shmq.codec.send_back import TO_DLQ
from shmq.model import system_topics as st
from shmq.store.write.rewrite import rewrite_record

FIRST_RETRY_LEVEL = 3  # the first redelivery waits level 3 (10 s by default), the next 4, ...
# delivery rules of an earlier life of the message: never carried into a copy the broker writes
_STALE_PROPS = (
    fmt.PROPERTY_DELAY,
    fmt.PROPERTY_TIMER_DELIVER_MS,
    fmt.PROPERTY_TIMER_DELAY_MS,
    fmt.PROPERTY_REAL_TOPIC,
    fmt.PROPERTY_REAL_QID,
    fmt.PROPERTY_TRAN_MSG,
)
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"


def consumed_record(view: memoryview | None, offset: int, size: int, group: str) -> fmt.StoredRecord:
    """The stored record a consumer of ``group`` says it consumed at commitlog ``offset``
    (``view``: the ``size`` bytes there, None if not written). ValueError unless a whole record
    starts there that a consumer of ``group`` may have read (its retry topic or a user topic)."""
    if view is None:
        raise ValueError(f"no record of {size} bytes at commitlog offset {offset}")
    status, got = fmt.check_record(view, 0, len(view), offset, verify_crc=False)
    if status != fmt.RECORD_OK or got != size:
        raise ValueError(f"no record of {size} bytes starts at commitlog offset {offset}")
    rec = fmt.decode_record(view)
    if st.is_system_topic(rec.topic) and rec.topic != st.retry_topic(group):
        raise ValueError(f"the message at {offset} is in system topic {rec.topic!r}: not one to send back")
    if not fmt.enters_consume_queue(rec.sysflag):
        raise ValueError(f"the message at {offset} was never consumable (a transaction half or rollback)")
    return rec


def retry_level(reconsume_times: int, requested: int, levels: int) -> int:
    """The delay level of a redelivery: the consumer's (capped at the last level), or for 0
    RocketMQ's rule, 3 + times already reconsumed."""
    level = requested if requested > 0 else FIRST_RETRY_LEVEL + reconsume_times
    return max(1, min(level, levels))


def send_back_record(
    raw: memoryview, rec: fmt.StoredRecord, group: str, max_reconsume_times: int, delay_level: int, levels: int
) -> tuple[str, bytes]:
    """(topic, record) of a message sent back: the retry topic with DELAY, or the DLQ once it was
    reconsumed ``max_reconsume_times`` times or ``delay_level`` is -1."""
    to_dlq = delay_level == TO_DLQ or rec.reconsume_times >= max_reconsume_times
    delay = None if to_dlq else retry_level(rec.reconsume_times, delay_level, levels)
    return _copy(raw, rec, group, to_dlq, max_reconsume_times, delay)


def revive_record(
    raw: memoryview, rec: fmt.StoredRecord, group: str, to_dlq: bool, max_attempts: int
) -> tuple[str, bytes]:
    """(topic, record) of a POP message not acked in its invisible time: the retry topic with NO
    delay (the invisible time was the backoff), or the DLQ once its attempts are used up."""
    return _copy(raw, rec, group, to_dlq, max_attempts - 1, None)


def _copy(
    raw: memoryview, rec: fmt.StoredRecord, group: str, to_dlq: bool, max_reconsume_times: int, delay: int | None
) -> tuple[str, bytes]:
    """The copy under the group's retry topic (or DLQ) with RETRY_TOPIC, ORIGIN_MESSAGE_ID and
    RECONSUMETIMES + 1, and DELAY when ``delay`` is a level."""
    props = rec.properties
    topic = st.dlq_topic(group) if to_dlq else st.retry_topic(group)
    set_props = {
        fmt.PROPERTY_RETRY_TOPIC: props.get(fmt.PROPERTY_RETRY_TOPIC) or rec.topic,
        PROPERTY_ORIGIN_MESSAGE_ID: props.get(PROPERTY_ORIGIN_MESSAGE_ID)
        or offset_msg_id(rec.store_host, rec.physical_offset),
        fmt.PROPERTY_MAX_RECONSUME_TIMES: str(max_reconsume_times),
    }
    if delay is not None:
        set_props[fmt.PROPERTY_DELAY] = str(delay)
    record = rewrite_record(
        raw,
        topic=topic,
        queue_id=0,
        set_props=set_props,
        drop_props=_STALE_PROPS,
        sysflag=rec.sysflag & ~fmt.TRANSACTION_MASK,
        reconsume_times=rec.reconsume_times + 1,
    )
    return topic, record


def resent_record(raw: memoryview) -> tuple[str, bytes]:
    """(original topic, record) of a dead letter put back: its retry bookkeeping dropped and its
    reconsume count reset, so its consumers get the full retries again. ValueError for a record
    without RETRY_TOPIC (not written by a send-back)."""
    rec = fmt.decode_record(raw)
    topic = rec.properties.get(fmt.PROPERTY_RETRY_TOPIC)
    if not topic or st.is_system_topic(topic):
        raise ValueError(f"dead letter at {rec.physical_offset} has no usable RETRY_TOPIC ({topic!r:.60})")
    record = rewrite_record(
        raw,
        topic=topic,
        queue_id=0,
        reconsume_times=0,
        drop_props=(*_STALE_PROPS, fmt.PROPERTY_RETRY_TOPIC, fmt.PROPERTY_MAX_RECONSUME_TIMES),
    )
    return topic, record
