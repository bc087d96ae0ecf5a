"""Rates: what changed between snapshots, per second (pure; ``shmq top`` and tests feed it).

The state segment holds counters (messages and bytes in per topic since the broker started)
and positions (committed offsets, queue ends); rates are their growth between consecutive
snapshots divided by the time between them, so the monitor needs nothing from the broker
beyond the segment. A broker restart resets its counters and changes its pid:
``History.add`` then forgets the old snapshots, and every difference is clamped at zero (a
topic deleted and re-created, an offset reset backwards), so a rate is never negative.

Out rates are consumption: the growth of the committed offsets of every group on a topic's
queues (two groups reading a topic count twice, as a broker's "messages out" does). The
segment has no byte counter for consumption, so out MB/s is estimated as out msgs/s times
the topic's mean message size since the broker started (bytes in / messages in).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from shmq.monitor.snapshot import Snapshot

HISTORY = 60
"""Snapshots kept: a minute of sparkline at the default 1 s interval."""
TREND_SAMPLES = 5
"""How far back (in snapshots) the lag trend compares."""


@dataclass(frozen=True)
class TopicRate:
    """A topic's rates over the last interval and their series over the history (oldest first)."""

    in_msgs: float
    in_bytes: float
    out_msgs: float
    out_bytes: float
    in_series: tuple[float, ...]
    out_series: tuple[float, ...]


@dataclass(frozen=True)
class GroupRate:
    """A group's consume rate, its lag trend (+1 growing, -1 shrinking, 0 steady), how many
    intervals in a row the lag grew, and the lag over the history."""

    consume: float
    trend: int
    growing_for: int
    lag_series: tuple[int, ...]


@dataclass(frozen=True)
class Rates:
    """All rates of one moment: totals, per topic, per group, and busy rejections per second."""

    in_msgs: float
    in_bytes: float
    busy_rejections: float
    topics: dict[str, TopicRate]
    groups: dict[str, GroupRate]


class History:
    """The last ``size`` snapshots of one broker; a restart (new pid or start time, counters
    gone down) starts it again, since rates across two broker lives mean nothing."""

    def __init__(self, size: int = HISTORY) -> None:
        self.snapshots: deque[Snapshot] = deque(maxlen=size)

    def add(self, snap: Snapshot) -> None:
        if self.snapshots and restarted(self.snapshots[-1], snap):
            self.snapshots.clear()
        self.snapshots.append(snap)

    def clear(self) -> None:
        self.snapshots.clear()

    @property
    def latest(self) -> Snapshot | None:
        return self.snapshots[-1] if self.snapshots else None


def restarted(before: Snapshot, after: Snapshot) -> bool:
    """True when ``after`` comes from another broker life than ``before``."""
    a, b = before.broker, after.broker
    return (
        a.pid != b.pid or a.started_ms != b.started_ms or b.msgs_in < a.msgs_in or after.monotonic <= before.monotonic
    )


def _per_second(before: int, after: int, seconds: float) -> float:
    return max(0, after - before) / seconds


def _growth(before: dict[tuple[str, int], int], after: dict[tuple[str, int], int]) -> int:
    """Sum of the per-key growth (keys new in ``after`` count from nothing: no jump from 0)."""
    return sum(max(0, off - before[k]) for k, off in after.items() if k in before)


def _consumed_by_topic(a: Snapshot, b: Snapshot) -> dict[str, int]:
    """Messages consumed per topic between ``a`` and ``b``: the committed offsets' growth of
    every group, in one pass over the offsets (a broker may have thousands of topics)."""
    out: dict[str, int] = {}
    for name, g in b.groups.items():
        before = a.groups.get(name)
        if before is None:
            continue
        for key, off in g.committed.items():
            was = before.committed.get(key)
            if was is not None and off > was:
                out[key[0]] = out.get(key[0], 0) + off - was
    return out


def _pair(a: Snapshot, b: Snapshot) -> dict[str, tuple[float, float, float]]:
    """In msgs/s, in bytes/s and out msgs/s of every topic of ``b`` between ``a`` and ``b``."""
    seconds = b.monotonic - a.monotonic
    consumed = _consumed_by_topic(a, b)
    rows = {}
    for name, tb in b.topics.items():
        ta = a.topics.get(name)
        msgs, size = (ta.msgs_in, ta.bytes_in) if ta is not None else (0, 0)  # created in between: from 0
        rows[name] = (
            _per_second(msgs, tb.msgs_in, seconds),
            _per_second(size, tb.bytes_in, seconds),
            consumed.get(name, 0) / seconds,
        )
    return rows


def _topic_rates(snaps: Sequence[Snapshot]) -> dict[str, TopicRate]:
    pairs = [_pair(a, b) for a, b in itertools.pairwise(snaps)]
    out = {}
    for name, t in snaps[-1].topics.items():
        series = [p.get(name, (0.0, 0.0, 0.0)) for p in pairs]
        in_msgs, in_bytes, out_msgs = series[-1] if series else (0.0, 0.0, 0.0)
        mean_size = t.bytes_in / t.msgs_in if t.msgs_in else 0.0
        out[name] = TopicRate(
            in_msgs, in_bytes, out_msgs, out_msgs * mean_size, tuple(s[0] for s in series), tuple(s[2] for s in series)
        )
    return out


def _group_rate(snaps: Sequence[Snapshot], name: str) -> GroupRate:
    present = [s.groups[name] for s in snaps if name in s.groups]
    lags = tuple(g.lag for g in present)
    consume = 0.0
    if len(snaps) >= 2 and name in snaps[-2].groups:
        a, b = snaps[-2], snaps[-1]
        consume = _growth(a.groups[name].committed, b.groups[name].committed) / (b.monotonic - a.monotonic)
    growing = 0
    for before, after in zip(reversed(lags[:-1]), reversed(lags[1:])):
        if after <= before:
            break
        growing += 1
    back = lags[-1 - min(TREND_SAMPLES, len(lags) - 1)] if lags else 0
    now = lags[-1] if lags else 0
    return GroupRate(consume, (now > back) - (now < back), growing, lags)


def rates(snaps: Sequence[Snapshot]) -> Rates:
    """Rates of the latest snapshot in ``snaps`` (oldest first, one broker life: ``History``)."""
    if not snaps:
        return Rates(0.0, 0.0, 0.0, {}, {})
    last = snaps[-1]
    in_msgs = in_bytes = busy = 0.0
    if len(snaps) >= 2:
        a, seconds = snaps[-2], last.monotonic - snaps[-2].monotonic
        in_msgs = _per_second(a.broker.msgs_in, last.broker.msgs_in, seconds)
        in_bytes = _per_second(a.broker.bytes_in, last.broker.bytes_in, seconds)
        busy = _per_second(a.broker.busy_rejections, last.broker.busy_rejections, seconds)
    return Rates(in_msgs, in_bytes, busy, _topic_rates(snaps), {g: _group_rate(snaps, g) for g in last.groups})
