"""PopReviveService: POP messages not acked within their invisible time come back (RocketMQ 5's
PopReviveService), from the broker's tick.

A message past its deadline is stored again under ``%RETRY%<group>`` queue 0 (RETRY_TOPIC = its
first topic, reconsume times + 1, no delay: the invisible time was the backoff), or under
``%DLQ%<group>`` once it was delivered ``max_attempts`` times; the copy is stored first and the
row settled second (a crash in between gives a duplicate, never a loss). A FIFO message is not
copied: its queue is handed out again in place by the next POP (the group's long polls are
woken), until its attempts are used up and it goes to the DLQ, freeing the queue.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from shmq.broker.pop_state import QueueKey, Row
from shmq.broker.retry import revive_record
from shmq.codec import pop_log as L
from shmq.codec import record as fmt

if TYPE_CHECKING:
    from shmq.broker.core import BrokerCore
    from shmq.broker.pop_store import PopStore
    from shmq.broker.processors.pop import PopProcessor

log = logging.getLogger("shmq.broker")

REVIVE_PER_TICK = 2048  # rows revived per tick: one put stays short, the loop keeps serving
RETRY_LATER_MS = 1000  # a revive whose put failed (a full disk) is tried again this much later


class PopReviveService:
    """A TimedService of the core: ``tick`` revives what is due."""

    def __init__(self, core: BrokerCore, store: PopStore, processor: PopProcessor) -> None:
        self.core = core
        self.store = store
        self.processor = processor
        self.revived = 0  # copies stored under a retry topic
        self.dead = 0  # copies stored under a DLQ

    def next_due_ms(self) -> int | None:
        return self.store.state.next_due_ms()

    def persist(self, durable: bool = True) -> None:
        if durable:
            self.store.sync()

    def tick(self, now_ms: int) -> int:
        """Revive the rows past their deadline; the number settled."""
        self.store.tick(now_ms)
        due = self.store.state.due(now_ms, REVIVE_PER_TICK)
        if not due:
            return 0
        items: list[tuple[str, int, bytes]] = []
        done: dict[QueueKey, list[int]] = {}
        for key, offset, row in due:
            if row.fifo and row.attempt < row.max_attempts:
                self.processor.wake_group(key[0])  # handed out again in place by the next POP
                continue
            copy = self._copy(key, offset, row)
            if copy is not None:
                items.append(copy)
            done.setdefault(key, []).append(offset)
        if items:
            try:
                r = self.core.put_internal(items)
                gc = self.core.store.group_commit
                if self.store.sync_flush and gc is not None:  # the copies on disk before their rows are settled
                    gc.flush_now(r.end_offset)
            except Exception:
                for key, offset, row in due:
                    self.store.state.retry_later(key, offset, row, now_ms + RETRY_LATER_MS)
                raise
            for topic, _, _ in items:
                if topic.startswith("%DLQ%"):
                    self.dead += 1
                else:
                    self.revived += 1
        if done:
            try:
                self.store.append(
                    b"".join(L.encode(L.SETTLE, *key, 0, L.settle_rows(offs)) for key, offs in done.items())
                )
            except OSError:  # logged by the store; settled all the same: a restart may bring them again
                pass
            self.processor.settled(done)
        return sum(map(len, done.values()))

    def _copy(self, key: QueueKey, offset: int, row: Row) -> tuple[str, int, bytes] | None:
        """The retry or DLQ copy of a row's message; None (logged) when its record is gone."""
        group = key[0]
        raw = self.core.store.commitlog.data(row.phys, row.size)
        try:
            if raw is None:
                raise ValueError("its record is no longer in the commitlog")
            rec = fmt.decode_record(raw)
        except (ValueError, fmt.CorruptRecordError) as e:
            log.warning("POP message %s queue %d offset %d of group %s not revived: %s", *key[1:], offset, group, e)
            return None
        topic, record = revive_record(raw, rec, group, row.attempt >= row.max_attempts, row.max_attempts)
        return topic, 0, record
