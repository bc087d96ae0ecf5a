"""Rates between hand-made snapshots: per topic in/out, per group consume and lag trend, restarts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shmq.monitor.rates import History, rates
from tests.monitor.snapshots import group, orders_run, snapshot, topic


def test_in_and_out_rates_of_a_topic() -> None:
    r = rates(orders_run(3))
    o = r.topics["Orders"]
    assert (o.in_msgs, o.out_msgs) == (100, 80)
    assert o.in_bytes == 100 * 1000
    assert o.out_bytes == pytest.approx(80 * 1000)  # estimated from the mean message size
    assert o.in_series == (100, 100, 100) and len(o.out_series) == 3
    assert (r.in_msgs, r.in_bytes) == (100, 100_000)


def test_group_consume_rate_and_growing_lag() -> None:
    r = rates(orders_run(6))
    g = r.groups["cg"]
    assert g.consume == 80
    assert (g.trend, g.growing_for) == (1, 6)
    assert g.lag_series == (0, 20, 40, 60, 80, 100, 120)


def test_lag_shrinking_when_consumers_catch_up() -> None:
    g = rates(_catching_up()).groups["cg"]
    assert (g.trend, g.growing_for) == (-1, 0)


def _catching_up() -> list:
    t = topic("Orders", [100, 100])
    return [
        snapshot(s, [t], [group("cg", {"Orders": t}, {("Orders", 0): 10 * s, ("Orders", 1): 10 * s})])
        for s in range(1, 5)
    ]


def test_one_snapshot_has_zero_rates() -> None:
    r = rates(orders_run(0))
    assert r.topics["Orders"].in_msgs == 0 and r.groups["cg"].consume == 0 and r.in_msgs == 0


def test_counters_going_down_never_give_negative_rates() -> None:
    a, b = orders_run(2)[1:]
    gone = replace(b, topics={"Orders": topic("Orders", [1, 1])})  # topic re-created
    o = rates([a, gone]).topics["Orders"]
    assert o.in_msgs == 0 and o.in_bytes == 0


def test_history_resets_when_the_broker_restarts() -> None:
    h = History(size=10)
    for s in orders_run(3):
        h.add(s)
    assert len(h.snapshots) == 4
    again = orders_run(1)[1]
    h.add(replace(again, broker=replace(again.broker, pid=777)))  # new pid
    assert len(h.snapshots) == 1
    h.add(orders_run(0)[0])  # counters back to 0 and monotonic back: another life
    assert len(h.snapshots) == 1


def test_history_is_bounded() -> None:
    h = History(size=5)
    for s in orders_run(20):
        h.add(s)
    assert len(h.snapshots) == 5 and h.latest is not None and h.latest.broker.msgs_in == 2000


def test_a_topic_created_in_the_window_starts_from_zero() -> None:
    first = orders_run(1)
    new = topic("Fresh", [50])
    later = replace(first[1], topics={**first[1].topics, "Fresh": new})
    r = rates([first[0], first[1], replace(later, monotonic=later.monotonic + 1)])
    assert r.topics["Fresh"].in_msgs == 50 and r.topics["Fresh"].in_series == (0.0, 50.0)
