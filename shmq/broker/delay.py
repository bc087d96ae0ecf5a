"""DelayLevelService: delivers the messages parked under ``SCHEDULE_TOPIC_XXXX`` when they are
due (RocketMQ's ScheduleMessageService, without its timer thread per level).

Each level's queue is in due order (every message of a level waits the same time), so a level
needs only its next offset and the due time of the message there. The service keeps one table
of those (the "timer structure": level -> next due ms) and, on the broker's tick, looks only at
the levels whose head is due or whose queue grew since it last looked; everything due goes to
its real topic with one internal put. Progress is ``config/delayOffset.json`` (RocketMQ's
``{"offsetTable": {"<level>": offset}}``), rewritten after each delivering tick, before the
next one: a broker killed between a delivery and that write delivers that tick's messages once
more after restart (at least once, as RocketMQ); nothing parked is lost. The write skips fsync
(a killed process loses no page cache); the periodic persist and shutdown fsync it.

What the service survives: a ``messageDelayLevel`` changed between restarts (a message keeps
the due time it was parked with; queues of levels no longer configured are still served to
their end, and a level whose delay shrank delivers its newer messages once the older head is
due); cleanup that removed parked records (skipped, logged); a damaged delayOffset.json (its
backup, else the queues' start: parked messages still in the log are delivered again, loudly);
an offset past its queue's end (the queue lost entries in a power failure: the end is used).
Levels never wait for each other: each level's head is looked at on its own.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from shmq.broker.schedule import delivered_record
from shmq.codec import record as fmt
from shmq.model.system_topics import SCHEDULE_TOPIC
from shmq.store.config_files import load_json, set_aside, write_json
from shmq.store.consume_queue import BLANK_SIZE
from shmq.store.message_store import MessageStore
from shmq.store.write_retry import WriteRetry

log = logging.getLogger("shmq.broker")

MAX_DELIVER_PER_TICK = 2048  # per level: one put stays short, the loop keeps serving clients
# (topic, queue id, record) -> the broker's internal put
PutInternal = Callable[[list[tuple[str, int, bytes]]], Any]


def parse_delay_offsets(data: Any) -> dict[int, int]:
    table = data.get("offsetTable") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise ValueError('not a {"offsetTable": {...}} object')
    out = {}
    for level, offset in table.items():
        if not str(level).isdigit() or type(offset) is not int or offset < 0:
            raise ValueError(f"entry {level!r:.20}: {offset!r:.20} is not level -> offset")
        out[int(level)] = offset
    return out


class DelayLevelService:
    """The delay levels' progress and delivery, driven by ``tick(now_ms)`` from the broker loop."""

    def __init__(self, store: MessageStore, levels_ms: list[int], put_internal: PutInternal) -> None:
        self.store = store
        self.levels_ms = levels_ms
        self.put_internal = put_internal
        self.path = os.path.join(store.store_dir, "config", "delayOffset.json")
        loaded = load_json(self.path, parse_delay_offsets)
        if loaded.damaged:
            log.error(
                "delay offsets damaged (%s); using %s",
                " | ".join(loaded.problems),
                loaded.source or "the schedule queues' start (parked messages may be delivered twice)",
            )
            if not loaded.source:
                set_aside(self.path)  # so the next write does not rotate it over a good .bak
        self.dirty = False  # offsets moved since the last write
        self._write = WriteRetry(log, "writing delayOffset.json")  # a read-only or full disk: logged once
        self.unsynced = False  # written without fsync since the last durable write
        self.delivered = 0
        self.offsets: dict[int, int] = parse_delay_offsets(loaded.data) if loaded.source else {}
        # levels served: the configured ones and any other whose queue holds parked messages
        stored = self.store.topics().get(SCHEDULE_TOPIC, [])
        self.levels = list(range(1, max([len(levels_ms), *(q + 1 for q in stored)]) + 1))
        for level, offset in list(self.offsets.items()):
            cq = self.store.find_consume_queue(SCHEDULE_TOPIC, level - 1)
            end = cq.max_offset if cq is not None else 0
            if offset > end:
                log.error(
                    "delay level %d progress %d is past its queue's end %d (entries lost in a power "
                    "failure?); continuing from the end",
                    level,
                    offset,
                    end,
                )
                self.offsets[level] = end
                self.dirty = True
        if len(self.levels) > len(levels_ms):
            log.warning(
                "delay levels %d..%d are no longer in messageDelayLevel; their parked messages are "
                "delivered at the time they were given",
                len(levels_ms) + 1,
                len(self.levels),
            )
        # level -> (queue max offset when looked at, due ms of the head; -1: nothing waits)
        self._heads: dict[int, tuple[int, int]] = {}

    def pending(self) -> int:
        """Messages parked and not delivered yet (for the monitor)."""
        total = 0
        for level in self.levels:
            cq = self.store.find_consume_queue(SCHEDULE_TOPIC, level - 1)
            if cq is not None:
                total += max(0, cq.max_offset - max(self.offsets.get(level, 0), cq.min_offset))
        return total

    def next_due_ms(self) -> int | None:
        """The earliest head due time of the levels looked at (0: a level must be looked at again)."""
        dues = [due for _, due in self._heads.values() if due >= 0]
        return min(dues) if dues else None

    def tick(self, now_ms: int) -> int:
        """Deliver what is due; the number delivered."""
        n = 0
        for level in self.levels:
            cq = self.store.find_consume_queue(SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            hi = cq.max_offset
            seen = self._heads.get(level)
            if seen is not None and seen[0] == hi and (seen[1] < 0 or seen[1] > now_ms):
                continue  # nothing new and the head is not due
            try:
                n += self._deliver(level, cq, hi, now_ms)
            except Exception:  # a full disk, no room for a topic: this level retries next tick, the others go on
                log.exception("delivering delay level %d failed", level)
        if n:
            self.persist(durable=False)
        return n

    def _deliver(self, level: int, cq: Any, hi: int, now_ms: int) -> int:
        offset = max(self.offsets.get(level, 0), cq.min_offset)
        entries = cq.get_range(offset, min(hi - offset, MAX_DELIVER_PER_TICK))
        if not len(entries):
            self._heads[level] = (hi, -1)
            return 0
        due = entries["tags_code"].astype(np.int64)
        count = int(np.argmax(due > now_ms)) if (due > now_ms).any() else len(entries)
        items = []
        for e in entries[:count]:
            if int(e["size"]) == BLANK_SIZE:
                continue
            view = self.store.commitlog.data(int(e["offset"]), int(e["size"]))
            if view is None:  # cleanup took it (fileReservedTime shorter than the delay): nothing left to deliver
                log.error(
                    "delay level %d message at commitlog offset %d was removed by cleanup before it was due",
                    level,
                    int(e["offset"]),
                )
                continue
            try:
                items.append(delivered_record(view))
            except (ValueError, fmt.CorruptRecordError) as err:
                log.error(
                    "parked message at commitlog offset %d cannot be delivered, skipped: %s", int(e["offset"]), err
                )
        if items:
            self.put_internal([(topic, qid, record) for record, topic, qid in items])
        self.offsets[level] = offset + count
        self.dirty = self.dirty or count > 0
        nxt = offset + count
        head_due = int(due[count]) if count < len(entries) else (-1 if nxt >= hi else 0)
        self._heads[level] = (hi, head_due)
        self.delivered += len(items)
        return count

    def persist(self, durable: bool = True) -> None:
        """Write delayOffset.json (a failure is logged: the next tick or interval tries again)."""
        if not (self.dirty or (durable and self.unsynced)):
            return
        now = time.monotonic()
        if not (durable or self._write.due(now)):  # failing: a tick's write waits for its retry delay
            return
        try:
            write_json(
                self.path, {"offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}}, durable=durable
            )
            self.dirty, self.unsynced = False, not durable
        except OSError as e:
            self._write.failed(e, now)
            return
        self._write.succeeded()
