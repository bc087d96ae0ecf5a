"""Messages of a running broker found by key or id, read-only in the admin's own process.

What RocketMQ's mqadmin queryMsgByKey / queryMsgById / queryMsgByUniqueKey do, without a
request to the broker: the broker's state segment gives the store folder, the published end of
the commitlog and the committed offsets; the index and commitlog files are mapped read-only
(``IndexReader``, ``CommitLogReader``). Only bytes below the published end are read, and a
record is returned only if it decodes, starts where the index or id says, and has the topic
and key asked for (index hashes collide).
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from dataclasses import dataclass

from shmq.broker.groups import parse_offsets
from shmq.client.connection import open_state
from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.model.message_ext import MessageExt
from shmq.ring.state import StateView
from shmq.store.config_files import load_json
from shmq.store.read.index_reader import IndexReader
from shmq.store.read.reader import CommitLogReader

CONSUMED = "CONSUMED"
NOT_CONSUME_YET = "NOT_CONSUME_YET"
MAX_QUERY_NUM = 1000  # RocketMQ's maxMsgsNumBatch-like cap: a query stays short


@dataclass(frozen=True)
class MessageTrack:
    """One consumer group's progress past a message (RocketMQ's MessageTrack): CONSUMED when
    the group's committed offset of the message's queue is past the message's queue offset."""

    consumer_group: str
    track_type: str
    committed_offset: int


def tracks_of(rows: list[tuple[str, int]], queue_offset: int) -> list[MessageTrack]:
    """MessageTracks from (group, committed offset) rows of the message's queue, by group name."""
    return [MessageTrack(g, CONSUMED if off > queue_offset else NOT_CONSUME_YET, off) for g, off in sorted(rows)]


