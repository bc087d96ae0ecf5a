"""RocketMQ 5 (RIP-46) names of hand-made snapshots: values, labels, and the text parsed back strictly."""

from __future__ import annotations

from dataclasses import replace

from shmq.client.admin_state import ClientInfo
from shmq.monitor import rocketmq5
from shmq.monitor.prometheus import render
from tests.monitor.snapshots import group, snapshot, topic
from tests.monitor.test_prometheus import parse

COMMON = {("cluster", "c1"), ("node_type", "broker"), ("node_id", "b1")}


def _text(ages: dict[tuple[str, str], int] | None = None, **broker_fields: object) -> str:
    orders = topic("Orders", [60, 40], size=100)
    retry = topic("%RETRY%cg", [7], size=50)
    dlq = topic("%DLQ%cg", [3], size=50)
    delay = topic("SCHEDULE_TOPIC_XXXX", [5], size=80)
    committed = {("Orders", 0): 50, ("Orders", 1): 10, ("%RETRY%cg", 0): 4}
    cg = replace(group("cg", {"Orders": orders, "%RETRY%cg": retry}, committed, 2), pop_inflight=4)
    clients = (
        ClientInfo(1, 10, "producer", None, 0, 0, 0),
        ClientInfo(2, 11, "consumer", "cg", 0, 0, 0),
        ClientInfo(3, 12, "transaction_producer", None, 0, 0, 0),
    )
    snap = snapshot(60, [orders, retry, dlq, delay], [cg], clients, **broker_fields)
    return render(rocketmq5.families(snap, "c1", ages))


def _get(samples: dict, name: str, **labels: str) -> float:
    key = (name, frozenset(COMMON | set(labels.items())))
    assert key in samples, (name, labels, [k for k in samples if k[0] == name])
    return samples[key]


def test_rip46_values_and_labels() -> None:
    types, samples = parse(_text(half_backlog=2, max_phy_offset=9000, min_phy_offset=1000, flush_offset=8500))
    assert types["rocketmq_message_size"] == "histogram" and types["rocketmq_messages_in_total"] == "counter"
    assert _get(samples, "rocketmq_topic_number") == 4
    assert _get(samples, "rocketmq_consumer_group_number") == 1
    orders = {"topic": "Orders", "message_type": "normal", "is_system": "false"}
    assert _get(samples, "rocketmq_messages_in_total", **orders) == 100
    assert _get(samples, "rocketmq_throughput_in_total", **orders) == 10_000
    delay = {"topic": "SCHEDULE_TOPIC_XXXX", "message_type": "delay", "is_system": "true"}
    assert _get(samples, "rocketmq_messages_in_total", **delay) == 5
    assert _get(samples, "rocketmq_message_size_bucket", **orders, le="+Inf") == 100
    assert _get(samples, "rocketmq_message_size_sum", **orders) == 10_000
    assert _get(samples, "rocketmq_message_size_count", **orders) == 100
    cg = {"consumer_group": "cg", "is_system": "false"}
    assert _get(samples, "rocketmq_messages_out_total", topic="Orders", **cg) == 60
    assert _get(samples, "rocketmq_consumer_lag_messages", topic="Orders", is_retry="false", **cg) == 40
    assert _get(samples, "rocketmq_consumer_lag_messages", topic="%RETRY%cg", is_retry="true", **cg) == 3
    assert _get(samples, "rocketmq_send_to_dlq_messages_total", **cg) == 3
    assert _get(samples, "rocketmq_consumer_inflight_messages", **cg) == 4
    assert _get(samples, "rocketmq_half_messages") == 2
    assert _get(samples, "rocketmq_producer_connections", language="python") == 2
    assert _get(samples, "rocketmq_consumer_connections", language="python", **cg) == 2
    assert _get(samples, "rocketmq_storage_size") == 8000
    assert _get(samples, "rocketmq_storage_flush_behind_bytes") == 500
    assert samples[("shmq_up", frozenset({("broker", "b1")}))] == 1


def test_retry_and_dlq_topics_are_not_messages_in_or_out() -> None:
    """As RocketMQ counts them: a retry or DLQ put is not incoming traffic, consuming one is not outgoing."""
    _, samples = parse(_text())
    topics = {dict(labels).get("topic") for name, labels in samples if name.startswith("rocketmq_messages_")}
    assert topics == {"Orders", "SCHEDULE_TOPIC_XXXX"}


def test_unknown_flush_offset_is_left_out() -> None:
    _, samples = parse(_text(flush_offset=-1))
    assert not [k for k in samples if k[0] == "rocketmq_storage_flush_behind_bytes"]


def test_lag_latency_comes_from_the_ages_given() -> None:
    _, samples = parse(_text({("cg", "Orders"): 1234}))
    labels = {"topic": "Orders", "consumer_group": "cg", "is_system": "false", "is_retry": "false"}
    assert _get(samples, "rocketmq_consumer_lag_latency", **labels) == 1234
    assert len([k for k in samples if k[0] == "rocketmq_consumer_lag_latency"]) == 1  # no age known: no sample
    _, without = parse(_text())
    assert not [k for k in without if k[0] == "rocketmq_consumer_lag_latency"]
