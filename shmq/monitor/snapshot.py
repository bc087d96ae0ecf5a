"""Snapshot: one consistent reading of a broker's state segment, as plain Python values.

`shmq top` and `shmq exporter` read nothing else from the broker (and psutil for its
process), so neither can slow it down: the segment is copied in one seqlock read (a memcpy
of a few MiB) and parsed here, off the broker's clock. ``snapshot_of`` is pure over a
``StateView`` so it is tested on hand-made tables; ``take`` adds the mapping and psutil.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shmq.broker.health import ROLE_NAMES
from shmq.client.admin_state import ClientInfo, TopicStatus, all_topics, clients
from shmq.ring.state import StateReader, StateView


@dataclass(frozen=True)
class GroupRow:
    """A consumer group: members, and its committed offset of each (topic, queue) with the lag to the queue's end."""

    name: str
    broadcasting: bool
    members: int
    version: int
    committed: dict[tuple[str, int], int]
    lag_by_queue: dict[tuple[str, int], int]
    pop_inflight: int = 0  # POP messages handed out to its members, not yet acked or revived

    @property
    def lag(self) -> int:
        return sum(self.lag_by_queue.values())

    @property
    def consumed(self) -> int:
        """Sum of the committed offsets: its growth over time is the group's consume rate."""
        return sum(self.committed.values())

    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.committed})


@dataclass(frozen=True)
class BrokerRow:
    """The broker: who it is, its log offsets, totals and the once-a-second health fields."""

    pid: int
    started_ms: int
    store_dir: str
    role: str
    version: str
    health_ms: int
    msgs_in: int
    bytes_in: int
    busy_rejections: int
    min_phy_offset: int
    max_phy_offset: int
    flush_offset: int  # -1: ASYNC_FLUSH has no group commit to report
    disk_used_ratio: float  # -1: not measured yet (or the measurement failed)
    disk_warning_ratio: float
    disk_clean_ratio: float
    delay_backlog: int
    timer_backlog: int
    half_backlog: int
    dlq_messages: int
    replicas: int
    replicas_in_sync: int
    replica_offset: int
    master_offset: int
    pop_inflight: int = 0  # POP messages handed out, not yet acked or revived
    pop_revived: int = 0  # POP messages whose invisible time ran out, copied to their retry topic

    @property
    def flush_lag(self) -> int:
        """Bytes written but not yet known flushed (0 when the broker does not report flushes)."""
        return max(0, self.max_phy_offset - self.flush_offset) if self.flush_offset >= 0 else 0

    @property
    def replica_lag(self) -> int | None:
        """Bytes the best replica is behind (a master) or this replica is behind its master; None: no replica info."""
        if self.role == "SLAVE":
            return max(0, self.master_offset - self.replica_offset) if self.master_offset >= 0 else None
        return max(0, self.max_phy_offset - self.replica_offset) if self.replicas and self.replica_offset >= 0 else None


@dataclass(frozen=True)
class ProcessRow:
    """The broker process as psutil sees it (None fields when psutil cannot tell)."""

    cpu_percent: float | None = None
    rss: int | None = None
    threads: int | None = None
    cpu_seconds: float | None = None  # user + system since it started: a counter, for Prometheus' rate()


@dataclass(frozen=True)
class Snapshot:
    """Everything a monitor shows, taken at ``taken_ms`` (wall clock) / ``monotonic`` (rates)."""

    name: str
    taken_ms: int
    monotonic: float
    broker: BrokerRow
    topics: dict[str, TopicStatus]
    groups: dict[str, GroupRow]
    clients: tuple[ClientInfo, ...]
    process: ProcessRow = field(default_factory=ProcessRow)

    @property
    def uptime_s(self) -> float:
        return max(0.0, (self.taken_ms - self.broker.started_ms) / 1000)


def _name(raw: bytes) -> str:
    return bytes(raw).decode("utf-8", "replace")


