"""Dead letters put back on their topics (``Admin.resend_dlq``), each at most once.

Progress per group is kept in ``config/dlqResend.json``: ``{"groups": {"<group>": {"offset": n,
"done": [queue offsets]}}}``. Every dead letter below ``offset`` in ``%DLQ%<group>`` queue 0 was
resent (or was there before cleanup took it); ``done`` lists those above it resent one by one
(by message id). A resend of all starts at ``offset`` and skips ``done``; marked entries fold
into ``offset`` as soon as they join it. The file is written (fsync'd) after the messages are
stored and before the admin reply: a broker killed between the two may resend that call's
messages once more after its restart (at least once, never lost), nothing else twice.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from shmq.broker.retry import PROPERTY_ORIGIN_MESSAGE_ID, resent_record
from shmq.broker.topics import TopicConfigManager
from shmq.codec import record as fmt
from shmq.model.system_topics import dlq_topic
from shmq.store.config_files import load_json, write_json
from shmq.store.consume_queue import BLANK_SIZE
from shmq.store.message_store import MessageStore
from shmq.store.write.result import PutMessageResult

log = logging.getLogger("shmq.broker")

MAX_RESEND_PER_CALL = 1000  # one admin call stays short: the broker loop serves clients meanwhile
SCAN_CHUNK = 1024


class Resender(Protocol):
    """What resending needs of the broker core."""

    store: MessageStore
    topics: TopicConfigManager

    def put_internal(self, items: list[tuple[str, int, bytes]], inspect: bool = False) -> PutMessageResult: ...


@dataclass
class GroupProgress:
    offset: int = 0
    done: set[int] = field(default_factory=set)

    def mark(self, offsets: Iterable[int]) -> None:
        """Note resent queue offsets; the ones joining ``offset`` fold into it."""
        self.done.update(o for o in offsets if o >= self.offset)
        while self.offset in self.done:
            self.done.discard(self.offset)
            self.offset += 1

    def skip_to(self, offset: int) -> None:
        """Everything below ``offset`` is settled (resent, or cleaned up before it could be)."""
        if offset > self.offset:
            self.offset = offset
            self.done = {o for o in self.done if o >= offset}
            self.mark(())


def parse_progress(data: Any) -> dict[str, GroupProgress]:
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, dict):
        raise ValueError('not a {"groups": {...}} object')
    out = {}
    for name, g in groups.items():
        if (
            not isinstance(g, dict)
            or type(g.get("offset")) is not int
            or g["offset"] < 0
            or not isinstance(g.get("done", []), list)
            or any(type(o) is not int for o in g.get("done", []))
        ):
            raise ValueError(f"group {name!r:.40}: not an offset and a list of done offsets")
        out[str(name)] = GroupProgress(g["offset"], set(g.get("done", [])))
    return out


class DlqResendService:
    """Resends a group's dead letters to the topics they were first sent to."""

    def __init__(self, core: Resender) -> None:
        self.core = core
        self.path = os.path.join(core.store.store_dir, "config", "dlqResend.json")
        loaded = load_json(self.path, parse_progress)
        if loaded.damaged:
            log.error(
                "DLQ resend progress damaged (%s); using %s",
                " | ".join(loaded.problems),
                loaded.source or "none (a resend of all may resend dead letters resent before)",
            )
        self.progress = parse_progress(loaded.data) if loaded.source else {}

    def resend(self, group: str, msg_ids: list[str] | None, max_num: int) -> dict[str, Any]:
        """Resend up to ``max_num`` dead letters of ``group`` not resent yet (only those whose
        UNIQ_KEY, offset id or ORIGIN_MESSAGE_ID is in ``msg_ids``, if given)."""
        store = self.core.store
        cq = store.find_consume_queue(dlq_topic(group), 0)
        if cq is None:
            return {"resent": [], "skipped": [], "offset": 0, "remaining": 0}
        prog = self.progress.setdefault(group, GroupProgress())
        prog.skip_to(cq.min_offset)
        wanted = set(msg_ids) if msg_ids is not None else None
        items: list[tuple[str, int, bytes]] = []
        resent: list[tuple[int, str]] = []
        skipped: list[str] = []
        offset, hi = prog.offset, cq.max_offset
        while offset < hi and len(items) < max_num:
            entries = cq.get_range(offset, min(SCAN_CHUNK, hi - offset))
            if not len(entries):
                break
            for k, e in enumerate(entries):
                qoff = offset + k
                if int(e["size"]) == BLANK_SIZE or qoff in prog.done or len(items) >= max_num:
                    continue
                raw = store.commitlog.data(int(e["offset"]), int(e["size"]))
                if raw is None:
                    continue
                item = self._resent(raw, wanted, skipped)
                if item is not None:
                    items.append(item[0])
                    resent.append((qoff, item[1]))
            offset += len(entries)
        if items:
            self.core.put_internal(items)
            prog.mark(q for q, _ in resent)
            write_json(
                self.path,
                {"groups": {n: {"offset": g.offset, "done": sorted(g.done)} for n, g in sorted(self.progress.items())}},
            )
        return {
            "resent": [m for _, m in resent],
            "skipped": skipped,
            "offset": prog.offset,
            "remaining": max(0, hi - prog.offset - len(prog.done)),
        }

    def _resent(
        self, raw: memoryview, wanted: set[str] | None, skipped: list[str]
    ) -> tuple[tuple[str, int, bytes], str] | None:
        """((topic, queue id, record), msg id) of one dead letter to resend; None to leave it."""
        try:
            rec = fmt.decode_record(raw)
        except fmt.CorruptRecordError as e:
            skipped.append(str(e))
            return None
        msg_id = rec.uniq_key or rec.offset_msg_id
        if wanted is not None and not wanted & {
            msg_id,
            rec.offset_msg_id,
            rec.properties.get(PROPERTY_ORIGIN_MESSAGE_ID),
        }:
            return None
        try:
            topic, record = resent_record(raw)
        except (ValueError, fmt.CorruptRecordError) as e:
            skipped.append(f"{msg_id}: {e}")
            return None
        tc = self.core.topics.get(topic)
        if tc is None or tc.write_queue_nums < 1:
            skipped.append(f"{msg_id}: topic {topic!r} does not exist any more")
            return None
        return (topic, rec.queue_offset % tc.write_queue_nums, record), msg_id
