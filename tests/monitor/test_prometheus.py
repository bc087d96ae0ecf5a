"""Prometheus exposition of hand-made snapshots: golden text, escaping, and the text parsed back."""

from __future__ import annotations

import re
from dataclasses import replace

from shmq.client.admin_state import ClientInfo, QueueStatus, TopicStatus
from shmq.monitor.prometheus import down_families, escape_label, families, format_value, render
from shmq.monitor.snapshot import BrokerRow, GroupRow, ProcessRow, Snapshot

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


def parse(text: str) -> tuple[dict[str, str], dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    """The text format read back strictly: every family has HELP then TYPE before its samples,
    every sample belongs to the family just declared, label values are unescaped."""
    types: dict[str, str] = {}
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    current, helped = None, None
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped = line.split(" ", 3)[2]
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name == helped and name not in types and kind in ("gauge", "counter", "histogram")
            types[name], current = kind, name
        else:
            m = SAMPLE.match(line)
            assert m, line
            name, raw, value = m.groups()
            parts = ("_bucket", "_sum", "_count") if types.get(current or "") == "histogram" else ("",)
            assert name in {f"{current}{p}" for p in parts}, line
            labels = []
            if raw:
                pos = 0
                while pos < len(raw):
                    lm = LABEL.match(raw, pos)
                    assert lm, raw[pos:]
                    unescaped = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), lm.group(2))
                    labels.append((lm.group(1), unescaped))
                    pos = lm.end()
            key = (name, frozenset(labels))
            assert key not in samples, line
            samples[key] = float(value)
    for name, kind in types.items():
        assert (kind == "counter") == name.endswith("_total"), name
    return types, samples


def _snapshot(process: ProcessRow = ProcessRow(12.5, 50_000_000, 9, 3.25)) -> Snapshot:
    broker = BrokerRow(
        pid=4242,
        started_ms=1_700_000_000_000,
        store_dir="/srv/store",
        role="SYNC_MASTER",
        version="0.14.0",
        health_ms=1_700_000_060_000,
        msgs_in=103,
        bytes_in=10_300,
        busy_rejections=2,
        min_phy_offset=0,
        max_phy_offset=5000,
        flush_offset=4000,
        disk_used_ratio=0.5,
        disk_warning_ratio=0.9,
        disk_clean_ratio=0.85,
        delay_backlog=4,
        timer_backlog=5,
        half_backlog=1,
        dlq_messages=3,
        replicas=1,
        replicas_in_sync=1,
        replica_offset=4500,
        master_offset=-1,
        pop_inflight=6,
        pop_revived=2,
    )
    orders = TopicStatus("Orders", 6, 2, 2, False, 100, 10_000, [QueueStatus(0, 10, 60), QueueStatus(1, 0, 40)])
    dlq = TopicStatus("%DLQ%cg", 6, 1, 1, True, 3, 300, [QueueStatus(0, 0, 3)])
    cg = GroupRow(
        'we"ird\\g\nx',
        False,
        2,
        7,
        {("Orders", 0): 50, ("Orders", 1): 40},
        {("Orders", 0): 10, ("Orders", 1): 0},
        pop_inflight=5,
    )
    clients = (
        ClientInfo(1, 999, "consumer", cg.name, 0, 64, 0),
        ClientInfo(2, 998, "producer", None, 0, 0, 128),
        ClientInfo(3, 997, "producer", None, 0, 512, 0),
    )
    return Snapshot(
        "b1", 1_700_000_061_500, 1.0, broker, {t.topic: t for t in (orders, dlq)}, {cg.name: cg}, clients, process
    )