def snapshot_of(
    v: StateView, name: str, taken_ms: int, monotonic: float, process: ProcessRow | None = None
) -> Snapshot:
    """Parse a consistent copy of the state segment (``StateReader.snapshot``) into a ``Snapshot``."""
    h, s = v.header[0], v.stats[0]
    topics = all_topics(v)
    queue_of_row: dict[int, tuple[str, int, int]] = {}  # queue table row -> (topic, qid, max)
    for row in np.flatnonzero(v.topics["used"] != 0):
        t = v.topics[row]
        base, status = int(t["queue_base"]), topics[_name(t["name"])]
        for q in status.queues:
            queue_of_row[base + q.queue_id] = (status.topic, q.queue_id, q.max_offset)
    committed: dict[int, dict[tuple[str, int], int]] = {}
    lags: dict[int, dict[tuple[str, int], int]] = {}
    for o in v.offsets[v.offsets["used"] != 0]:
        where = queue_of_row.get(int(o["queue"]))
        if where is None:
            continue
        g, off = int(o["group"]), int(o["offset"])
        committed.setdefault(g, {})[where[:2]] = off
        lags.setdefault(g, {})[where[:2]] = max(0, where[2] - off)
    groups: dict[str, GroupRow] = {}
    for row in np.flatnonzero(v.groups["used"] != 0):
        g = v.groups[row]
        gname = _name(g["name"])
        groups[gname] = GroupRow(
            gname,
            bool(g["model"]),
            int(g["members"]),
            int(g["version"]),
            committed.get(int(row), {}),
            lags.get(int(row), {}),
            int(g["inflight"]),
        )
    broker = BrokerRow(
        int(h["broker_pid"]),
        int(h["started_ms"]),
        _name(h["store_dir"]),
        ROLE_NAMES.get(int(s["role"]), "?"),
        _name(s["version"]),
        int(s["health_ms"]),
        int(s["msgs_in"]),
        int(s["bytes_in"]),
        int(s["busy_rejections"]),
        int(s["min_phy_offset"]),
        int(s["max_phy_offset"]),
        int(s["flush_offset"]),
        float(s["disk_used_ratio"]) if int(s["health_ms"]) else -1.0,
        float(s["disk_warning_ratio"]),
        float(s["disk_clean_ratio"]),
        int(s["delay_backlog"]),
        int(s["timer_backlog"]),
        int(s["half_backlog"]),
        int(s["dlq_messages"]),
        int(s["replicas"]),
        int(s["replicas_in_sync"]),
        int(s["replica_offset"]),
        int(s["master_offset"]),
        int(s["pop_inflight"]),
        int(s["pop_revived"]),
    )
    return Snapshot(name, taken_ms, monotonic, broker, topics, groups, tuple(clients(v)), process or ProcessRow())


class ProcessWatch:
    """psutil's view of the broker process. Kept between snapshots because CPU percent is
    measured since the previous look at the same process; a new pid (the broker restarted)
    starts a new measurement."""

    def __init__(self) -> None:
        self._process: Any = None

    def look(self, pid: int) -> ProcessRow:
        """The process's CPU (since the last look), RSS and threads; empty when gone or not ours to see."""
        import psutil

        try:
            if self._process is None or self._process.pid != pid:
                self._process = psutil.Process(pid)
                self._process.cpu_percent(None)  # the first reading is 0 by definition: start the interval
            p = self._process
            with p.oneshot():
                times = p.cpu_times()
                return ProcessRow(
                    p.cpu_percent(None), p.memory_info().rss, p.num_threads(), round(times.user + times.system, 2)
                )  # clock ticks: 10 ms
        except (psutil.Error, OSError):
            self._process = None
            return ProcessRow()


def take(reader: StateReader, name: str, watch: ProcessWatch | None = None) -> Snapshot:
    """One snapshot of the broker ``reader`` maps (``BrokerGoneError`` if it died mid-update)."""
    snap = snapshot_of(reader.snapshot(), name, int(time.time() * 1000), time.monotonic())
    return replace(snap, process=watch.look(snap.broker.pid)) if watch is not None else snap
