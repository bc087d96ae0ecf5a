"""The pure parts of `shmq admin`: state-segment readers over a plain buffer, and rows from data."""

from __future__ import annotations

from shmq.broker.admin_status import MASK, config_properties
from shmq.broker.publish import ROLE_CONSUMER, ROLE_PRODUCER
from shmq.cli.admin import broker as broker_cmd
from shmq.cli.admin import clients as clients_cmd
from shmq.cli.admin import dlq as dlq_cmd
from shmq.cli.admin import group as group_cmd
from shmq.cli.admin import topic as topic_cmd
from shmq.client import admin_state
from shmq.client.admin_reports import ConsumerProgress, GroupInfo, QueueProgress
from shmq.config import BrokerConfig
from shmq.ring.state import StateLayout, StateView

LAYOUT = StateLayout(topics=8, queues=32, groups=4, members=8, offsets=8, clients=4)


def _view() -> StateView:
    """A state segment image: Orders (2 queues), %DLQ%cg (1 queue), a producer and a consumer of cg."""
    v = StateView(bytearray(LAYOUT.size), LAYOUT)
    v.topics[3] = (1, 6, 2, 2, 0, 12, 1200, 0, 0, b"Orders")
    v.queues[0] = (3, 0, 2, 7)
    v.queues[1] = (3, 1, 0, 5)
    v.topics[5] = (1, 6, 1, 1, 2, 4, 400, 0, 0, b"%DLQ%cg")
    v.queues[2] = (5, 0, 1, 4)
    v.groups[1] = (1, 0, 1, 3, b"cg", 0)
    v.clients[0] = (1, ROLE_CONSUMER, 42, 7, 1, 1001, 2000, 64, 0)
    v.clients[2] = (1, ROLE_PRODUCER, 41, 6, -1, 1000, 1000, 0, 128)
    return v


def test_topics_from_the_state_segment() -> None:
    v = _view()
    topics = admin_state.all_topics(v)
    assert list(topics) == ["%DLQ%cg", "Orders"]
    orders = topics["Orders"]
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in orders.queues] == [(0, 2, 7), (1, 0, 5)]
    assert (orders.messages, orders.max_offset, orders.msgs_in, orders.system) == (10, 12, 12, False)
    assert topics["%DLQ%cg"].system and admin_state.one_topic(v, "Nope") is None
    assert admin_state.one_topic(v, "Orders") == orders


def test_clients_and_dead_letters_from_the_state_segment() -> None:
    v = _view()
    cs = admin_state.clients(v)
    assert [(c.client_id, c.pid, c.role, c.group) for c in cs] == [
        (1000, 41, "producer", None),
        (1001, 42, "consumer", "cg"),
    ]
    assert (cs[0].response_fill, cs[1].request_fill) == (128, 64)
    assert admin_state.dead_letters(v) == [admin_state.DlqInfo("cg", "%DLQ%cg", 1, 3)]


def test_topic_rows_put_system_topics_last_and_marked() -> None:
    data = [topic_cmd.topic_data(t) for t in admin_state.all_topics(_view()).values()]
    rows = topic_cmd.list_rows(data)
    assert [r[:2] for r in rows] == [["Orders", ""], ["%DLQ%cg", "system"]]
    assert rows[0][4:] == ["6 (rw)", 10, 12, 12]
    assert [r[0] for r in topic_cmd.list_rows(data, system=False)] == ["Orders"]
    orders = next(d for d in data if d["topic"] == "Orders")
    assert topic_cmd.queue_rows(orders) == [[0, 2, 7, 5], [1, 0, 5, 5], ["total", "", 12, 10]]
    assert topic_cmd.perm_text(4) == "4 (r-)" and topic_cmd.perm_text(2) == "2 (-w)"


