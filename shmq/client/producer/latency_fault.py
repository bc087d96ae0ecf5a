"""RocketMQ's latency fault tolerance: which brokers a cluster producer skips for a while.

``MQFaultStrategy`` and ``LatencyFaultToleranceImpl`` (``sendLatencyFaultEnable``): after
every send the producer records how long the broker took; a latency of at least
``LATENCY_MAX_MS[i]`` makes the broker "not available" for ``NOT_AVAILABLE_MS[i]`` (a fast
answer clears it), and a failed send counts as a latency of ``ISOLATION_LATENCY_MS`` (the
broker is skipped for the longest window). Queue selection skips brokers that are not
available; when every candidate is, ``pick_one_at_least`` gives the least bad one.

Where shmq does better than RocketMQ: a broker that registers again (a restart: a new pid)
is ``forget``-ed, so its penalty ends when it is back, not ten minutes later.

Pure: no I/O, no threads; the clock is an argument so that tests need not wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_MS = (0, 0, 30000, 60000, 120000, 180000, 600000)
ISOLATION_LATENCY_MS = 30000  # what a failed send counts as (RocketMQ's isolation)
FREE_BELOW_MS = min(limit for limit, duration in zip(LATENCY_MAX_MS, NOT_AVAILABLE_MS) if duration)  # 550


def not_available_duration(latency_ms: float) -> int:
    """How long (ms) a broker that answered in ``latency_ms`` is skipped (computeNotAvailableDuration)."""
    for limit, duration in zip(reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_MS)):
        if latency_ms >= limit:
            return duration
    return 0


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


@dataclass
class FaultItem:
    """One broker's last latency and when it is available again (ms on the tolerance's clock)."""

    name: str
    latency_ms: float
    available_at_ms: float

    def sort_key(self, now_ms: float) -> tuple[bool, float, float]:
        """Available first, then lower latency, then sooner available (FaultItem.compareTo)."""
        return now_ms < self.available_at_ms, self.latency_ms, self.available_at_ms


class LatencyFaultTolerance:
    """The fault items of one producer, by broker name."""

    def __init__(self, clock: Callable[[], float] = monotonic_ms) -> None:
        self.clock = clock
        self._items: dict[str, FaultItem] = {}

    def update(self, name: str, latency_ms: float, isolation: bool = False) -> None:
        """Record a send to ``name`` that took ``latency_ms`` (``isolation``: it failed)."""
        if not isolation and latency_ms < FREE_BELOW_MS and name not in self._items:
            return  # the common case: a fast answer from a broker with no record costs nothing
        penalty = not_available_duration(ISOLATION_LATENCY_MS if isolation else latency_ms)
        self._items[name] = FaultItem(name, latency_ms, self.clock() + penalty)

    def is_available(self, name: str) -> bool:
        """Whether ``name`` may be sent to now (no record, or its window is over)."""
        item = self._items.get(name)
        return item is None or self.clock() >= item.available_at_ms

    def forget(self, name: str) -> None:
        """Drop ``name``'s record (it registered again: a new process)."""
        self._items.pop(name, None)

    def pick_one_at_least(self, names: Iterable[str]) -> str | None:
        """The least bad of ``names`` when none is available: no record first, then by sort key."""
        now = self.clock()
        best: tuple[tuple[bool, float, float], str] | None = None
        for name in names:
            item = self._items.get(name)
            if item is None:
                return name
            key = item.sort_key(now)
            if best is None or key < best[0]:
                best = (key, name)
        return None if best is None else best[1]
