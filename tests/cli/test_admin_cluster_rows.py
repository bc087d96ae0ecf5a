"""The cluster commands' rows and tables (pure): `cluster list`, `topic route`, and the broker
column the other commands gain over a cluster; at 80 columns nothing is cut."""

from __future__ import annotations

import io

from rich.console import Console

from shmq.cli.admin import cluster, dlq, group, offset
from shmq.namesrv.routes import BrokerData, TopicData, TopicRoute

STORE = "/srv/shmq/a-rather-long-cluster-root/ns1-b0"


def _text(renderable: object, width: int = 80) -> str:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=True, color_system=None).print(renderable)
    return out.getvalue()


def _broker(name: str, broker_id: int = 0, perm: int = 6) -> BrokerData:
    return BrokerData(
        name, name, "DefaultCluster", broker_id, "ASYNC_MASTER", 4242, 1, STORE, 0, (TopicData("Orders", 2, 2, perm),)
    )


def test_cluster_rows_and_80_columns() -> None:
    row = {
        "cluster": "DefaultCluster",
        "broker_name": "ns1-b0",
        "broker_id": 0,
        "role": "ASYNC_MASTER",
        "attach_name": "ns1-b0",
        "pid": 4242,
        "store_dir": STORE,
        "topics": 6,
        "msgs_in": None,
        "connections": 3,
    }
    assert cluster.cluster_rows([row]) == [["DefaultCluster", "ns1-b0", 0, "ASYNC_MASTER", 4242, 6, "-", 3, STORE]]
    text = _text(cluster.render_list([row]))
    assert all(len(line) <= 80 for line in text.splitlines()) and "…" not in text
    assert "ns1-b0" in text and "left out at this width" in text
    assert cluster.render_list([]) == "no broker is registered"


def test_route_data_counts_write_queues_of_writable_masters_only() -> None:
    route = TopicRoute("Orders", (_broker("ns1-b0"), _broker("ns1-b1", perm=4)))
    data = cluster.route_data(route)
    assert data["write_queues"] == 2 and data["read_queues"] == 4
    assert cluster.route_rows(data) == [
        ["ns1-b0", 0, "ASYNC_MASTER", 2, 2, "6 (rw)"],
        ["ns1-b1", 0, "ASYNC_MASTER", 2, 2, "4 (r-)"],
    ]


def test_rows_gain_a_broker_column_over_a_cluster_only() -> None:
    one = {"group": "cg", "topic": "%DLQ%cg", "queues": 1, "messages": 3}
    assert dlq.dlq_rows([one]) == [["cg", "%DLQ%cg", 1, 3]]
    assert dlq.dlq_rows([{"broker": "ns1-b1", **one}]) == [["ns1-b1", "cg", "%DLQ%cg", 1, 3]]
    q = {"topic": "Orders", "queue_id": 0, "committed": 2, "min_offset": 0, "max_offset": 5, "lag": 3}
    data = {"group": "cg", "online": False, "model": None, "lag": 3, "queues": [{"broker": "ns1-b0", **q}]}
    assert group.progress_rows(data) == [["ns1-b0", "Orders", 0, 5, 2, 3], ["", "total", "", 5, "", 3]]
    assert offset.broker_rows({"ns1-b1": {"1": 7, "0": 5}, "ns1-b0": {"0": 1}}) == [
        ("ns1-b0", 0, 1),
        ("ns1-b1", 0, 5),
        ("ns1-b1", 1, 7),
    ]