def test_lag_counts_from_the_committed_offset_or_the_queue_start() -> None:
    assert QueueProgress("T", 0, 5, 0, 9).lag == 4
    assert QueueProgress("T", 1, -1, 3, 9).lag == 6  # never committed: what is stored
    assert QueueProgress("T", 2, 12, 0, 9).lag == 0  # committed past max (a reset): no negative lag
    p = ConsumerProgress("cg", False, None, [QueueProgress("T", 0, 5, 0, 9), QueueProgress("T", 1, -1, 3, 9)])
    data = group_cmd.progress_data(p)
    assert data["lag"] == 10
    assert group_cmd.progress_rows(data) == [["T", 0, 9, 5, 4], ["T", 1, 9, "-", 6], ["total", "", 18, "", 10]]


def test_group_rows_join_subscriptions_of_all_members() -> None:
    g = GroupInfo.from_json(
        "cg",
        {
            "model": "CLUSTERING",
            "version": 4,
            "members": [2, 1],
            "subscriptions": {"1": {"B": "TagA"}, "2": {"A": {"type": "SQL92", "expression": "a > 1"}}},
        },
    )
    assert g.subscriptions == {"A": "SQL92: a > 1", "B": "TagA"}
    assert group_cmd.group_rows([group_cmd.group_data(g)]) == [["cg", "CLUSTERING", 2, 4, "A (SQL92: a > 1), B (TagA)"]]


def _status(**over: object) -> dict:
    d = {
        "name": "b",
        "version": "0.1.0",
        "role": "ASYNC_MASTER",
        "pid": 7,
        "store_dir": "/s",
        "uptime_s": 3.0,
        "cpu_percent": 1.5,
        "rss_bytes": 3 * 1024 * 1024,
        "commitlog_min_offset": 0,
        "commitlog_max_offset": 500,
        "flushed_offset": 400,
        "disk_used_ratio": 0.5,
        "disk_max_used_space_ratio": 0.75,
        "disk_space_warning_level_ratio": 0.9,
        "disk_full": False,
        "clients": 2,
        "msgs_in": 5,
        "bytes_in": 500,
        "busy_rejections": 1,
        "replicas": None,
        "config": {"brokerRole": "ASYNC_MASTER", "brokerName": None},
    }
    d.update(over)
    return d


def test_broker_summary_rows_spell_out_alerts() -> None:
    rows = dict(broker_cmd.summary_rows(_status()))
    assert rows["flushed offset"] == "400  (100 bytes behind)" and rows["rss"] == "3.0 MiB"
    assert rows["replicas"] == "- (no HA segment)" and rows["disk used"].startswith("50.0%  (")
    assert "cleanup deletes early" in dict(broker_cmd.summary_rows(_status(disk_used_ratio=0.8)))["disk used"]
    assert "WRITES REFUSED" in dict(broker_cmd.summary_rows(_status(disk_full=True)))["disk used"]
    replica = {
        "address": "127.0.0.1:5",
        "name": "r1",
        "acked_offset": 450,
        "streaming": True,
        "lag_bytes": 50,
        "connected_ms": 0,
    }
    assert (
        dict(broker_cmd.summary_rows(_status(replicas=[replica])))["replica r1"]
        == "acked 450 (50 bytes behind, streaming)"
    )
    assert broker_cmd.config_rows(_status()["config"]) == [["brokerName", ""], ["brokerRole", "ASYNC_MASTER"]]


def test_client_and_dlq_rows() -> None:
    c = clients_cmd.client_data(admin_state.clients(_view())[1])
    row = clients_cmd.client_rows([c])[0]
    assert row[:4] == [1001, 42, "consumer", "cg"] and row[5:] == [64, 0]
    assert dlq_cmd.dlq_rows([{"group": "cg", "topic": "%DLQ%cg", "queues": 1, "messages": 3}]) == [
        ["cg", "%DLQ%cg", 1, 3]
    ]


def test_config_properties_use_rocketmq_names_and_mask_secrets() -> None:
    props = config_properties(BrokerConfig(ha_auth_token="s3cret", flush_disk_type="SYNC_FLUSH"))
    assert props["flushDiskType"] == "SYNC_FLUSH" and props["haAuthToken"] == MASK
    assert "s3cret" not in str(props) and config_properties(BrokerConfig())["haAuthToken"] == ""
