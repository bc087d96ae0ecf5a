"""Reports ``Admin`` builds from broker answers: consumer progress, groups, broker status.

The broker answers with plain JSON (``shmq.broker.admin_status``); these turn it into typed
values with the derived numbers (lag, uptime) computed once, here, and add what the broker
process cannot tell about itself cheaply from inside its loop: its CPU and memory (psutil)
and its replicas (the HA segment, read-only).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from shmq.errors import ShmqError
from shmq.ha.shared import STREAMING, HASegment

CPU_SAMPLE_S = 0.1  # psutil measures CPU % over an interval


@dataclass(frozen=True)
class QueueProgress:
    """One queue of a group: committed offset (-1: never committed), the queue's offsets, lag."""

    topic: str
    queue_id: int
    committed: int
    min_offset: int
    max_offset: int
    broker_name: str = ""  # the broker the queue is on

    @property
    def lag(self) -> int:
        """Messages not yet consumed: max - committed (from the queue's min if nothing was committed)."""
        start = self.committed if self.committed >= 0 else self.min_offset
        return max(self.max_offset - max(start, 0), 0)


@dataclass(frozen=True)
class ConsumerProgress:
    """RocketMQ's consumerProgress of one group: every queue it committed to or subscribes to."""

    group: str
    online: bool
    model: str | None
    queues: list[QueueProgress] = field(default_factory=list)

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.queues)

    @classmethod
    def from_json(cls, d: dict[str, Any], broker_name: str = "") -> ConsumerProgress:
        """The broker's answer; ``broker_name`` is put on every queue."""
        return cls(
            str(d["group"]),
            bool(d["online"]),
            d.get("model"),
            [
                QueueProgress(
                    str(q["topic"]),
                    int(q["queue_id"]),
                    int(q["committed"]),
                    int(q["min_offset"]),
                    int(q["max_offset"]),
                    broker_name,
                )
                for q in d["queues"]
            ],
        )


@dataclass(frozen=True)
class GroupInfo:
    """A consumer group the broker knows: model, membership version, live members and what they subscribe."""

    group: str
    model: str
    version: int
    members: list[int]
    subscriptions: dict[str, str]  # topic -> expression (SQL92 as "SQL92: text"), over all members

    @classmethod
    def from_json(cls, name: str, d: dict[str, Any]) -> GroupInfo:
        subs: dict[str, str] = {}
        for per_member in d["subscriptions"].values():
            for topic, e in per_member.items():
                subs[topic] = f"{e['type']}: {e['expression']}" if isinstance(e, dict) else str(e)
        return cls(name, str(d["model"]), int(d["version"]), [int(m) for m in d["members"]], dict(sorted(subs.items())))


def process_usage(pid: int) -> dict[str, Any]:
    """CPU % (over ``CPU_SAMPLE_S``) and resident memory of process ``pid``; None values if it is not readable."""
    try:
        p = psutil.Process(pid)
        cpu = p.cpu_percent(interval=CPU_SAMPLE_S)
        return {"cpu_percent": round(cpu, 1), "rss_bytes": p.memory_info().rss}
    except (psutil.Error, OSError):
        return {"cpu_percent": None, "rss_bytes": None}


def replicas(broker: str) -> list[dict[str, Any]] | None:
    """The replicas a master's HA sender serves (address, acked offset, in stream); None if the
    broker has no HA segment (a replica, or a master not started with HA)."""
    try:
        ha = HASegment.open(broker, read_only=True)
    except (ShmqError, OSError):
        return None
    try:
        master = ha.master_offset
        return [
            {
                "address": r.addr,
                "name": r.name,
                "acked_offset": r.acked_offset,
                "streaming": r.state == STREAMING,
                "lag_bytes": max(master - r.acked_offset, 0),
                "connected_ms": r.connected_ms,
            }
            for r in ha.replicas()
        ]
    finally:
        ha.close()


def broker_status(name: str, answer: dict[str, Any], header: dict[str, Any], stats: dict[str, int]) -> dict[str, Any]:
    """One status dict: the broker's ``answer`` plus what the state segment's ``header`` and
    ``stats`` hold (pid, start time, counters), the process's usage and the replicas."""
    started_ms = int(header["started_ms"])
    out: dict[str, Any] = {
        "name": name,
        "pid": int(header["broker_pid"]),
        "started_ms": started_ms,
        "uptime_s": round(max(time.time() * 1000 - started_ms, 0) / 1000, 1),
    }
    out.update({k: v for k, v in answer.items() if k != "config"})
    out.update(
        {"msgs_in": stats["msgs_in"], "bytes_in": stats["bytes_in"], "busy_rejections": stats["busy_rejections"]}
    )
    out.update(process_usage(out["pid"]))
    out["replicas"] = replicas(name)
    out["config"] = answer["config"]
    return out
