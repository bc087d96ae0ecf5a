"""TransactionState alone: resolutions, progress over the settled prefix, what a restart reads."""

from __future__ import annotations

import pytest

from shmq.broker.transaction_state import COMMIT, DISCARD, ROLLBACK, SETTLED, TransactionState, parse_state


def test_progress_moves_over_the_settled_prefix_only():
    s = TransactionState()
    s.note_op(0, 1, COMMIT)
    s.note_op(1, 3, ROLLBACK)
    assert not s.advance(0) and s.half_offset == 0  # half 0 is open
    s.checked(0)
    s.checked(2)
    s.note_op(2, 0, COMMIT)
    assert s.advance(0) and s.half_offset == 2 and s.outcome(1) == SETTLED
    assert s.resolved == {3: ROLLBACK} and s.check_times == {2: 1}
    # ops 0 and 2 name halves below the progress, op 1 does not: a restart reads from op 1 on
    assert s.op_offset == 1 and list(s.ops) == [(1, 3), (2, 0)]
    s.note_op(3, 2, DISCARD)
    assert s.advance(0) and s.half_offset == 4 and s.op_offset == 4 and not s.ops and not s.resolved


def test_cleanup_and_gone_halves_settle_too():
    s = TransactionState(half_offset=5)
    s.note_op(0, 2, COMMIT)  # an old op read at start: below the progress, nothing to keep
    assert s.resolved == {}
    s.note_gone(5)
    assert s.outcome(5) == DISCARD
    s.advance(0)
    assert s.half_offset == 6 and s.op_offset == 1
    s.advance(10)  # cleanup took the queue below 10
    assert s.half_offset == 10


def test_json_round_trip_and_damaged_files():
    s = TransactionState(4, 2, {5: 3})
    assert parse_state(s.to_json()) == (4, 2, {5: 3})
    for bad in (
        [],
        {"halfOffset": -1, "opOffset": 0},
        {"halfOffset": 1, "opOffset": True},
        {"halfOffset": 1, "opOffset": 1, "checkTimes": {"x": 1}},
        {"halfOffset": 1, "opOffset": 1, "checkTimes": []},
    ):
        with pytest.raises(ValueError):
            parse_state(bad)
