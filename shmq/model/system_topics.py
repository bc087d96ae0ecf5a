"""System topics: the topics the broker itself writes (RocketMQ's names), and the rule that
users may not send to them.

Delayed messages wait under ``SCHEDULE_TOPIC_XXXX`` (one queue per delay level) or, for an
arbitrary delivery time, under ``rmq_sys_wheel_timer``; transaction halves and their op
records live under ``RMQ_SYS_TRANS_HALF_TOPIC`` / ``RMQ_SYS_TRANS_OP_HALF_TOPIC``; a consumer
group's redeliveries go to ``%RETRY%<group>`` and its dead letters to ``%DLQ%<group>``.
Clients may write only the trace topic (trace records are sent by clients, as in RocketMQ).
"""

from __future__ import annotations

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
# the consumer group whose committed offset is the transaction check service's progress in the half queue
TRANS_CHECK_GROUP = "CID_RMQ_SYS_TRANS"

SYSTEM_TOPIC_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, SCHEDULE_TOPIC, "RMQ_SYS_", "rmq_sys_")
# system topics a client may send to
CLIENT_WRITABLE = frozenset({TRACE_TOPIC})
# topics the broker creates at start: name -> queue count (SCHEDULE_TOPIC_XXXX: one per delay level, set by the broker)
BROKER_TOPICS = {TIMER_TOPIC: 1, TRANS_HALF_TOPIC: 1, TRANS_OP_HALF_TOPIC: 1, TRACE_TOPIC: 1}


def is_system_topic(topic: str) -> bool:
    """Retry, dead-letter, schedule, timer, transaction and trace topics."""
    return topic.startswith(SYSTEM_TOPIC_PREFIXES)


def is_parking_topic(topic: str) -> bool:
    """The schedule and timer topics: their consume-queue tag field is a due time, not a tag hash."""
    return topic in (SCHEDULE_TOPIC, TIMER_TOPIC)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def client_may_send(topic: str) -> bool:
    """Whether a client's send to ``topic`` is allowed (every user topic, and the trace topic)."""
    return not is_system_topic(topic) or topic in CLIENT_WRITABLE
