"""The read side of the store: messages of a queue from an offset, lookups by offset, id and key.

RocketMQ's DefaultMessageStore answers these next to puts; here they sit apart from the write
path and recovery (``MessageStore`` inherits them), and read only what the store has
published: consume-queue entries, commitlog records, index entries.
"""

from __future__ import annotations

import enum
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.store.commitlog import CommitLog
from shmq.store.consume_queue import BLANK_SIZE, ConsumeQueue
from shmq.store.index_file import IndexService


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"


@dataclass(slots=True)
class GetMessageResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[fmt.StoredRecord] = field(default_factory=list)


class MessageLookup(ABC):
    """Queries over a store's commitlog, consume queues and index (a base of ``MessageStore``)."""

    commitlog: CommitLog

    @property
    @abstractmethod
    def index(self) -> IndexService | None:
        """The store's index (None: messageIndexEnable is off)."""

    @property
    @abstractmethod
    def queues(self) -> Mapping[tuple[str, int], ConsumeQueue]:
        """The consume queues by (topic, queue id)."""

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset stored at or after `timestamp` (ms); max offset if none."""
        cq = self.find_consume_queue(topic, queue_id)
        return cq.offset_for_timestamp(timestamp, self.commitlog.store_timestamp_at) if cq is not None else 0

    def get_message(
        self, topic: str, queue_id: int, offset: int, max_num: int = 32, tags: set[str] | None = None
    ) -> GetMessageResult:
        """Up to `max_num` messages from `offset`, filtered by tag (None = all), RocketMQ's statuses."""
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = cq.min_offset, cq.max_offset
        if hi == 0:
            return GetMessageResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetMessageResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetMessageResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetMessageResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        entries = cq.get_range(offset, max_num)
        next_offset = offset + len(entries)
        keep = entries["size"] != BLANK_SIZE
        if tags is not None:
            keep &= np.isin(entries["tags_code"], [fmt.tags_code(t) for t in tags])
        messages = []
        for e in entries[keep]:
            rec = self.commitlog.read(int(e["offset"]))
            if rec is not None and (tags is None or rec.tags in tags):
                messages.append(rec)
        status = GetStatus.FOUND if messages else GetStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, next_offset, lo, hi, messages)

    def look_message_by_offset(self, phys_offset: int) -> fmt.StoredRecord | None:
        """The record at a commitlog offset (from an offset msg id)."""
        if phys_offset < self.commitlog.min_offset:
            return None
        return self.commitlog.read(phys_offset)

    def view_message_by_id(self, offset_msg_id: str) -> fmt.StoredRecord | None:
        _, phys = ids.parse_offset_msg_id(offset_msg_id)
        return self.look_message_by_offset(phys)

    def query_message(
        self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0, end_ts: int | None = None
    ) -> list[fmt.StoredRecord]:
        """Messages of `topic` with `key` among their KEYS or as their UNIQ_KEY, newest first."""
        if self.index is None:
            return []
        end_ts = int(time.time() * 1000) + 1 if end_ts is None else end_ts
        out: list[fmt.StoredRecord] = []
        seen = set()
        for phys in self.index.query(topic, key, max_num * 2, begin_ts, end_ts):
            if phys in seen:
                continue
            seen.add(phys)
            try:
                rec = self.look_message_by_offset(phys)
            except fmt.CorruptRecordError:  # damage recovery skipped (its index entries stay): not a match
                continue
            if (
                rec is not None
                and rec.physical_offset == phys
                and rec.topic == topic
                and (key in rec.keys or rec.uniq_key == key)
            ):
                out.append(rec)
                if len(out) >= max_num:
                    break
        return out

    def query_by_uniq_key(self, topic: str, uniq_key: str) -> fmt.StoredRecord | None:
        found = self.query_message(topic, uniq_key, max_num=1)
        return found[0] if found else None
