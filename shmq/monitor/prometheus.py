"""A ``Snapshot`` in the Prometheus text exposition format (version 0.0.4), for `shmq exporter`.

Pure: the exporter takes the snapshot, this only formats it, so the text is tested on
hand-made snapshots. Names carry the ``shmq_`` prefix and follow rocketmq-exporter's where a
RocketMQ user looks for them (``rocketmq_group_diff`` is ``shmq_group_lag`` here). Totals since
the broker started are counters (``_total``): Prometheus' ``rate()`` makes the per-second rates
and handles the reset when the broker restarts. Every sample has a ``broker`` label so that
several exporters (one per broker) share dashboards.

Cardinality: lag and committed offsets are per (group, topic), not per queue; a broker may
have 10,000 queues, and groups x queues series would swamp a Prometheus for what
`shmq admin group progress` shows per queue on demand. Client ring use is the largest per
role and direction: client ids change with every restart of a client, and a series per id
would churn without bound.

A value the broker does not report (disk ratio before the first health tick, the flush lag
of an ASYNC_FLUSH broker, replica lag without replicas, psutil fields it could not read) is
left out rather than written as 0, as the format expects for unknown values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from shmq.monitor.snapshot import Snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Labels, float]  # (suffix of the metric name: "" or a histogram's "_bucket"..., labels, value)


@dataclass
class Family:
    """One metric: its # HELP and # TYPE lines and its samples."""

    name: str
    kind: str  # "gauge", "counter" or "histogram"
    help: str
    samples: list[Sample] = field(default_factory=list)

    def add(self, value: float | None, **labels: str) -> None:
        """A sample; ``None`` (not reported) adds nothing."""
        if value is not None:
            self.samples.append(("", tuple(labels.items()), value))

    def add_part(self, suffix: str, value: float, **labels: str) -> None:
        """A histogram's ``_bucket``, ``_sum`` or ``_count`` sample (they share the family's HELP and TYPE)."""
        self.samples.append((suffix, tuple(labels.items()), value))

    def render(self) -> str:
        lines = [f"# HELP {self.name} {escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]
        lines.extend(
            f"{self.name}{suffix}{_labels(labels)} {format_value(value)}" for suffix, labels, value in self.samples
        )
        return "\n".join(lines) + "\n"


def escape_label(value: str) -> str:
    """A label value inside double quotes: backslash, double quote and newline escaped (most
    values have none of them: returned as they are, a scrape formats thousands)."""
    if "\\" not in value and '"' not in value and "\n" not in value:
        return value
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text: backslash and newline escaped (quotes are literal there)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """Integers without a fraction (offsets and counters stay exact), NaN and infinities as spelled by the format."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in labels) + "}"


def up_family(broker: str, up: bool) -> Family:
    f = Family("shmq_up", "gauge", "1 when the broker's state segment was read, 0 when the broker is down or starting")
    f.add(int(up), broker=broker)
    return f


def down_families(broker: str) -> list[Family]:
    """What a scrape holds while the broker is down: only ``shmq_up 0`` (the endpoint still answers)."""
    return [up_family(broker, False)]


def namesrv_families(namesrv: str, up: bool, brokers: int) -> list[Family]:
    """The name server's own metrics: whether it serves, and how many brokers its routes hold."""
    f = Family("shmq_namesrv_up", "gauge", "1 while the name server process serves its routes, 0 when it is down")
    f.add(int(up), namesrv=namesrv)
    n = Family("shmq_namesrv_brokers", "gauge", "Broker processes in the name server's routes (dead ones left out)")
    n.add(brokers, namesrv=namesrv)
    return [f, n]


def merge(parts: Iterable[list[Family]]) -> list[Family]:
    """Several brokers' families as one list: each metric once (its HELP and TYPE once, as the
    format requires), with the samples of every broker, in order of first appearance."""
    out: dict[str, Family] = {}
    for families_ in parts:
        for f in families_:
            held = out.setdefault(f.name, Family(f.name, f.kind, f.help))
            held.samples.extend(f.samples)
    return list(out.values())


def render(families_: Iterable[Family]) -> str:
    """Families as the text of one scrape, in their order (``families`` keeps a fixed one: stable
    for diffs and tests)."""
    return "".join(f.render() for f in families_)


def families(snap: Snapshot) -> list[Family]:
    """Every metric family of ``snap`` (a family with no sample keeps its HELP and TYPE lines)."""
    b, name = snap.broker, snap.name
    out = [up_family(name, True)]

    def one(metric: str, kind: str, text: str, value: float | None, **labels: str) -> None:
        f = Family(metric, kind, text)
        f.add(value, broker=name, **labels)
        out.append(f)

    def per(metric: str, kind: str, text: str, rows: Iterable[tuple[dict[str, str], float | None]]) -> None:
        f = Family(metric, kind, text)
        for labels, value in rows:
            f.add(value, broker=name, **labels)
        out.append(f)

    one(
        "shmq_broker_info", "gauge", "The broker's role and version (value always 1)", 1, role=b.role, version=b.version
    )
    one(
        "shmq_broker_start_time_seconds",
        "gauge",
        "When the broker started, seconds since the epoch",
        b.started_ms / 1000,
    )
    one("shmq_broker_uptime_seconds", "gauge", "Seconds since the broker started", snap.uptime_s)
    one("shmq_broker_messages_in_total", "counter", "Messages put since the broker started", b.msgs_in)
    one("shmq_broker_bytes_in_total", "counter", "Message bytes put since the broker started", b.bytes_in)
    one(
        "shmq_busy_rejections_total",
        "counter",
        "Sends refused with BrokerBusy (flow control) since the broker started",
        b.busy_rejections,
    )
    one("shmq_commitlog_max_offset_bytes", "gauge", "The commitlog's end (bytes ever written)", b.max_phy_offset)
    one("shmq_commitlog_min_offset_bytes", "gauge", "The commitlog's first byte still on disk", b.min_phy_offset)
    one(
        "shmq_flush_lag_bytes",
        "gauge",
        "Commitlog bytes written but not yet flushed (SYNC_FLUSH brokers)",
        b.flush_lag if b.flush_offset >= 0 else None,
    )
    one(
        "shmq_disk_used_ratio",
        "gauge",
        "Used fraction of the store's disk",
        b.disk_used_ratio if b.disk_used_ratio >= 0 else None,
    )
    one(
        "shmq_disk_warning_ratio",
        "gauge",
        "Disk used ratio above which the broker refuses sends (diskMaxUsedSpaceRatio)",
        b.disk_warning_ratio if b.health_ms else None,
    )
    one(
        "shmq_disk_clean_ratio",
        "gauge",
        "Disk used ratio above which old commitlog files are deleted at once",
        b.disk_clean_ratio if b.health_ms else None,
    )
    one("shmq_delay_backlog_messages", "gauge", "Delay-level messages not yet due", b.delay_backlog)
    one("shmq_timer_backlog_messages", "gauge", "Timer (deliver-at) messages not yet due", b.timer_backlog)
    one(
        "shmq_half_backlog_messages",
        "gauge",
        "Transaction half messages not yet committed or rolled back",
        b.half_backlog,
    )
    one("shmq_dlq_messages", "gauge", "Messages stored in all dead-letter queues (%DLQ% topics)", b.dlq_messages)
    one(
        "shmq_pop_inflight_messages",
        "gauge",
        "POP (SimpleConsumer) messages handed out and not yet acked or revived",
        b.pop_inflight,
    )
    one(
        "shmq_pop_revived_messages_total",
        "counter",
        "POP messages not acked in time, revived to their retry topic",
        b.pop_revived,
    )
    one("shmq_replicas", "gauge", "Replicas attached to this master", b.replicas if b.role != "SLAVE" else None)
    one(
        "shmq_replicas_in_sync",
        "gauge",
        "Replicas within haMaxGapNotInSync of this master",
        b.replicas_in_sync if b.role != "SLAVE" else None,
    )
    one(
        "shmq_replica_lag_bytes",
        "gauge",
        "Bytes the best replica is behind (master), or this replica is behind its master",
        b.replica_lag,
    )
    p = snap.process
    one(
        "shmq_broker_cpu_seconds_total", "counter", "CPU seconds (user + system) the broker process used", p.cpu_seconds
    )
    one("shmq_broker_resident_memory_bytes", "gauge", "The broker process's resident set size", p.rss)
    one("shmq_broker_threads", "gauge", "Threads of the broker process", p.threads)

    topics = sorted(snap.topics.values(), key=lambda t: t.topic)
    per(
        "shmq_topic_messages_in_total",
        "counter",
        "Messages put into the topic since the broker started",
        [({"topic": t.topic}, t.msgs_in) for t in topics],
    )
    per(
        "shmq_topic_bytes_in_total",
        "counter",
        "Message bytes put into the topic since the broker started",
        [({"topic": t.topic}, t.bytes_in) for t in topics],
    )
    per(
        "shmq_topic_max_offset",
        "gauge",
        "Sum of the topic's queue max offsets (messages ever put)",
        [({"topic": t.topic}, t.max_offset) for t in topics],
    )
    per(
        "shmq_topic_min_offset",
        "gauge",
        "Sum of the topic's queue min offsets (messages deleted with old files)",
        [({"topic": t.topic}, sum(q.min_offset for q in t.queues)) for t in topics],
    )
    per(
        "shmq_topic_messages_stored",
        "gauge",
        "Messages of the topic still stored (max - min offset over its queues)",
        [({"topic": t.topic}, t.messages) for t in topics],
    )
    per(
        "shmq_topic_queues",
        "gauge",
        "The topic's write queues",
        [({"topic": t.topic}, t.write_queue_nums) for t in topics],
    )

    groups = sorted(snap.groups.values(), key=lambda g: g.name)
    per(
        "shmq_group_members",
        "gauge",
        "Consumers attached in the group",
        [({"group": g.name}, g.members) for g in groups],
    )
    per(
        "shmq_group_pop_inflight_messages",
        "gauge",
        "POP (SimpleConsumer) messages handed out to the group, not yet acked or revived",
        [({"group": g.name}, g.pop_inflight) for g in groups],
    )
    lag: list[tuple[dict[str, str], float | None]] = []
    committed: list[tuple[dict[str, str], float | None]] = []
    for g in groups:
        for topic in g.topics():
            keys = [k for k in g.committed if k[0] == topic]
            labels = {"group": g.name, "topic": topic}
            lag.append((labels, sum(g.lag_by_queue.get(k, 0) for k in keys)))
            committed.append((labels, sum(g.committed[k] for k in keys)))
    per("shmq_group_lag", "gauge", "Messages of the topic the group has not committed yet (its backlog)", lag)
    per(
        "shmq_group_committed_offset",
        "gauge",
        "Sum of the group's committed offsets over the topic's queues",
        committed,
    )

    roles = sorted({c.role for c in snap.clients} | {"producer", "consumer"})
    per(
        "shmq_clients",
        "gauge",
        "Attached clients by role",
        [({"role": r}, sum(1 for c in snap.clients if c.role == r)) for r in roles],
    )
    fills: list[tuple[dict[str, str], float | None]] = []
    for r in roles:
        mine = [c for c in snap.clients if c.role == r]
        fills.append(({"role": r, "ring": "request"}, max((c.request_fill for c in mine), default=0)))
        fills.append(({"role": r, "ring": "response"}, max((c.response_fill for c in mine), default=0)))
    per("shmq_client_ring_used_bytes_max", "gauge", "Largest number of bytes waiting in one client's ring", fills)
    return out
