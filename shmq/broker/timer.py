"""TimerService: delivers the messages parked under ``rmq_sys_wheel_timer`` (a ``deliver_at`` or
``delay`` send) at their due time, from the broker loop's 10 ms tick (RocketMQ 5's timer
message store, RIP-43, with the timer topic's consume queue as the timer log).

The pure part is ``shmq.broker.timer_wheel``: the pending keys in memory (sorted runs, 16 bytes
a message) and the checkpoint whose invariant makes a restart neither lose nor re-deliver
beyond the tick in flight. This module reads the log into the runs, puts what is due to its
real topic with one internal put per tick, and writes ``config/timerCheckpoint.json`` after
every delivering tick (no fsync: a killed process loses no page cache; the offsets interval
and shutdown fsync it). At start the runs are rebuilt from the log, from the checkpoint's
``scanFrom`` on, keeping only what it does not count as delivered.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from shmq.broker.schedule import delivered_record
from shmq.broker.timer_wheel import PendingTimers, TimerCheckpoint
from shmq.codec import record as fmt
from shmq.model.system_topics import TIMER_TOPIC
from shmq.store.config_files import load_json, set_aside, write_json
from shmq.store.consume_queue import BLANK_SIZE, ConsumeQueue
from shmq.store.message_store import MessageStore
from shmq.store.write_retry import WriteRetry

log = logging.getLogger("shmq.broker")

MAX_DELIVER_PER_TICK = 2048  # one put stays short, the loop keeps serving clients (~200 k/s at 100 ticks/s)
READ_PER_TICK = 65536  # log entries read into memory per tick
PutInternal = Callable[[list[tuple[str, int, bytes]]], Any]


class TimerService:
    """Timer delivery driven by ``tick(now_ms)``; progress in ``config/timerCheckpoint.json``."""

    def __init__(self, store: MessageStore, put_internal: PutInternal) -> None:
        self.store = store
        self.put_internal = put_internal
        self.path = os.path.join(store.store_dir, "config", "timerCheckpoint.json")
        self.pending_keys = PendingTimers()
        self.check = self._load_checkpoint()
        self.dirty = False  # the checkpoint moved since the last write
        self._write = WriteRetry(log, "writing timerCheckpoint.json")  # a read-only or full disk: logged once
        self.unsynced = False  # written without fsync since the last durable write
        self.delivered = 0
        self.late = 0  # delivered on reading because the wall clock had stepped back
        self._rebuild()

    # ------------------------------------------------------------------ start

    def _load_checkpoint(self) -> TimerCheckpoint:
        loaded = load_json(self.path, TimerCheckpoint.from_json)
        if loaded.source:
            if loaded.damaged:
                log.error("timer checkpoint damaged (%s); using %s", " | ".join(loaded.problems), loaded.source)
            return TimerCheckpoint.from_json(loaded.data)
        if loaded.damaged:  # no usable copy: every parked message still in the log is delivered (again)
            log.error(
                "timer checkpoint damaged (%s) and no usable backup: timer messages still in the log are "
                "delivered from its start, those delivered before may come twice",
                " | ".join(loaded.problems),
            )
            set_aside(self.path)
        return TimerCheckpoint()

    def _queue(self) -> ConsumeQueue | None:
        cq = self.store.find_consume_queue(TIMER_TOPIC, 0)
        return cq if isinstance(cq, ConsumeQueue) else None

    def _rebuild(self) -> None:
        """Pending keys from the log: entries from scanFrom to the checkpoint's E not counted as
        delivered; the log past E is read by the ticks (the late rule applies there)."""
        cq = self._queue()
        hi = cq.max_offset if cq is not None else 0
        ck = self.check
        if ck.enqueue_offset > hi:  # a power loss took log entries the checkpoint had read
            log.error(
                "timer checkpoint read the timer log up to %d but it ends at %d (lost in a power failure?); "
                "continuing from its end",
                ck.enqueue_offset,
                hi,
            )
            self.check = ck = TimerCheckpoint(hi, ck.cursor_due, min(ck.cursor_offset, hi - 1), min(ck.scan_from, hi))
        if cq is None:
            return
        for due, q in _read(cq, ck.scan_from, ck.enqueue_offset):
            keep = ~ck.delivered(due, q)
            self.pending_keys.add(due[keep], q[keep])
        if len(self.pending_keys):
            log.info("timer: %d messages pending", len(self.pending_keys))

    # ------------------------------------------------------------------ tick

    def pending(self) -> int:
        """Timer messages parked and not delivered yet (for the monitor): the ones in memory
        plus the log not read yet."""
        cq = self._queue()
        unread = max(0, cq.max_offset - max(self.check.enqueue_offset, cq.min_offset)) if cq is not None else 0
        return len(self.pending_keys) + unread

    def next_due_ms(self) -> int | None:
        return self.pending_keys.earliest()

    def tick(self, now_ms: int) -> int:
        """Read new log entries, deliver what is due; the number delivered."""
        n = 0
        cq = self._queue()
        if cq is not None and cq.max_offset > self.check.enqueue_offset:
            n += self._read_new(cq)
        first = self.pending_keys.earliest()
        if first is not None and first <= now_ms and cq is not None:
            n += self._deliver_due(cq, now_ms)
        if n:
            self.persist(durable=False)
        return n

    def _read_new(self, cq: ConsumeQueue) -> int:
        """New log entries into memory; late ones (behind the cursor) delivered at once."""
        ck = self.check
        end = min(cq.max_offset, ck.enqueue_offset + READ_PER_TICK)
        chunks = list(_read(cq, ck.enqueue_offset, end))
        due = np.concatenate([d for d, _ in chunks]) if chunks else np.empty(0, np.int64)
        q = np.concatenate([o for _, o in chunks]) if chunks else np.empty(0, np.int64)
        late = ck.late(due)
        n = int(late.sum())
        if n:
            self._put(cq, q[late])  # raises: nothing read is kept, the next tick reads it again
            self.late += n
            due, q = due[~late], q[~late]
        self.pending_keys.add(due, q)
        self.check = TimerCheckpoint(end, ck.cursor_due, ck.cursor_offset, ck.scan_from)
        self.dirty = True
        return n

    def _deliver_due(self, cq: ConsumeQueue, now_ms: int) -> int:
        due, q, counts = self.pending_keys.due(now_ms, MAX_DELIVER_PER_TICK)
        if not len(q):
            return 0
        self._put(cq, q)  # raises (disk full): the keys stay pending, the next tick tries again
        self.pending_keys.advance(counts)
        ck = self.check
        self.check = TimerCheckpoint(ck.enqueue_offset, int(due[-1]), int(q[-1]), ck.scan_from)
        self.dirty = True
        return len(q)

    def _put(self, cq: ConsumeQueue, offsets: np.ndarray) -> None:
        """The parked records at these queue offsets to their real topics, one put."""
        items = []
        for off in offsets.tolist():
            e = cq.entry(off)
            view = (
                None
                if e is None or int(e["size"]) == BLANK_SIZE
                else self.store.commitlog.data(int(e["offset"]), int(e["size"]))
            )
            if view is None:  # cleanup took it (fileReservedTime shorter than the delay)
                log.error("timer message at queue offset %d was removed by cleanup before it was due", off)
                continue
            try:
                record, topic, qid = delivered_record(view)
            except (ValueError, fmt.CorruptRecordError) as err:
                log.error("timer message at queue offset %d cannot be delivered, skipped: %s", off, err)
                continue
            items.append((topic, qid, record))
        if items:
            r = self.put_internal(items)
            refused = getattr(r, "refused", None)
            if refused is not None and refused.any():
                for i in np.flatnonzero(refused).tolist():
                    log.error("timer message for %s was refused on delivery: %s", items[i][0], r.reason(i)[1])
            self.delivered += len(items)

    # ------------------------------------------------------------------ progress

    def persist(self, durable: bool = True) -> None:
        """Write the checkpoint (a failure is logged: the next tick or interval tries again). A
        durable write also moves scanFrom up to the smallest pending offset."""
        if durable:
            low = self.pending_keys.min_offset()
            ck = self.check
            scan = ck.enqueue_offset if low is None else min(low, ck.enqueue_offset)
            if scan != ck.scan_from:
                self.check = TimerCheckpoint(ck.enqueue_offset, ck.cursor_due, ck.cursor_offset, scan)
                self.dirty = True
        if not (self.dirty or (durable and self.unsynced)):
            return
        now = time.monotonic()
        if not (durable or self._write.due(now)):  # failing: a tick's write waits for its retry delay
            return
        try:
            write_json(self.path, self.check.to_json(), durable=durable)
            self.dirty, self.unsynced = False, not durable
        except OSError as e:
            self._write.failed(e, now)
            return
        self._write.succeeded()


def _read(cq: ConsumeQueue, start: int, end: int, chunk: int = 1 << 20) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(due ms, queue offset) arrays of the log entries [start, end), blanks left out, in chunks."""
    off = max(start, cq.min_offset)
    while off < end:
        entries = cq.get_range(off, min(chunk, end - off))
        if not len(entries):
            break
        q = np.arange(off, off + len(entries), dtype=np.int64)
        real = entries["size"] != BLANK_SIZE
        yield entries["tags_code"][real].astype(np.int64), q[real]
        off += len(entries)
