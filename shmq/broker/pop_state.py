"""The broker's POP state (RocketMQ 5's pop checkpoints and acks), pure: no I/O.

Per (group, topic, queue id) a ``QueueState``: the cursor (the next queue offset this group
has not looked at) and the rows in flight (queue offset -> ``Row``: its delivery's token,
deadline, attempt, holder). Everything below the low watermark (the first row in flight, or
the cursor when none is) is settled: acked, revived, or passed over by a filter; that is what
the broker commits as the group's offset, so progress and lag read like any group's.

Tokens are one broker-wide counter: each delivery (a pop, a FIFO redelivery in place, a
change of invisible time) gets the next one, so a receipt whose token is older than the row's
is an earlier delivery's (stale) and one that is newer was never handed out (unknown). The
counter is persisted by the pop log (``shmq.broker.pop_store``) and never goes back.

Deadlines sit in a heap (lazy: an entry whose row was settled or handed out again is skipped),
so the revive tick costs only what is due. What one client holds is counted (the
``popMaxInflightPerClient`` cap keeps broker memory bounded).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from shmq.codec.pop_frames import RECEIPT_OK, RECEIPT_STALE, RECEIPT_UNKNOWN

QueueKey = tuple[str, str, int]  # (group, topic, queue id)
_HEAP_SLACK = 1024  # dead heap entries tolerated on top of twice the live rows


@dataclass(slots=True)
class Row:
    """One message in flight: its current delivery."""

    token: int
    deadline_ms: int
    attempt: int  # 1 for the first delivery
    max_attempts: int  # deliveries before it goes to %DLQ%<group>
    client: int  # the client id holding it (counted against its cap)
    phys: int  # commitlog offset and size of the record (the revive reads it there)
    size: int
    fifo: bool  # redelivered in place, never through the retry topic


@dataclass(slots=True)
class QueueState:
    """A group's progress in one queue; ``rows`` is in queue-offset order (rows are only added
    above every earlier one, and a redelivery or change updates a row where it is)."""

    cursor: int
    rows: dict[int, Row] = field(default_factory=dict)

    def low_watermark(self) -> int:
        """Every queue offset below it is settled."""
        return next(iter(self.rows), self.cursor)

    def fifo_ready(self, now_ms: int) -> list[int] | None:
        """FIFO: the offsets to hand out again in place (every row in flight is past its
        deadline and has attempts left), [] when nothing is in flight (the queue is free),
        None while the queue is held (a row still invisible, or one bound for the DLQ)."""
        if not self.rows:
            return []
        for row in self.rows.values():
            if row.deadline_ms > now_ms or row.attempt >= row.max_attempts:
                return None
        return list(self.rows)


class PopState:
    """Every group's cursors and rows in flight, the token counter and the deadline heap."""

    def __init__(self) -> None:
        self.queues: dict[QueueKey, QueueState] = {}
        self.next_token = 1
        self.held: dict[int, int] = {}  # client id -> rows it holds
        self.rows = 0
        self._heap: list[tuple[int, int, QueueKey, int]] = []  # (deadline, token, queue, offset)
        self._round_robin: dict[str, int] = {}

    # ------------------------------------------------------------------ queues

    def queue(self, key: QueueKey, start: int) -> QueueState:
        """The group's state in a queue, created at ``start`` the first time."""
        qs = self.queues.get(key)
        if qs is None:
            qs = self.queues[key] = QueueState(start)
        return qs

    def start_index(self, group: str, n: int) -> int:
        """Where a POP of ``group`` starts in its ``n`` queues: the next one each time, so
        concurrent workers spread over the queues instead of all reading the first."""
        i = self._round_robin.get(group, 0)
        self._round_robin[group] = i + 1
        return i % n if n else 0

    def client_rows(self, client: int) -> int:
        return self.held.get(client, 0)

    # ------------------------------------------------------------------ deliveries

    def take_token(self) -> int:
        token = self.next_token
        self.next_token = token + 1
        return token

    def hand_out(self, key: QueueKey, offset: int, row: Row) -> None:
        """Put ``row`` (its token taken by ``take_token``) in flight at ``offset``: a first
        delivery (above every row of the queue) or a FIFO redelivery in place."""
        qs = self.queues[key]
        old = qs.rows.get(offset)
        if old is not None:
            self._release(old.client)
        qs.rows[offset] = row
        self.rows += old is None
        self.held[row.client] = self.held.get(row.client, 0) + 1
        self._push(row.deadline_ms, row.token, key, offset)

    def hand_out_new(self, key: QueueKey, items: list[tuple[int, Row]], client: int) -> None:
        """Put a pop's first deliveries in one queue in flight at once (the per-row work of
        ``hand_out`` done per batch): ``items`` are (offset, row) above every row of the queue,
        in order, each row held by ``client`` with its token taken by ``take_token``."""
        if not items:
            return
        self.queues[key].rows.update(items)
        self.rows += len(items)
        self.held[client] = self.held.get(client, 0) + len(items)
        heap, push = self._heap, heapq.heappush
        for offset, row in items:
            push(heap, (row.deadline_ms, row.token, key, offset))

    def check(self, key: QueueKey, offset: int, token: int) -> int:
        """The status of a receipt: OK (the row's current delivery), STALE (an earlier one) or
        UNKNOWN (never handed out, or settled)."""
        qs = self.queues.get(key)
        row = qs.rows.get(offset) if qs is not None else None
        if row is None or token > row.token or token <= 0:
            return RECEIPT_UNKNOWN
        return RECEIPT_OK if token == row.token else RECEIPT_STALE

    def settle(self, key: QueueKey, offset: int) -> Row | None:
        """The row at ``offset`` is done (acked, revived, or dropped): it leaves the state."""
        qs = self.queues.get(key)
        row = qs.rows.pop(offset, None) if qs is not None else None
        if row is not None:
            self.rows -= 1
            self._release(row.client)
        return row

    def settle_many(self, key: QueueKey, offsets: list[int]) -> None:
        """``settle`` of each of ``offsets`` (acked together), counting per client once."""
        qs = self.queues.get(key)
        if qs is None:
            return
        pop, held = qs.rows.pop, self.held
        by_client: dict[int, int] = {}
        for offset in offsets:
            row = pop(offset, None)
            if row is not None:
                by_client[row.client] = by_client.get(row.client, 0) + 1
        for client, n in by_client.items():
            self.rows -= n
            left = held.get(client, 0) - n
            if left > 0:
                held[client] = left
            else:
                held.pop(client, None)

    def change(self, key: QueueKey, offset: int, deadline_ms: int) -> Row:
        """A new invisible time for the row at ``offset`` (checked OK): a new token and deadline."""
        row = self.queues[key].rows[offset]
        row.token = self.take_token()
        row.deadline_ms = deadline_ms
        self._push(deadline_ms, row.token, key, offset)
        return row

    def due(self, now_ms: int, limit: int) -> list[tuple[QueueKey, int, Row]]:
        """Up to ``limit`` rows whose deadline passed, each reported once per delivery (a FIFO
        row handed out again, or a changed row, comes again at its new deadline)."""
        heap, out = self._heap, list[tuple[QueueKey, int, Row]]()
        while heap and heap[0][0] <= now_ms and len(out) < limit:
            _, token, key, offset = heapq.heappop(heap)
            qs = self.queues.get(key)
            row = qs.rows.get(offset) if qs is not None else None
            if row is not None and row.token == token:
                out.append((key, offset, row))
        if len(heap) > 2 * self.rows + _HEAP_SLACK:
            self._rebuild_heap()
        return out

    def retry_later(self, key: QueueKey, offset: int, row: Row, at_ms: int) -> None:
        """Report a due row again at ``at_ms`` (its revive failed)."""
        self._push(at_ms, row.token, key, offset)

    def next_due_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    # ------------------------------------------------------------------ recovery

    def restore(self, key: QueueKey, cursor: int, rows: list[tuple[int, Row]]) -> None:
        """Apply a pop log checkpoint: the cursor is ``cursor``, ``rows`` are in flight
        (replacing what the queue held at their offsets). The log holds a queue's first
        deliveries in offset order, so ``rows`` stays in order."""
        qs = self.queue(key, cursor)
        qs.cursor = cursor  # every record carries the cursor when it was written: the last one is current
        for offset, row in rows:  # a redelivery or change replaces its row where it is
            self.hand_out(key, offset, row)
            self.next_token = max(self.next_token, row.token + 1)

    # ------------------------------------------------------------------ internals

    def _release(self, client: int) -> None:
        n = self.held.get(client, 0) - 1
        if n > 0:
            self.held[client] = n
        else:
            self.held.pop(client, None)

    def _push(self, deadline_ms: int, token: int, key: QueueKey, offset: int) -> None:
        heapq.heappush(self._heap, (deadline_ms, token, key, offset))

    def _rebuild_heap(self) -> None:
        self._heap = [
            (row.deadline_ms, row.token, key, offset)
            for key, qs in self.queues.items()
            for offset, row in qs.rows.items()
        ]
        heapq.heapify(self._heap)
