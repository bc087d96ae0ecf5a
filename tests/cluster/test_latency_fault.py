"""RocketMQ's latency fault tolerance, alone: durations by latency, skipping, the least bad pick."""

from __future__ import annotations

import pytest

from shmq.client.producer.latency_fault import (
    ISOLATION_LATENCY_MS,
    LatencyFaultTolerance,
    not_available_duration,
)


@pytest.mark.parametrize(
    ("latency", "duration"),
    [(0, 0), (49, 0), (50, 0), (549, 0), (550, 30000), (999, 30000), (1000, 60000), (2000, 120000),
     (2999, 120000), (3000, 180000), (15000, 600000), (ISOLATION_LATENCY_MS, 600000)],
)  # fmt: skip
def test_not_available_duration_follows_rocketmq_table(latency, duration):
    assert not_available_duration(latency) == duration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_slow_broker_is_skipped_for_its_window_then_available_again():
    clock = Clock()
    f = LatencyFaultTolerance(clock)
    f.update("a", 10)
    assert f.is_available("a") and f.is_available("never-seen")
    f.update("a", 600)  # slow: 30 s
    assert not f.is_available("a")
    clock.now += 29_999
    assert not f.is_available("a")
    clock.now += 1
    assert f.is_available("a")


def test_failed_broker_is_isolated_and_a_fast_answer_or_forget_clears_it():
    clock = Clock()
    f = LatencyFaultTolerance(clock)
    f.update("a", 3, isolation=True)
    clock.now += 599_999
    assert not f.is_available("a")
    f.update("a", 3)  # a fast answer (a pick_one_at_least send that worked)
    assert f.is_available("a")
    f.update("a", 3, isolation=True)
    f.forget("a")  # it registered again: a new process
    assert f.is_available("a")


def test_pick_one_at_least_prefers_no_record_then_available_then_lower_latency():
    clock = Clock()
    f = LatencyFaultTolerance(clock)
    f.update("slow", 2500)  # 120 s
    f.update("failed", 20, isolation=True)  # 600 s
    assert f.pick_one_at_least(["failed", "slow"]) == "failed"  # lower latency first among the unavailable
    f.update("failed", 20000)
    assert f.pick_one_at_least(["failed", "slow"]) == "slow"
    assert f.pick_one_at_least(["failed", "fresh", "slow"]) == "fresh"
    assert f.pick_one_at_least([]) is None