GOLDEN = r"""# HELP shmq_up 1 when the broker's state segment was read, 0 when the broker is down or starting
# TYPE shmq_up gauge
shmq_up{broker="b1"} 1
# HELP shmq_broker_info The broker's role and version (value always 1)
# TYPE shmq_broker_info gauge
shmq_broker_info{broker="b1",role="SYNC_MASTER",version="0.14.0"} 1
# HELP shmq_broker_start_time_seconds When the broker started, seconds since the epoch
# TYPE shmq_broker_start_time_seconds gauge
shmq_broker_start_time_seconds{broker="b1"} 1700000000.0
# HELP shmq_broker_uptime_seconds Seconds since the broker started
# TYPE shmq_broker_uptime_seconds gauge
shmq_broker_uptime_seconds{broker="b1"} 61.5
# HELP shmq_broker_messages_in_total Messages put since the broker started
# TYPE shmq_broker_messages_in_total counter
shmq_broker_messages_in_total{broker="b1"} 103
# HELP shmq_broker_bytes_in_total Message bytes put since the broker started
# TYPE shmq_broker_bytes_in_total counter
shmq_broker_bytes_in_total{broker="b1"} 10300
# HELP shmq_busy_rejections_total Sends refused with BrokerBusy (flow control) since the broker started
# TYPE shmq_busy_rejections_total counter
shmq_busy_rejections_total{broker="b1"} 2
# HELP shmq_commitlog_max_offset_bytes The commitlog's end (bytes ever written)
# TYPE shmq_commitlog_max_offset_bytes gauge
shmq_commitlog_max_offset_bytes{broker="b1"} 5000
# HELP shmq_commitlog_min_offset_bytes The commitlog's first byte still on disk
# TYPE shmq_commitlog_min_offset_bytes gauge
shmq_commitlog_min_offset_bytes{broker="b1"} 0
# HELP shmq_flush_lag_bytes Commitlog bytes written but not yet flushed (SYNC_FLUSH brokers)
# TYPE shmq_flush_lag_bytes gauge
shmq_flush_lag_bytes{broker="b1"} 1000
# HELP shmq_disk_used_ratio Used fraction of the store's disk
# TYPE shmq_disk_used_ratio gauge
shmq_disk_used_ratio{broker="b1"} 0.5
# HELP shmq_disk_warning_ratio Disk used ratio above which the broker refuses sends (diskMaxUsedSpaceRatio)
# TYPE shmq_disk_warning_ratio gauge
shmq_disk_warning_ratio{broker="b1"} 0.9
# HELP shmq_disk_clean_ratio Disk used ratio above which old commitlog files are deleted at once
# TYPE shmq_disk_clean_ratio gauge
shmq_disk_clean_ratio{broker="b1"} 0.85
# HELP shmq_delay_backlog_messages Delay-level messages not yet due
# TYPE shmq_delay_backlog_messages gauge
shmq_delay_backlog_messages{broker="b1"} 4
# HELP shmq_timer_backlog_messages Timer (deliver-at) messages not yet due
# TYPE shmq_timer_backlog_messages gauge
shmq_timer_backlog_messages{broker="b1"} 5
# HELP shmq_half_backlog_messages Transaction half messages not yet committed or rolled back
# TYPE shmq_half_backlog_messages gauge
shmq_half_backlog_messages{broker="b1"} 1
# HELP shmq_dlq_messages Messages stored in all dead-letter queues (%DLQ% topics)
# TYPE shmq_dlq_messages gauge
shmq_dlq_messages{broker="b1"} 3
# HELP shmq_pop_inflight_messages POP (SimpleConsumer) messages handed out and not yet acked or revived
# TYPE shmq_pop_inflight_messages gauge
shmq_pop_inflight_messages{broker="b1"} 6
# HELP shmq_pop_revived_messages_total POP messages not acked in time, revived to their retry topic
# TYPE shmq_pop_revived_messages_total counter
shmq_pop_revived_messages_total{broker="b1"} 2
# HELP shmq_replicas Replicas attached to this master
# TYPE shmq_replicas gauge
shmq_replicas{broker="b1"} 1
# HELP shmq_replicas_in_sync Replicas within haMaxGapNotInSync of this master
# TYPE shmq_replicas_in_sync gauge
shmq_replicas_in_sync{broker="b1"} 1
# HELP shmq_replica_lag_bytes Bytes the best replica is behind (master), or this replica is behind its master
# TYPE shmq_replica_lag_bytes gauge
shmq_replica_lag_bytes{broker="b1"} 500
# HELP shmq_broker_cpu_seconds_total CPU seconds (user + system) the broker process used
# TYPE shmq_broker_cpu_seconds_total counter
shmq_broker_cpu_seconds_total{broker="b1"} 3.25
# HELP shmq_broker_resident_memory_bytes The broker process's resident set size
# TYPE shmq_broker_resident_memory_bytes gauge
shmq_broker_resident_memory_bytes{broker="b1"} 50000000
# HELP shmq_broker_threads Threads of the broker process
# TYPE shmq_broker_threads gauge
shmq_broker_threads{broker="b1"} 9
# HELP shmq_topic_messages_in_total Messages put into the topic since the broker started
# TYPE shmq_topic_messages_in_total counter
shmq_topic_messages_in_total{broker="b1",topic="%DLQ%cg"} 3
shmq_topic_messages_in_total{broker="b1",topic="Orders"} 100
# HELP shmq_topic_bytes_in_total Message bytes put into the topic since the broker started
# TYPE shmq_topic_bytes_in_total counter
shmq_topic_bytes_in_total{broker="b1",topic="%DLQ%cg"} 300
shmq_topic_bytes_in_total{broker="b1",topic="Orders"} 10000
# HELP shmq_topic_max_offset Sum of the topic's queue max offsets (messages ever put)
# TYPE shmq_topic_max_offset gauge
shmq_topic_max_offset{broker="b1",topic="%DLQ%cg"} 3
shmq_topic_max_offset{broker="b1",topic="Orders"} 100
# HELP shmq_topic_min_offset Sum of the topic's queue min offsets (messages deleted with old files)
# TYPE shmq_topic_min_offset gauge
shmq_topic_min_offset{broker="b1",topic="%DLQ%cg"} 0
shmq_topic_min_offset{broker="b1",topic="Orders"} 10
# HELP shmq_topic_messages_stored Messages of the topic still stored (max - min offset over its queues)
# TYPE shmq_topic_messages_stored gauge
shmq_topic_messages_stored{broker="b1",topic="%DLQ%cg"} 3
shmq_topic_messages_stored{broker="b1",topic="Orders"} 90
# HELP shmq_topic_queues The topic's write queues
# TYPE shmq_topic_queues gauge
shmq_topic_queues{broker="b1",topic="%DLQ%cg"} 1
shmq_topic_queues{broker="b1",topic="Orders"} 2
# HELP shmq_group_members Consumers attached in the group
# TYPE shmq_group_members gauge
shmq_group_members{broker="b1",group="we\"ird\\g\nx"} 2
# HELP shmq_group_pop_inflight_messages POP (SimpleConsumer) messages handed out to the group, not yet acked or revived
# TYPE shmq_group_pop_inflight_messages gauge
shmq_group_pop_inflight_messages{broker="b1",group="we\"ird\\g\nx"} 5
# HELP shmq_group_lag Messages of the topic the group has not committed yet (its backlog)
# TYPE shmq_group_lag gauge
shmq_group_lag{broker="b1",group="we\"ird\\g\nx",topic="Orders"} 10
# HELP shmq_group_committed_offset Sum of the group's committed offsets over the topic's queues
# TYPE shmq_group_committed_offset gauge
shmq_group_committed_offset{broker="b1",group="we\"ird\\g\nx",topic="Orders"} 90
# HELP shmq_clients Attached clients by role
# TYPE shmq_clients gauge
shmq_clients{broker="b1",role="consumer"} 1
shmq_clients{broker="b1",role="producer"} 2
# HELP shmq_client_ring_used_bytes_max Largest number of bytes waiting in one client's ring
# TYPE shmq_client_ring_used_bytes_max gauge
shmq_client_ring_used_bytes_max{broker="b1",role="consumer",ring="request"} 64
shmq_client_ring_used_bytes_max{broker="b1",role="consumer",ring="response"} 0
shmq_client_ring_used_bytes_max{broker="b1",role="producer",ring="request"} 512
shmq_client_ring_used_bytes_max{broker="b1",role="producer",ring="response"} 128
"""


