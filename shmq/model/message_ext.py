"""MessageExt: a message as a consumer receives it (RocketMQ's MessageExt), with where it is stored.

A push consumer builds one per delivered message, so building one must cost little. Messages
read from the store keep their properties as the stored bytes and decode them on first use of
``properties``, ``tags``, ``keys`` or ``msg_id``; the offset id is formatted on first use too.
A listener that only reads bodies never pays for either (about 2 us of the ~4 us a message
cost to build when everything was decoded up front).
"""

from __future__ import annotations

import copy
import zlib
from typing import NamedTuple

from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.model.message import UNSET, ByValue, LazyField
from shmq.model.reprs import body_repr, fields_repr


class MessageExt(ByValue):
    """A received message. ``properties`` holds every stored property (TAGS, KEYS, UNIQ_KEY too);
    ``msg_id`` is the UNIQ_KEY, the client's id (the offset id when the producer set none);
    ``offset_msg_id`` is store host + commitlog offset; ``keys`` is space-separated."""

    _FIELDS = (
        "topic",
        "body",
        "tags",
        "keys",
        "properties",
        "queue_id",
        "queue_offset",
        "commit_log_offset",
        "born_timestamp",
        "store_timestamp",
        "reconsume_times",
        "msg_id",
        "offset_msg_id",
        "store_size",
        "sysflag",
    )
    __slots__ = (
        "topic",
        "body",
        "queue_id",
        "queue_offset",
        "commit_log_offset",
        "born_timestamp",
        "store_timestamp",
        "reconsume_times",
        "store_size",
        "sysflag",
        "store_host",
        "_raw_props",
        "_properties",
        "_tags",
        "_keys",
        "_msg_id",
        "_offset_msg_id",
    )

    def __init__(
        self,
        topic: str,
        body: bytes,
        tags: str | None = None,
        keys: str | None = None,
        properties: dict[str, str] | None = None,
        queue_id: int = 0,
        queue_offset: int = 0,
        commit_log_offset: int = 0,
        born_timestamp: int = 0,
        store_timestamp: int = 0,
        reconsume_times: int = 0,
        msg_id: str = "",
        offset_msg_id: str = "",
        store_size: int = 0,
        sysflag: int = 0,
    ) -> None:
        self.topic = topic
        self.body = body
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.born_timestamp = born_timestamp
        self.store_timestamp = store_timestamp
        self.reconsume_times = reconsume_times
        self.store_size = store_size
        self.sysflag = sysflag
        self.store_host = 0
        self._raw_props = b""
        self._properties = {} if properties is None else properties
        self._tags = tags
        self._keys = keys
        self._msg_id = msg_id
        self._offset_msg_id = offset_msg_id

    @classmethod
    def stored(
        cls,
        topic: str,
        body: bytes,
        raw_props: bytes,
        queue_id: int,
        queue_offset: int,
        commit_log_offset: int,
        born_timestamp: int,
        store_timestamp: int,
        reconsume_times: int,
        store_host: int,
        store_size: int,
        sysflag: int,
    ) -> MessageExt:
        """A message read from the store: properties stay encoded until first asked for."""
        m = _new(cls)
        m.topic = topic
        m.body = body
        m.queue_id = queue_id
        m.queue_offset = queue_offset
        m.commit_log_offset = commit_log_offset
        m.born_timestamp = born_timestamp
        m.store_timestamp = store_timestamp
        m.reconsume_times = reconsume_times
        m.store_size = store_size
        m.sysflag = sysflag
        m.store_host = store_host
        m._raw_props = raw_props
        m._properties = m._tags = m._keys = m._msg_id = m._offset_msg_id = UNSET
        return m

    @classmethod
    def from_record(cls, rec: fmt.StoredRecord) -> MessageExt:
        """Build from a decoded record, decompressing a compressed body."""
        body = bytes(rec.body)
        if rec.sysflag & fmt.FLAG_COMPRESSED:
            body = zlib.decompress(body)
        props = rec.properties
        offset_id = ids.offset_msg_id(rec.store_host, rec.physical_offset)
        m = cls(
            rec.topic,
            body,
            props.get(fmt.PROPERTY_TAGS),
            props.get(fmt.PROPERTY_KEYS),
            props,
            rec.queue_id,
            rec.queue_offset,
            rec.physical_offset,
            rec.born_timestamp,
            rec.store_timestamp,
            rec.reconsume_times,
            props.get(fmt.PROPERTY_UNIQ_KEY) or offset_id,
            offset_id,
            rec.total_size,
            rec.sysflag,
        )
        m.store_host = rec.store_host
        return m

    # ------------------------------------------------------------------ made on first use

    properties = LazyField(lambda m: fmt.decode_properties(m._raw_props))
    tags = LazyField(lambda m: m.properties.get(fmt.PROPERTY_TAGS))
    keys = LazyField(lambda m: m.properties.get(fmt.PROPERTY_KEYS))
    offset_msg_id = LazyField(lambda m: ids.offset_msg_id(m.store_host, m.commit_log_offset))
    msg_id = LazyField(lambda m: m.properties.get(fmt.PROPERTY_UNIQ_KEY) or m.offset_msg_id)

    def __repr__(self) -> str:
        """Where it is stored, its ids and tags, the body cut to its first bytes."""
        return fields_repr(
            type(self).__name__,
            (
                ("topic", self.topic),
                ("queue_id", self.queue_id),
                ("queue_offset", self.queue_offset),
                ("msg_id", self.msg_id),
                ("tags", self.tags),
                ("keys", self.keys),
                ("body", body_repr(self.body)),
                ("reconsume_times", self.reconsume_times or None),
            ),
        )

    @property
    def delivery_attempt(self) -> int:
        """Which delivery of the message this is, 1 for the first (RocketMQ 5's deliveryAttempt):
        for a message not received by POP, ``reconsume_times + 1``."""
        return self.reconsume_times + 1

    @property
    def receipt_handle(self) -> ReceiptHandle | None:
        """What a SimpleConsumer acks the message by; None for a message not received by POP."""
        return None

    @property
    def key_list(self) -> list[str]:
        return fmt.split_keys(self.keys)

    def redelivered(self) -> MessageExt:
        """A copy with ``reconsume_times`` one higher (a message delivered again)."""
        m = copy.copy(self)
        m.reconsume_times += 1
        return m