class LiveStore:
    """One broker's state segment and store files, read-only, for the length of a lookup."""

    def __init__(self, broker: str) -> None:
        self.state = open_state(broker)
        try:
            self.store_dir = bytes(self.state.view.header[0]["store_dir"]).rstrip(b"\0").decode()
            self.commitlog = CommitLogReader(self.store_dir)
            self.index = IndexReader(self.store_dir)
        except BaseException:
            self.state.close()
            raise

    def max_phy_offset(self) -> int:
        """The end of the commitlog the broker has published (bytes past it may be half written)."""
        return int(self.state.read(lambda v: int(v.stats[0]["max_phy_offset"])))

    def record_at(self, phys: int, max_phy: int) -> fmt.StoredRecord | None:
        """The record starting at ``phys``, or None if there is none there (damage, a stale
        index entry, an id that is not an offset id, a segment deleted by cleanup)."""
        if not 0 <= phys <= max_phy - fmt.FIXED_OVERHEAD:
            return None
        head = self.commitlog.data(phys, 4)
        if head is None:
            return None
        (size,) = struct.unpack_from(">i", head)
        if not fmt.FIXED_OVERHEAD <= size <= min(fmt.MAX_RECORD_SIZE, max_phy - phys):
            return None
        view = self.commitlog.data(phys, size)
        if view is None:
            return None
        try:
            rec = fmt.decode_record(view)
        except (fmt.CorruptRecordError, struct.error, IndexError, ValueError):
            return None
        return rec if rec.physical_offset == phys else None

    def query_by_key(self, topic: str, key: str, begin: int, end: int, max_num: int) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` among their KEYS or as UNIQ_KEY, stored in
        [begin, end] (ms), newest first."""
        max_phy = self.max_phy_offset()
        self.commitlog.refresh()
        out: list[MessageExt] = []
        seen: set[int] = set()
        for phys in self.index.query(topic, key, max_num * 2, begin, end):
            if phys in seen:
                continue
            seen.add(phys)
            rec = self.record_at(phys, max_phy)
            if (
                rec is None
                or rec.topic != topic
                or not begin <= rec.store_timestamp <= end
                or (key not in rec.keys and rec.uniq_key != key)
            ):
                continue
            msg = to_message(rec)
            if msg is not None:
                out.append(msg)
                if len(out) >= max_num:
                    break
        return out

    def by_offset_id(self, msg_id: str) -> MessageExt | None:
        """The message an offset msg id (store host + commitlog offset) names, if any."""
        try:
            host, phys = ids.parse_offset_msg_id(msg_id)
        except ValueError:
            return None
        self.commitlog.refresh()
        rec = self.record_at(phys, self.max_phy_offset())
        return to_message(rec) if rec is not None and rec.store_host == host else None

    def topics(self) -> list[str]:
        """Every topic the broker knows, from its state segment."""

        def fn(v: StateView) -> list[str]:
            used = v.topics[v.topics["used"] != 0]
            return sorted(bytes(n).rstrip(b"\0").decode() for n in used["name"])

        return self.state.read(fn)

    def committed_offsets(self, topic: str, queue_id: int) -> list[tuple[str, int]]:
        """(group, committed offset) of every group with an offset on this queue: what the broker
        last persisted (config/consumerOffset.json, every few seconds, groups without live
        members too), updated by what it publishes for groups with members (current)."""
        loaded = load_json(os.path.join(self.store_dir, "config", "consumerOffset.json"), parse_offsets)
        found = (
            {g: off for (g, t, q), off in parse_offsets(loaded.data).items() if t == topic and q == queue_id}
            if loaded.source is not None
            else {}
        )
        found.update(self.state.read(lambda v: self._live_offsets(v, topic, queue_id)))
        return [(g, off) for g, off in found.items() if off >= 0]

    @staticmethod
    def _live_offsets(v: StateView, topic: str, queue_id: int) -> list[tuple[str, int]]:
        slot = v.topic_slot(topic)
        if slot is None:
            return []
        queue = int(v.topics[slot]["queue_base"]) + queue_id
        rows = v.offsets[(v.offsets["used"] != 0) & (v.offsets["queue"] == queue)]
        names = v.groups["name"]
        return [
            (bytes(names[int(r["group"])]).rstrip(b"\0").decode(), int(r["offset"]))
            for r in rows
            if int(r["group"]) < len(names)
        ]

    def close(self) -> None:
        self.index.close()
        self.commitlog.close()
        self.state.close()

    def __enter__(self) -> LiveStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def to_message(rec: fmt.StoredRecord) -> MessageExt | None:
    """A MessageExt (body copied out of the mapping, decompressed); None if it cannot be."""
    try:
        return MessageExt.from_record(rec)
    except zlib.error:
        return None


def time_range(begin: int, end: int | None) -> tuple[int, int]:
    """[begin, end] in ms; ``end`` None is now (+1 ms: a message stored this millisecond counts)."""
    end = int(time.time() * 1000) + 1 if end is None else end
    if begin < 0 or end < begin:
        raise ValueError(f"begin and end must satisfy 0 <= begin <= end, got {begin}, {end}")
    return begin, end


def find_message(store: LiveStore, msg_id: str, topic: str | None) -> MessageExt | None:
    """The message with this id: an offset msg id first (it names its record), else a
    UNIQ_KEY through the index, in ``topic`` or every topic the broker knows."""
    msg = store.by_offset_id(msg_id)
    if msg is not None and (topic is None or msg.topic == topic):
        return msg
    begin, end = time_range(0, None)
    for t in [topic] if topic is not None else store.topics():
        for m in store.query_by_key(t, msg_id, begin, end, 4):
            if m.properties.get(fmt.PROPERTY_UNIQ_KEY) == msg_id:
                return m
    return None


def message_track(store: LiveStore, msg: MessageExt) -> list[MessageTrack]:
    """The groups with progress on the message's queue, consumed or not; none for a message
    that is in no consume queue (a transaction half, a rollback)."""
    if not fmt.enters_consume_queue(msg.sysflag):
        return []
    return tracks_of(store.committed_offsets(msg.topic, msg.queue_id), msg.queue_offset)
