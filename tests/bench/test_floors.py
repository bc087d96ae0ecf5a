"""tools/bench/floors.py: every wake is measured, delays are sane, nothing is left behind."""

from __future__ import annotations

import os

from tools.bench import floors


def _semaphores() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("sem.")}


def test_every_round_of_a_chain_is_timed_and_the_semaphores_are_gone():
    before = _semaphores()
    us = floors.wake_latency(50, 100e-6, 2)
    assert len(us) == 50
    assert all(0 < d < 1e6 for d in us)  # a post before its wake, and under a second
    assert _semaphores() <= before


def test_each_submitted_call_is_timed():
    us = floors.thread_handoff(20, 1e-3)
    assert len(us) == 20 and all(0 < d < 1e6 for d in us)


def test_python_costs_name_each_step_with_a_positive_time():
    costs = floors.python_costs()
    assert set(costs) == {
        "future made, resolved, read",
        "object with 10 slots",
        "zlib.crc32 of 100 B",
        "100 B bytes copy",
    }
    assert all(v > 0 for v in costs.values())
