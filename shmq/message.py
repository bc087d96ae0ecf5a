"""The message model users send and receive: Message, MessageQueue, SendStatus, SendResult."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Sequence

from shmq.store import format as fmt


@dataclass
class Message:
    """A message to send. ``keys`` are space-separated index keys; ``delay_level`` 1..18 delays delivery."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | None = None
    properties: dict[str, str] | None = None
    flag: int = 0
    delay_level: int = 0

    def build_properties(self, uniq_key: str) -> dict[str, str]:
        """The record's properties: TAGS, KEYS, UNIQ_KEY, DELAY, then the user's."""
        props = fmt.message_properties(self.tags, self.keys, uniq_key, self.properties)
        if self.delay_level > 0:
            props[fmt.PROPERTY_DELAY] = str(self.delay_level)
        return props


@dataclass
class MessageBatch:
    """Messages of one topic given as columns: the throughput form of ``Producer.send_batch``.

    Only the bodies differ; tags, user properties and flag are shared. ``keys`` is one string
    for all, or one (or None) per body. Encoding skips reading seven attributes of every
    Message object, which is most of a Python producer's cost per message.
    """

    topic: str
    bodies: Sequence[bytes]
    tags: str | None = None
    keys: str | Sequence[str | None] | None = None
    properties: dict[str, str] | None = None
    flag: int = 0

    def __len__(self) -> int:
        return len(self.bodies)


@dataclass(frozen=True, order=True)
class MessageQueue:
    """One queue of a topic on a broker (RocketMQ's MessageQueue)."""

    topic: str
    broker_name: str
    queue_id: int


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass
class SendResult:
    """Where a send landed. For a batch, ``msg_id`` and ``offset_msg_id`` are comma-joined, one per message."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    store_timestamp: int = 0
    count: int = 1
    phys_offsets: list[int] = field(default_factory=list)
