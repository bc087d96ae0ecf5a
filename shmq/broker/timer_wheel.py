"""The timer structure's pure logic: which parked timer messages are pending, in due order, and
the checkpoint that says which ones were delivered. No I/O (``shmq.broker.timer`` moves bytes).

The durable timer log is the consume queue of ``rmq_sys_wheel_timer`` queue 0: entry q points
at the parked record and holds its due time (ms) in the tag field. A message is identified by
its queue offset q and ordered by its key (due, q). Delivery goes in key order, so the
delivered set is described by three numbers, the ``TimerCheckpoint``:

    delivered = { q < E : (due(q), q) <= (D, Q) }

where E (``enqueue_offset``) is how far the log was read into memory and (D, Q) (the cursor)
is the key of the last delivered message. What keeps it true across ticks:
- a tick delivers a prefix, in key order, of the pending messages (all keys > (D, Q)), then
  moves the cursor to the last key it delivered;
- an entry read from the log (q >= E) whose key is already <= (D, Q) (its due time is before
  D: only when the wall clock stepped back) is "late": it is delivered in the same tick, before
  E moves past it, so the formula counts it rightly;
- the checkpoint is written after the tick's put, never before.
A broker killed at any point restarts from the last written checkpoint: everything the formula
counts was delivered (nothing lost) and what was delivered since is at most the tick in
flight (delivered once more). ``scan_from`` (L) is a lower bound of every undelivered q, so the
restart reads the log from L instead of from its start.

``PendingTimers`` holds the pending keys as sorted numpy runs (16 bytes a message): each batch
read from the log becomes one run sorted by key; adjacent runs are merged when the newer is at
least half the older (a log-structured merge: O(log n) runs); a tick looks at each run's head
only, so nothing is scanned per tick but the due ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

MIN_COMPACT = 4096  # a run's delivered head is dropped (copied away) once it is half the run and this big


@dataclass(frozen=True)
class TimerCheckpoint:
    """Progress of the timer service (see the module docstring for what the numbers mean)."""

    enqueue_offset: int = 0  # E: log entries below it were read into memory
    cursor_due: int = -1  # D: due ms of the last delivered message (-1: none yet)
    cursor_offset: int = -1  # Q: its queue offset
    scan_from: int = 0  # L: every q below it is delivered

    def delivered(self, due: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Mask of the entries (due, q) this checkpoint counts as delivered."""
        mask: np.ndarray = (q < self.enqueue_offset) & (
            (due < self.cursor_due) | ((due == self.cursor_due) & (q <= self.cursor_offset))
        )
        return mask

    def late(self, due: np.ndarray) -> np.ndarray:
        """Mask of newly read entries (q >= E) whose key is already behind the cursor."""
        return due < self.cursor_due

    def to_json(self) -> dict[str, int]:
        return {
            "enqueueOffset": self.enqueue_offset,
            "cursorDueMs": self.cursor_due,
            "cursorOffset": self.cursor_offset,
            "scanFrom": self.scan_from,
        }

    @staticmethod
    def from_json(data: Any) -> TimerCheckpoint:
        """ValueError saying what is wrong with anything but a checkpoint ``to_json`` wrote."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        values = []
        for key, low in (("enqueueOffset", 0), ("cursorDueMs", -1), ("cursorOffset", -1), ("scanFrom", 0)):
            v = data.get(key)
            if type(v) is not int or v < low:
                raise ValueError(f"{key}={v!r:.20} is not an integer >= {low}")
            values.append(v)
        ck = TimerCheckpoint(*values)
        if ck.scan_from > ck.enqueue_offset or ck.cursor_offset >= ck.enqueue_offset:
            raise ValueError(
                f"scanFrom {ck.scan_from} / cursorOffset {ck.cursor_offset} past enqueueOffset {ck.enqueue_offset}"
            )
        return ck


class PendingTimers:
    """Pending (due ms, queue offset) keys in sorted runs; see the module docstring.

    Runs are kept in the order they were added and every key added later has a larger queue
    offset than the keys added before it (the log is read in order), so a stable sort by due
    alone of runs laid end to end, older first, is the key order."""

    def __init__(self) -> None:
        self._due: list[np.ndarray] = []
        self._q: list[np.ndarray] = []
        self._head: list[int] = []  # per run: first pending index
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def runs(self) -> int:
        return len(self._due)

    def nbytes(self) -> int:
        """Memory the runs hold (including delivered heads not dropped yet)."""
        return sum(d.nbytes + q.nbytes for d, q in zip(self._due, self._q))

    def add(self, due: np.ndarray, q: np.ndarray) -> None:
        """Add keys whose queue offsets are all larger than any added before (in any order)."""
        if not len(due):
            return
        order = np.lexsort((q, due))
        self._push(np.ascontiguousarray(due[order], np.int64), np.ascontiguousarray(q[order], np.int64))
        while len(self._due) > 1 and 2 * self._live(-1) >= self._live(-2):
            d1, q1 = self._take_live(-2)
            d2, q2 = self._take_live(-1)
            del self._due[-2:], self._q[-2:], self._head[-2:]
            d, q = np.concatenate((d1, d2)), np.concatenate((q1, q2))
            order = np.argsort(d, kind="stable")
            self._push(d[order], q[order])
        self._len += len(due)

    def earliest(self) -> int | None:
        """The smallest pending due time (None: nothing pending)."""
        heads = [int(d[h]) for d, h in zip(self._due, self._head)]
        return min(heads) if heads else None

    def min_offset(self) -> int | None:
        """The smallest pending queue offset (one pass over the runs: call it rarely)."""
        mins = [int(q[h:].min()) for q, h in zip(self._q, self._head)]
        return min(mins) if mins else None

    def due(self, now_ms: int, limit: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """The first up to ``limit`` keys due at ``now_ms`` in key order (due ms, queue offsets),
        and per run how many of them it holds: pass that to ``advance`` once they are delivered
        (until then they stay pending, so a failed delivery loses nothing)."""
        parts_d, parts_q, owner = [], [], []
        for r, (d, q, h) in enumerate(zip(self._due, self._q, self._head)):
            k = int(np.searchsorted(d[h : h + limit], now_ms, side="right"))
            if k:
                parts_d.append(d[h : h + k])
                parts_q.append(q[h : h + k])
                owner.append(np.full(k, r, np.int32))
        counts = [0] * len(self._due)
        if not parts_d:
            return np.empty(0, np.int64), np.empty(0, np.int64), counts
        d, q, who = np.concatenate(parts_d), np.concatenate(parts_q), np.concatenate(owner)
        if len(parts_d) > 1:
            order = np.argsort(d, kind="stable")[:limit]
            d, q, who = d[order], q[order], who[order]
        for r, c in enumerate(np.bincount(who, minlength=len(counts)).tolist()):
            counts[r] = c
        return d, q, counts

    def advance(self, counts: list[int]) -> None:
        """Drop the keys ``due`` returned (its ``counts``), now delivered."""
        for r in range(len(counts) - 1, -1, -1):
            c = counts[r]
            if not c:
                continue
            self._head[r] += c
            self._len -= c
            n = len(self._due[r])
            if self._head[r] >= n:
                del self._due[r], self._q[r], self._head[r]
            elif self._head[r] >= MIN_COMPACT and 2 * self._head[r] >= n:
                d, q = self._take_live(r)
                self._due[r], self._q[r], self._head[r] = d.copy(), q.copy(), 0

    def _push(self, d: np.ndarray, q: np.ndarray) -> None:
        self._due.append(d)
        self._q.append(q)
        self._head.append(0)

    def _live(self, r: int) -> int:
        return len(self._due[r]) - self._head[r]

    def _take_live(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        h = self._head[r]
        return self._due[r][h:], self._q[r][h:]
