"""MessageExt: a message as a consumer receives it (RocketMQ's MessageExt), with where it is stored."""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from shmq.store import format as fmt


@dataclass(slots=True)
class MessageExt:
    """A received message. `properties` holds every stored property (TAGS, KEYS, UNIQ_KEY too)."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | None = None  # space-separated, as the producer gave them
    properties: dict[str, str] = field(default_factory=dict)
    queue_id: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    born_timestamp: int = 0
    store_timestamp: int = 0
    reconsume_times: int = 0
    msg_id: str = ""  # UNIQ_KEY, the client's id; the offset id when the producer set none
    offset_msg_id: str = ""  # store host + commitlog offset
    store_size: int = 0
    sysflag: int = 0

    @property
    def key_list(self) -> list[str]:
        return fmt.split_keys(self.keys)

    @classmethod
    def from_record(cls, rec: fmt.StoredRecord) -> MessageExt:
        """Build from a decoded record, decompressing a compressed body."""
        body = bytes(rec.body)
        if rec.sysflag & fmt.FLAG_COMPRESSED:
            body = zlib.decompress(body)
        props = rec.properties
        offset_id = fmt.offset_msg_id(rec.store_host, rec.physical_offset)
        return cls(rec.topic, body, props.get(fmt.PROPERTY_TAGS), props.get(fmt.PROPERTY_KEYS), props,
                   rec.queue_id, rec.queue_offset, rec.physical_offset, rec.born_timestamp, rec.store_timestamp,
                   rec.reconsume_times, props.get(fmt.PROPERTY_UNIQ_KEY) or offset_id, offset_id, rec.total_size,
                   rec.sysflag)
