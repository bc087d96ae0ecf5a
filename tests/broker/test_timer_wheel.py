"""The timer structure's pure logic: pending keys in sorted runs come out in (due, offset) order,
and the checkpoint's formula is exactly the set delivered, whatever the tick in which it is cut."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from shmq.broker.timer_wheel import PendingTimers, TimerCheckpoint


def drain(p: PendingTimers, now: int, limit: int) -> list[tuple[int, int]]:
    d, q, counts = p.due(now, limit)
    p.advance(counts)
    return list(zip(d.tolist(), q.tolist()))


def test_keys_come_out_in_due_then_offset_order_across_runs_and_only_when_due():
    p = PendingTimers()
    p.add(np.array([50, 10, 30]), np.array([0, 1, 2]))
    p.add(np.array([10, 40]), np.array([3, 4]))
    assert len(p) == 5 and p.earliest() == 10 and p.min_offset() == 0
    assert drain(p, 9, 100) == []
    assert drain(p, 30, 2) == [(10, 1), (10, 3)]  # the limit cuts in key order
    assert drain(p, 45, 100) == [(30, 2), (40, 4)]
    assert len(p) == 1 and p.earliest() == 50 and p.min_offset() == 0
    assert drain(p, 10**13, 100) == [(50, 0)] and len(p) == 0 and p.earliest() is None


def test_keys_not_advanced_stay_pending():
    p = PendingTimers()
    p.add(np.array([1, 2]), np.array([0, 1]))
    _d, q, _ = p.due(5, 10)
    assert q.tolist() == [0, 1] and len(p) == 2  # a failed delivery: nothing lost
    assert drain(p, 5, 10) == [(1, 0), (2, 1)]


def test_runs_stay_few_and_memory_is_16_bytes_a_key():
    p = PendingTimers()
    rng = np.random.default_rng(1)
    for i in range(1000):
        p.add(rng.integers(0, 10**6, 100), np.arange(i * 100, i * 100 + 100))
    assert len(p) == 100_000 and p.runs() <= 20
    assert p.nbytes() == 16 * 100_000


@settings(max_examples=60, deadline=None)
@given(hs.lists(hs.lists(hs.integers(0, 50), max_size=30), max_size=12), hs.integers(1, 7), hs.data())
def test_any_interleaving_of_adds_and_ticks_delivers_every_key_once_in_order(batches, limit, data):
    p = PendingTimers()
    q0, now, out, added = 0, 0, [], []
    for b in batches:
        keys = list(zip(b, range(q0, q0 + len(b))))
        p.add(np.array(b, np.int64), np.arange(q0, q0 + len(b), dtype=np.int64))
        added += keys
        q0 += len(b)
        now += data.draw(hs.integers(0, 10))
        got = drain(p, now, limit)
        assert all(d <= now for d, _ in got)
        out += got
    while len(p):
        out += drain(p, 10**6, limit)
    assert sorted(out) == sorted(added) and len(out) == len(added)
    # each tick's batch is the smallest keys pending then: overall the order is by key within
    # what was present, so keys never go backwards unless added later with an earlier due
    assert len(set(out)) == len(out)


@settings(max_examples=60, deadline=None)
@given(hs.lists(hs.integers(0, 40), min_size=1, max_size=60), hs.integers(1, 5), hs.integers(0, 30))
def test_the_checkpoint_counts_exactly_what_was_delivered_when_cut_after_any_tick(dues, limit, cut):
    """Entries arrive a few per tick, ticks deliver with a limit; after each tick the checkpoint
    (E, cursor) must describe the delivered set exactly (late entries included)."""
    due = np.array(dues, np.int64)
    p, ck, delivered = PendingTimers(), TimerCheckpoint(), set()
    now, e = 0, 0
    for tick in range(200):
        new_e = min(len(due), e + 3)
        d, q = due[e:new_e], np.arange(e, new_e, dtype=np.int64)
        late = ck.late(d)
        delivered |= set(q[late].tolist())
        p.add(d[~late], q[~late])
        ck = TimerCheckpoint(new_e, ck.cursor_due, ck.cursor_offset, ck.scan_from)
        e = new_e
        now += 2 if tick != cut else -6  # the wall clock steps back once
        dd, qq, counts = p.due(now, limit)
        p.advance(counts)
        if len(qq):
            delivered |= set(qq.tolist())
            ck = TimerCheckpoint(e, int(dd[-1]), int(qq[-1]), 0)
        all_q = np.arange(e, dtype=np.int64)
        assert set(all_q[ck.delivered(due[:e], all_q)].tolist()) == delivered
        if e == len(due) and not len(p):
            break
    assert delivered == set(range(len(due)))


def test_checkpoint_json_round_trip_and_refusals():
    ck = TimerCheckpoint(10, 1234, 7, 3)
    assert TimerCheckpoint.from_json(ck.to_json()) == ck
    for bad in (
        [],
        {"enqueueOffset": "1"},
        {**ck.to_json(), "scanFrom": 11},
        {**ck.to_json(), "cursorOffset": 10},
        {**ck.to_json(), "enqueueOffset": True},
        {**ck.to_json(), "cursorDueMs": -2},
    ):
        with pytest.raises(ValueError):
            TimerCheckpoint.from_json(bad)