def test_golden_text() -> None:
    assert render(families(_snapshot())) == GOLDEN


def test_parsed_back_values_and_types() -> None:
    types, samples = parse(render(families(_snapshot())))
    assert types["shmq_topic_messages_in_total"] == "counter" and types["shmq_group_lag"] == "gauge"
    group = 'we"ird\\g\nx'
    assert samples[("shmq_group_lag", frozenset({("broker", "b1"), ("group", group), ("topic", "Orders")}))] == 10
    assert samples[("shmq_topic_messages_stored", frozenset({("broker", "b1"), ("topic", "%DLQ%cg")}))] == 3
    assert samples[("shmq_up", frozenset({("broker", "b1")}))] == 1


def test_unreported_values_are_left_out() -> None:
    snap = _snapshot(ProcessRow())
    b = snap.broker
    snap = replace(snap, broker=replace(b, flush_offset=-1, disk_used_ratio=-1.0, replicas=0, health_ms=0))
    _, samples = parse(render(families(snap)))
    names = {name for name, _ in samples}
    for gone in (
        "shmq_flush_lag_bytes",
        "shmq_disk_used_ratio",
        "shmq_disk_warning_ratio",
        "shmq_replica_lag_bytes",
        "shmq_broker_cpu_seconds_total",
        "shmq_broker_resident_memory_bytes",
    ):
        assert gone not in names
    assert "shmq_dlq_messages" in names