class ReceiptHandle(NamedTuple):
    """One delivery of a message by POP: the broker that handed it out, where the message is
    stored (``topic`` as stored: ``%RETRY%<group>`` for a retried message) and the delivery's
    token. A handle whose token is not the message's current delivery is stale."""

    broker_name: str
    topic: str
    queue_id: int
    queue_offset: int
    token: int


class PoppedMessageExt(MessageExt):
    """A message a SimpleConsumer received: a MessageExt with its receipt and delivery attempt.

    A subclass, so that MessageExt's slots stay the ones the compiled push path fills."""

    __slots__ = ("_receipt", "_attempt")

    _receipt: ReceiptHandle
    _attempt: int

    def delivered(self, receipt: ReceiptHandle, attempt: int) -> None:
        """Carry the delivery a POP made: its receipt and attempt (once, as the message is read)."""
        self._receipt = receipt
        self._attempt = attempt

    @property
    def delivery_attempt(self) -> int:
        """The broker's count of deliveries of this message, this one included (1 for the first)."""
        return self._attempt

    @property
    def receipt_handle(self) -> ReceiptHandle:
        """This delivery's receipt (``change_invisible_duration`` replaces it with the new one)."""
        return self._receipt

    def with_receipt(self, receipt: ReceiptHandle) -> None:
        """Carry ``receipt`` from now on (the new token of a changed invisible time)."""
        self._receipt = receipt


_new = object.__new__
