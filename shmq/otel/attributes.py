"""The span and metric attributes, by the OpenTelemetry messaging semantic conventions.

``messaging.system`` is ``rocketmq``: shmq's model is RocketMQ's (topics, queues, tags, keys,
producer and consumer groups, clustering and broadcasting), and the conventions define the
``messaging.rocketmq.*`` attributes (tag, keys, message type, consumption model) under that
system only; backends and dashboards built for RocketMQ then read shmq's spans as they are. The
broker name goes into ``server.address``, so a span still says which shmq broker served it.

Pure Python: nothing here imports OpenTelemetry (the attributes are plain dicts).
"""

from __future__ import annotations

from collections.abc import Sequence

from shmq.codec import record as fmt
from shmq.model.consumer_types import MessageModel
from shmq.model.message import Message, MessageBatch
from shmq.model.message_ext import MessageExt

SYSTEM = "rocketmq"

MESSAGING_SYSTEM = "messaging.system"
OPERATION_NAME = "messaging.operation.name"
OPERATION_TYPE = "messaging.operation.type"
DESTINATION = "messaging.destination.name"
PARTITION = "messaging.destination.partition.id"  # the queue id
MESSAGE_ID = "messaging.message.id"
BATCH_COUNT = "messaging.batch.message_count"
CONSUMER_GROUP = "messaging.consumer.group.name"
TAG = "messaging.rocketmq.message.tag"
KEYS = "messaging.rocketmq.message.keys"
MESSAGE_TYPE = "messaging.rocketmq.message.type"
MESSAGE_GROUP = "messaging.rocketmq.message.group"
DELAY_LEVEL = "messaging.rocketmq.message.delay_time_level"
CONSUMPTION_MODEL = "messaging.rocketmq.consumption_model"
SERVER_ADDRESS = "server.address"
ERROR_TYPE = "error.type"

SHARDING_KEY = "__SHARDINGKEY"  # the producer's sharding_key property (RocketMQ 5's message group)
_DELAY_KEYS = frozenset({fmt.PROPERTY_DELAY, fmt.PROPERTY_TIMER_DELIVER_MS, fmt.PROPERTY_TIMER_DELAY_MS})

Sent = Message | Sequence[Message] | MessageBatch  # what a send hook's context carries
Attr = str | bool | int | float | list[str]  # an attribute's value, as OpenTelemetry takes it


def topic_of(sent: Sent) -> str:
    """The destination of a send ("" for an empty list, which the send refuses anyway)."""
    if isinstance(sent, Message | MessageBatch):
        return sent.topic
    return sent[0].topic if len(sent) and isinstance(sent[0], Message) else ""


def count_of(sent: Sent) -> int:
    return 1 if isinstance(sent, Message) else len(sent)


def _keys(keys: object) -> list[str] | None:
    if not keys:
        return None
    if isinstance(keys, str):
        return keys.split()
    if isinstance(keys, Sequence):
        return [k for k in keys if isinstance(k, str)] or None
    return None


def message_type(props: dict[str, str] | None, delayed: bool) -> str:
    """RocketMQ 5's message types: transaction (a half), fifo (a message group), delay, normal."""
    if props:
        if props.get(fmt.PROPERTY_TRAN_MSG) == "true":
            return "transaction"
        if SHARDING_KEY in props:
            return "fifo"
        if not _DELAY_KEYS.isdisjoint(props):
            return "delay"
    return "delay" if delayed else "normal"


def send_attributes(sent: Sent, topic: str) -> dict[str, Attr]:
    """The ``send`` span's attributes known before the answer."""
    attrs: dict[str, Attr] = {
        MESSAGING_SYSTEM: SYSTEM,
        OPERATION_NAME: "send",
        OPERATION_TYPE: "send",
        DESTINATION: topic,
    }
    if isinstance(sent, Message):
        props = sent.properties
        attrs[MESSAGE_TYPE] = message_type(props, bool(sent.delivery_rules))
        if sent.tags:
            attrs[TAG] = sent.tags
        keys = _keys(sent.keys)
        if keys:
            attrs[KEYS] = keys
        if props and SHARDING_KEY in props:
            attrs[MESSAGE_GROUP] = props[SHARDING_KEY]
        if sent.delay_level:
            attrs[DELAY_LEVEL] = sent.delay_level
        return attrs
    attrs[BATCH_COUNT] = len(sent)
    attrs[MESSAGE_TYPE] = "normal"  # a batch holds neither delayed, transactional nor fifo messages
    tags = sent.tags if isinstance(sent, MessageBatch) else (sent[0].tags if len(sent) else None)
    if tags:
        attrs[TAG] = tags
    return attrs


def consume_attributes(
    msgs: Sequence[MessageExt], topic: str, group: str, model: MessageModel | None, operation: str
) -> dict[str, Attr]:
    """A ``process`` or ``receive`` span's attributes; one message's own (id, tag, keys, queue)
    when there is one."""
    attrs: dict[str, Attr] = {
        MESSAGING_SYSTEM: SYSTEM,
        OPERATION_NAME: operation,
        OPERATION_TYPE: operation,
        CONSUMER_GROUP: group,
    }
    if topic:
        attrs[DESTINATION] = topic
    if model is not None:
        attrs[CONSUMPTION_MODEL] = "clustering" if model is MessageModel.CLUSTERING else "broadcasting"
    if len(msgs) == 1:
        m = msgs[0]
        attrs[MESSAGE_ID] = m.msg_id
        attrs[PARTITION] = str(m.queue_id)
        attrs[MESSAGE_TYPE] = message_type(m.properties, False)
        if m.tags:
            attrs[TAG] = m.tags
        keys = _keys(m.keys)
        if keys:
            attrs[KEYS] = keys
    else:
        attrs[BATCH_COUNT] = len(msgs)
    return attrs


def metric_attributes(operation: str, topic: str, group: str | None, error: str | None) -> dict[str, Attr]:
    """A metric point's attributes: few, so that the number of series stays small (no ids)."""
    attrs: dict[str, Attr] = {MESSAGING_SYSTEM: SYSTEM, OPERATION_NAME: operation}
    if topic:
        attrs[DESTINATION] = topic
    if group is not None:
        attrs[CONSUMER_GROUP] = group
    if error is not None:
        attrs[ERROR_TYPE] = error
    return attrs


def common_topic(msgs: Sequence[MessageExt]) -> str:
    """The topic of all ``msgs``, or "" when they come from several (a span is then named by its
    operation alone, as the conventions say for an unknown or mixed destination)."""
    if not msgs:
        return ""
    topic = msgs[0].topic
    for m in msgs:
        if m.topic != topic:
            return ""
    return topic
