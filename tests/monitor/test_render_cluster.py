"""The `shmq top --namesrv` frame from hand-made snapshots: a row per broker, the totals, each
broker's tables titled with its name, a down broker, the name server down, a short screen."""

from __future__ import annotations

from shmq.monitor.render_cluster import BrokerFrame, render_cluster, render_no_routes
from shmq.namesrv.routes import BrokerData
from tests.monitor.snapshots import orders_run, snapshot, topic
from tests.monitor.test_render import text_of


def route(name: str, pid: int, broker_id: int = 0) -> BrokerData:
    return BrokerData(name, name, "DefaultCluster", broker_id, "ASYNC_MASTER", pid, 1, f"/srv/shmq/{name}", 0)


def frames() -> list[BrokerFrame]:
    busy = orders_run(5)  # 100 msg/s in, group cg 2 members lagging 100 messages
    quiet = [snapshot(t, [topic("Orders", [3, 4])]) for t in (4, 5)]
    return [BrokerFrame(route("ns1-b0", 101), busy), BrokerFrame(route("ns1-b1", 102), quiet)]


def _row(text: str, first: str) -> list[str]:
    return next(line.split() for line in text.splitlines() if line.startswith(first + " "))


def test_a_row_per_broker_the_totals_and_each_brokers_tables() -> None:
    text = text_of(render_cluster("ns1", True, frames(), 160, 60))
    assert text.startswith("shmq top - name server ns1  2 broker(s)  name server up")
    assert _row(text, "ns1-b0")[:6] == ["ns1-b0", "0", "ASYNC_MASTER", "101", "00:00:05", "100"]
    assert _row(text, "ns1-b0")[6:] == ["500", "1", "1", "0", "100"]  # msgs in, topics, groups, clients, lag
    assert _row(text, "ns1-b1")[5:] == ["0.0", "7", "1", "0", "0", "0"]
    assert _row(text, "total") == ["total", "100", "507", "2", "1", "0", "100"]
    for name in ("ns1-b0", "ns1-b1"):
        assert f"{name}: topics (1)" in text and f"{name}: consumer groups" in text


def test_a_broker_without_snapshots_is_down_and_adds_nothing_to_the_totals() -> None:
    down = [frames()[0], BrokerFrame(route("ns1-b1", 102), [], "gone")]
    text = text_of(render_cluster("ns1", False, down, 160, 60))
    assert "name server down: routes as it last published them" in text
    assert _row(text, "ns1-b1") == ["ns1-b1", "0", "ASYNC_MASTER", "102", "down"]
    assert _row(text, "total")[2] == "500" and "ns1-b1: topics" not in text


def test_a_short_screen_keeps_the_broker_rows_and_leaves_out_the_tables() -> None:
    text = text_of(render_cluster("ns1", True, frames(), 160, 12))
    assert _row(text, "ns1-b0") and _row(text, "ns1-b1") and _row(text, "total")
    assert ": topics (" not in text


def test_no_routes_screen_says_why() -> None:
    text = text_of(render_no_routes("ns9", "no name server named 'ns9' is serving; start one", 3.0))
    assert "no routes - waiting for the name server (00:00:03)" in text and "start one" in text
