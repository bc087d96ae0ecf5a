"""A ``Snapshot`` under RocketMQ 5's metric names (RIP-46), for `shmq exporter --names rocketmq5`.

RocketMQ 5 brokers export their metrics through OpenTelemetry to Prometheus under the names of
``BrokerMetricsConstant`` (``rocketmq_messages_in_total``, ``rocketmq_consumer_lag_messages``...)
with the labels ``cluster``, ``node_type``, ``node_id`` on every sample; dashboards made for a
RocketMQ 5 cluster read these. This module fills every one of them that the state segment can
answer, with RocketMQ's meaning and labels, and leaves out the ones it cannot (docs/exporter.md
lists them and why): a series with a made-up value would mislead a dashboard more than a
missing one.

Where shmq's figure is close to RocketMQ's but not the same, the docs say so:
``rocketmq_messages_out_total`` counts messages a group committed (RocketMQ counts messages
handed out), and ``rocketmq_message_size`` has only its ``+Inf`` bucket (the broker keeps no
size distribution; the ``_sum`` / ``_count`` average is exact).

Pure, like ``prometheus.families``: tested on hand-made snapshots.
"""

from __future__ import annotations

from collections.abc import Iterable

from shmq.model.system_topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    is_dlq_topic,
    is_retry_topic,
    is_system_topic,
)
from shmq.monitor.prometheus import Family, up_family
from shmq.monitor.snapshot import Snapshot

DEFAULT_CLUSTER = "DefaultCluster"  # RocketMQ's default brokerClusterName, and shmq's
SYSTEM_GROUP_PREFIXES = (
    "cid_rmq_sys_",
    "cid_onsapi_",
    "cid_onsqa_",
    "cid_sys_rmq_",
)  # RocketMQ's SYSTEM_GROUP_PREFIX_LIST, lower case
PRODUCER_ROLES = frozenset({"producer", "transaction_producer"})

Rows = Iterable[tuple[dict[str, str], float | None]]


def _flag(value: bool) -> str:
    """A boolean label as OpenTelemetry writes it to Prometheus."""
    return "true" if value else "false"


def message_type(topic: str) -> str:
    """RocketMQ's ``message_type`` label (TopicMessageType's metrics value) of messages stored in
    ``topic``: delay-level and timer messages wait in their system topics, transaction halves in
    theirs; everything else reads as normal (shmq topics carry no message type attribute)."""
    if topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
        return "delay"
    if topic == TRANS_HALF_TOPIC:
        return "transaction"
    return "normal"


def is_system(topic: str, group: str = "") -> bool:
    """RocketMQ's ``is_system`` label: a system topic (not a retry or DLQ topic: those have
    their own labels) or a system group."""
    system_topic = is_system_topic(topic) and not (is_retry_topic(topic) or is_dlq_topic(topic))
    return system_topic or group.lower().startswith(SYSTEM_GROUP_PREFIXES)


