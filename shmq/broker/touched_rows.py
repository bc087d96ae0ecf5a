"""TouchedRows: the queues a pass's puts wrote through the store's queue table, by row number.

The end of a pass publishes each touched queue's max offset into the state segment. Named by
(topic, queue id), each queue cost a dict entry, a ConsumeQueue lookup and its row in the
state segment looked up by name: ~3 us a queue, every queue of a SEND_MULTI of 256 topics. A
put through the table (``shmq.store.write.multi_put``) answers each record's row instead; here
they are gathered, made unique, and mapped to state-segment rows through a cache indexed by
row number, so the publication is one gather from the table and one scatter into the segment.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from shmq.store.queue_slots import MAX_OFFSET, QueueSlots


class QueueRows(Protocol):
    """What of the state publisher this needs: its queue rows and when they may have moved."""

    generation: int

    def queue_row(self, topic: str, queue_id: int) -> int | None: ...


class TouchedRows:
    """Rows of ``slots`` touched since the last ``take``."""

    def __init__(self, slots: QueueSlots) -> None:
        self.slots = slots
        self.pending: list[np.ndarray] = []
        self._state_rows = np.empty(0, np.int64)  # per table row: its state row, -1 none, -2 not looked up
        self._generation = -1

    def add(self, rows: np.ndarray) -> None:
        """Rows of a put's records (-1: a record that entered no queue)."""
        self.pending.append(rows)

    def take(self) -> np.ndarray:
        """The rows touched since the last call (a row may repeat: its max offset is then
        written twice, the same value; making them unique cost more than the repeats)."""
        rows = np.concatenate(self.pending) if len(self.pending) > 1 else self.pending[0]
        self.pending.clear()
        return rows[rows >= 0]

    def keys(self, rows: np.ndarray) -> list[tuple[str, int]]:
        """(topic, queue id) of each row (for what needs the names: waking consumers), once each."""
        queues = self.slots.queues
        found = (queues[r] for r in dict.fromkeys(rows.tolist()))
        return [(cq.topic, cq.queue_id) for cq in found if cq is not None]

    def published(self, publisher: QueueRows, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(state rows, max offsets) of the table rows ``rows`` that have a state row."""
        if self._generation != publisher.generation or len(self._state_rows) < len(self.slots):
            self._refresh(publisher)
        state = self._state_rows[rows]
        unknown = np.flatnonzero(state == -2)
        if len(unknown):
            queues = self.slots.queues
            for k in unknown.tolist():
                cq = queues[int(rows[k])]
                found = publisher.queue_row(cq.topic, cq.queue_id) if cq is not None else None
                state[k] = self._state_rows[rows[k]] = -1 if found is None else found
        known = state >= 0
        return state[known], self.slots.table[rows[known], MAX_OFFSET]

    def _refresh(self, publisher: QueueRows) -> None:
        """Forget the cached state rows (topics moved, or the table grew)."""
        self._state_rows = np.full(max(64, 2 * len(self.slots)), -2, np.int64)
        self._generation = publisher.generation
