"""What the transaction service knows about half messages (pure: no store, no I/O).

Half messages are named by their offset in the half queue (``RMQ_SYS_TRANS_HALF_TOPIC`` queue
0), as RocketMQ's op records name them. The state is:

- ``half_offset``: every half below it is settled (committed, rolled back, discarded or lost
  to cleanup); the check service starts there (RocketMQ keeps it as the committed offset of
  ``CID_RMQ_SYS_TRANS`` on the half queue);
- ``resolved``: half offset -> how it ended ("commit", "rollback", "discard"), for settled halves
  at or above ``half_offset`` (an op record read, or a resolution made in this run);
- ``ops``: (op queue offset, half offset) of the op records read or written, in op queue order;
  ``op_offset`` is where reading the op queue starts after a restart: every op below it names a
  half below ``half_offset``, so nothing the restart needs is skipped;
- ``check_times``: how often each unsettled half was checked (TRANSACTION_CHECK_TIMES).

``advance`` moves ``half_offset`` over the settled prefix and forgets what lies below it. The
memory held is the resolutions of halves newer than the oldest unsettled one.
"""

from __future__ import annotations

from collections import deque
from typing import Any

COMMIT, ROLLBACK, DISCARD = "commit", "rollback", "discard"
OUTCOMES = (COMMIT, ROLLBACK, DISCARD)
SETTLED = "settled"  # below half_offset: how it ended is forgotten


def parse_state(data: Any) -> tuple[int, int, dict[int, int]]:
    """(halfOffset, opOffset, checkTimes) of a transactionCheck.json; ValueError if malformed."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    half, op, times = data.get("halfOffset"), data.get("opOffset"), data.get("checkTimes", {})
    if type(half) is not int or type(op) is not int or half < 0 or op < 0:
        raise ValueError(f"halfOffset {half!r:.20} / opOffset {op!r:.20} are not offsets")
    if not isinstance(times, dict):
        raise ValueError("checkTimes is not an object")
    out = {}
    for k, v in times.items():
        if not str(k).isdigit() or type(v) is not int or v < 0:
            raise ValueError(f"checkTimes entry {k!r:.20}: {v!r:.20} is not offset -> count")
        out[int(k)] = v
    return half, op, out


class TransactionState:
    """Resolutions, check counts and progress of the half queue (see the module docstring)."""

    def __init__(self, half_offset: int = 0, op_offset: int = 0, check_times: dict[int, int] | None = None) -> None:
        self.half_offset = half_offset
        self.op_offset = op_offset
        self.resolved: dict[int, str] = {}
        self.ops: deque[tuple[int, int]] = deque()
        self.check_times: dict[int, int] = dict(check_times or {})
        self.dirty = False  # progress or counts moved since the last persist

    def outcome(self, half: int) -> str | None:
        """How ``half`` ended, SETTLED if it is below the progress, None while it is open."""
        if half < self.half_offset:
            return SETTLED
        return self.resolved.get(half)

    def note_op(self, op_offset: int, half: int, outcome: str) -> None:
        """An op record at ``op_offset`` settled ``half`` (read at start or just written)."""
        self.ops.append((op_offset, half))
        if half >= self.half_offset:
            self.resolved.setdefault(half, outcome)

    def note_gone(self, half: int) -> None:
        """The half's record is gone (commitlog cleanup): nothing can resolve it any more."""
        self.resolved.setdefault(half, DISCARD)

    def checked(self, half: int) -> int:
        """Count a check of ``half``; the new count."""
        n = self.check_times.get(half, 0) + 1
        self.check_times[half] = n
        self.dirty = True
        return n

    def advance(self, queue_min: int) -> bool:
        """Move the progress over settled halves (and below ``queue_min``, where cleanup took the
        queue); forget what lies below it. Whether anything moved."""
        start = self.half_offset
        h = max(start, queue_min)
        resolved = self.resolved
        while h in resolved:
            h += 1
        if h != start:
            self.half_offset = h
            for k in [k for k in resolved if k < h]:
                del resolved[k]
            for k in [k for k in self.check_times if k < h]:
                del self.check_times[k]
            self.dirty = True
        ops, op_start = self.ops, self.op_offset
        while ops and ops[0][1] < h:
            self.op_offset = ops.popleft()[0] + 1
        self.dirty = self.dirty or self.op_offset != op_start
        return h != start

    def to_json(self) -> dict[str, Any]:
        return {
            "halfOffset": self.half_offset,
            "opOffset": self.op_offset,
            "checkTimes": {str(k): v for k, v in sorted(self.check_times.items())},
        }