def test_replica_reports_lag_to_its_master_and_no_replica_counts() -> None:
    snap = _snapshot()
    snap = replace(snap, broker=replace(snap.broker, role="SLAVE", replica_offset=4000, master_offset=4600))
    _, samples = parse(render(families(snap)))
    assert samples[("shmq_replica_lag_bytes", frozenset({("broker", "b1")}))] == 600
    assert not any(name == "shmq_replicas" for name, _ in samples)


def test_down_is_only_up_zero() -> None:
    types, samples = parse(render(down_families('b"1')))
    assert types == {"shmq_up": "gauge"} and samples == {("shmq_up", frozenset({("broker", 'b"1')})): 0}


def test_escaping_and_values() -> None:
    assert escape_label('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    assert [format_value(v) for v in (3, 0.25, float("nan"), float("inf"), -float("inf"), True)] == [
        "3",
        "0.25",
        "NaN",
        "+Inf",
        "-Inf",
        "1",
    ]


def test_merged_brokers_declare_each_metric_once_with_every_brokers_samples() -> None:
    from shmq.monitor.prometheus import down_families, families, merge, namesrv_families
    from tests.monitor.snapshots import orders_run

    one = orders_run(1)[-1]
    two = replace(one, name="b2")
    text = "".join(f.render() for f in merge([namesrv_families("ns1", True, 3), families(one), families(two)]))
    _, samples = parse(text)  # strict: a second TYPE line of a metric fails here
    assert samples[("shmq_namesrv_up", frozenset({("namesrv", "ns1")}))] == 1
    assert samples[("shmq_namesrv_brokers", frozenset({("namesrv", "ns1")}))] == 3
    for b in ("b1", "b2"):
        assert samples[("shmq_up", frozenset({("broker", b)}))] == 1
        assert samples[("shmq_topic_max_offset", frozenset({("broker", b), ("topic", "Orders")}))] == 100
    down = "".join(f.render() for f in merge([families(one), down_families("b3")]))
    assert parse(down)[1][("shmq_up", frozenset({("broker", "b3")}))] == 0