def families(
    snap: Snapshot, cluster: str = DEFAULT_CLUSTER, lag_ages_ms: dict[tuple[str, str], int] | None = None
) -> list[Family]:
    """Every RIP-46 family ``snap`` can fill, with ``shmq_up`` first (RocketMQ has no such metric;
    it is what tells a broker down from an exporter down). ``lag_ages_ms``: (group, topic) -> age
    of the oldest message the group has not committed (``shmq.monitor.lag_age``), read from the
    store; without it ``rocketmq_consumer_lag_latency`` has no samples."""
    b = snap.broker
    common = {"cluster": cluster, "node_type": "broker", "node_id": snap.name}
    out = [up_family(snap.name, True)]

    def metric(name: str, kind: str, text: str, rows: Rows) -> None:
        f = Family(name, kind, text)
        for labels, value in rows:
            f.add(value, **common, **labels)
        out.append(f)

    topics = sorted(snap.topics.values(), key=lambda t: t.topic)
    user = [t for t in topics if not (is_retry_topic(t.topic) or is_dlq_topic(t.topic))]  # as RocketMQ counts
    metric("rocketmq_topic_number", "gauge", "Active topic number", [({}, len(topics))])
    metric("rocketmq_consumer_group_number", "gauge", "Active subscription group number", [({}, len(snap.groups))])

    def in_labels(topic: str) -> dict[str, str]:
        return {"topic": topic, "message_type": message_type(topic), "is_system": _flag(is_system(topic))}

    metric(
        "rocketmq_messages_in_total",
        "counter",
        "Total number of incoming messages",
        [(in_labels(t.topic), t.msgs_in) for t in user],
    )
    metric(
        "rocketmq_throughput_in_total",
        "counter",
        "Total traffic of incoming messages, in bytes",
        [(in_labels(t.topic), t.bytes_in) for t in user],
    )
    size = Family("rocketmq_message_size", "histogram", "Incoming messages size, in bytes (only the +Inf bucket)")
    for t in user:
        labels = {**common, **in_labels(t.topic)}
        size.add_part("_bucket", t.msgs_in, **labels, le="+Inf")
        size.add_part("_sum", t.bytes_in, **labels)
        size.add_part("_count", t.msgs_in, **labels)
    out.append(size)

    groups = sorted(snap.groups.values(), key=lambda g: g.name)
    lag: list[tuple[dict[str, str], float | None]] = []
    latency: list[tuple[dict[str, str], float | None]] = []
    ages = lag_ages_ms or {}
    consumed: list[tuple[dict[str, str], float | None]] = []
    for g in groups:
        for topic in g.topics():
            keys = [k for k in g.committed if k[0] == topic]
            labels = {"topic": topic, "consumer_group": g.name, "is_system": _flag(is_system(topic, g.name))}
            lag_labels = {**labels, "is_retry": _flag(is_retry_topic(topic))}
            lag.append((lag_labels, sum(g.lag_by_queue.get(k, 0) for k in keys)))
            latency.append((lag_labels, ages.get((g.name, topic))))
            if not (is_retry_topic(topic) or is_dlq_topic(topic)):
                consumed.append((labels, sum(g.committed[k] for k in keys)))
    metric(
        "rocketmq_messages_out_total",
        "counter",
        "Total number of outgoing messages (shmq: messages the group committed)",
        consumed,
    )
    metric("rocketmq_consumer_lag_messages", "gauge", "Consumer lag messages", lag)
    metric("rocketmq_consumer_lag_latency", "gauge", "Consumer lag time, in milliseconds", latency)
    dead = {t.topic.removeprefix(DLQ_GROUP_TOPIC_PREFIX): t.msgs_in for t in topics if is_dlq_topic(t.topic)}
    metric(
        "rocketmq_send_to_dlq_messages_total",
        "counter",
        "Consumer send to DLQ messages (since the broker started)",
        [({"consumer_group": g, "is_system": _flag(is_system("", g))}, n) for g, n in sorted(dead.items())],
    )
    metric(
        "rocketmq_consumer_inflight_messages",
        "gauge",
        "Consumer inflight messages (shmq: POP messages handed out, not yet acked or revived)",
        [({"consumer_group": g.name, "is_system": _flag(is_system("", g.name))}, g.pop_inflight) for g in groups],
    )
    metric(
        "rocketmq_pop_revive_retry_messages_total",
        "counter",
        "Total number of put message to pop retry topic (since the broker started)",
        [({}, b.pop_revived)],
    )
    metric(
        "rocketmq_half_messages",
        "gauge",
        "Half messages of all topics",
        [({}, b.half_backlog)],
    )
    metric(
        "rocketmq_producer_connections",
        "gauge",
        "Producer connections",
        [({"language": "python"}, sum(1 for c in snap.clients if c.role in PRODUCER_ROLES))],
    )
    metric(
        "rocketmq_consumer_connections",
        "gauge",
        "Consumer connections",
        [
            ({"consumer_group": g.name, "language": "python", "is_system": _flag(is_system("", g.name))}, g.members)
            for g in groups
        ],
    )
    metric(
        "rocketmq_storage_size",
        "gauge",
        "Commitlog bytes on disk, in bytes",
        [({}, max(0, b.max_phy_offset - b.min_phy_offset))],
    )
    metric(
        "rocketmq_storage_flush_behind_bytes",
        "gauge",
        "Commitlog bytes written but not flushed (SYNC_FLUSH brokers)",
        [({}, b.flush_lag if b.flush_offset >= 0 else None)],
    )
    return out
