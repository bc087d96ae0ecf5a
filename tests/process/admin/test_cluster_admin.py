"""`Admin(namesrv=...)` and `shmq admin ... --namesrv` over two real brokers and the routes
that name them: topics on every master, the route, progress, offset resets, lookups and
dead letters across brokers, each row saying its broker; bad input as one line."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import shmq
from shmq import ConsumeFrom, ConsumeResult, LitePullConsumer, Message, Producer, PushConsumer
from shmq.errors import ConfigError
from shmq.model.message import MessageQueue
from tests.ipc_tracking import IpcTracker
from tests.process.admin.test_admin_cli import admin_fails, admin_json
from tests.process.cluster import running_cluster


def test_topic_on_every_master_route_and_cluster_list(
    ipc_tracker: IpcTracker, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_cluster(ipc_tracker, tmp_path) as cluster:
        ns, names = cluster.namesrv, sorted(b.name for b in cluster.brokers)
        rows = admin_json(capsys, "cluster", "list", "--namesrv", ns)
        assert [r["broker_name"] for r in rows] == names
        by_name = {b.name: b for b in cluster.brokers}
        for r in rows:
            assert r["pid"] == by_name[r["broker_name"]].pid and r["role"] == "ASYNC_MASTER"
            assert r["store_dir"] == by_name[r["broker_name"]].store_dir and r["msgs_in"] == 0

        made = admin_json(capsys, "topic", "create", "Orders", "--queues", "2", "--namesrv", ns)
        assert made["brokers"] == names and made["read_queue_nums"] == 2
        for name in names:
            assert shmq.Admin(name).topics()["Orders"].read_queue_nums == 2
        cluster.wait_route("Orders")  # the brokers re-register their topics on their next tick
        route = admin_json(capsys, "topic", "route", "--topic", "Orders", "--namesrv", ns)
        assert [b["broker_name"] for b in route["brokers"]] == names
        assert route["write_queues"] == 4 == route["read_queues"]
        assert shmq.Admin(namesrv=ns).topic_route("Orders").write_queues() == [
            MessageQueue("Orders", n, q) for n in names for q in (0, 1)
        ]

        only = admin_json(capsys, "topic", "create", "Only", "--broker", names[1], "--namesrv", ns)
        assert only["brokers"] == [names[1]]
        assert "Only" not in shmq.Admin(names[0]).topics() and "Only" in shmq.Admin(names[1]).topics()
        line = admin_fails(capsys, "topic", "create", "X", "--broker", "nosuch", "--namesrv", ns)
        assert "no broker named 'nosuch'" in line and names[0] in line

        listed = {t["topic"]: t for t in admin_json(capsys, "topic", "list", "--no-system", "--namesrv", ns)}
        assert listed["Orders"]["brokers"] == names and listed["Only"]["brokers"] == [names[1]]
        assert admin_json(capsys, "topic", "delete", "Orders", "--namesrv", ns)["deleted"] is True
        assert all("Orders" not in shmq.Admin(n).topics() for n in names)


def _consume_all(group: str, broker: str, n: int) -> None:
    """Read ``n`` messages of Orders from ``broker`` as ``group`` and commit them."""
    c = LitePullConsumer(group, broker=broker, consume_from=ConsumeFrom.FIRST_OFFSET).start()
    try:
        c.subscribe("Orders")
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got += c.poll(0.5)
        assert len(got) == n
        c.commit()
    finally:
        c.shutdown()


def test_progress_offset_reset_and_query_across_brokers(
    ipc_tracker: IpcTracker, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_cluster(ipc_tracker, tmp_path) as cluster:
        ns, names = cluster.namesrv, sorted(b.name for b in cluster.brokers)
        admin = shmq.Admin(namesrv=ns)
        admin.create_topic("Orders", queues=2)
        for name in names:
            with Producer("pg", broker=name) as p:
                for i in range(4):
                    p.send(Message("Orders", b"m%d" % i, keys=f"k-{name}"))
            _consume_all("cg", name, 4)

        done = admin_json(capsys, "group", "progress", "cg", "--namesrv", ns)
        assert [(q["broker"], q["queue_id"], q["committed"], q["max_offset"]) for q in done["queues"]] == [
            (n, q, 2, 2) for n in names for q in (0, 1)
        ]
        assert done["lag"] == 0
        assert {q.broker_name for q in admin.consumer_progress("cg").queues} == set(names)

        reset = admin_json(
            capsys, "offset", "reset", "--group", "cg", "--topic", "Orders", "--to", "first", "--namesrv", ns
        )
        assert reset["brokers"] == {n: {"0": 0, "1": 0} for n in names}
        assert admin_json(capsys, "group", "progress", "cg", "--namesrv", ns)["lag"] == 8
        moved = admin.reset_offsets("cg", "Orders", to="last")
        assert moved == {MessageQueue("Orders", n, q): 2 for n in names for q in (0, 1)}
        with pytest.raises(ConfigError, match="reset_offsets"):
            admin.reset_offset("cg", "Orders", to="first")

        for name in names:
            found = admin_json(capsys, "msg", "query", "--topic", "Orders", "--key", f"k-{name}", "--namesrv", ns)
            assert [m["broker"] for m in found["messages"]] == [name] * 4
        one = admin.query_by_key("Orders", f"k-{names[1]}")[0]
        view = admin_json(capsys, "msg", "view", one.msg_id, "--namesrv", ns)
        assert view["headers"]["broker"] == names[1] and view["headers"]["msg_id"] == one.msg_id


def test_dlq_list_and_resend_across_brokers(
    ipc_tracker: IpcTracker, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_cluster(ipc_tracker, tmp_path) as cluster:
        ns, names = cluster.namesrv, sorted(b.name for b in cluster.brokers)
        consumers = []
        try:
            for name in names:
                with Producer("pg", broker=name) as p:
                    for i in range(2):
                        p.send(Message("Orders", b"m%d" % i))
                c = PushConsumer("failing", broker=name, max_reconsume_times=0, consume_from=ConsumeFrom.FIRST_OFFSET)
                c.subscribe("Orders", "*")
                c.register_listener(lambda msgs, ctx: ConsumeResult.RECONSUME_LATER)
                consumers.append(c.start())
            deadline = time.monotonic() + 30
            dlq: list = []
            while time.monotonic() < deadline:
                dlq = admin_json(capsys, "dlq", "list", "--namesrv", ns)
                if [d["messages"] for d in dlq] == [2, 2]:
                    break
                time.sleep(0.1)
            assert dlq == [
                {"broker": n, "group": "failing", "topic": "%DLQ%failing", "queues": 1, "messages": 2} for n in names
            ]
        finally:
            for c in consumers:
                c.shutdown()
        r = admin_json(capsys, "dlq", "resend", "failing", "--max", "3", "--namesrv", ns)
        assert len(r["resent"]) == 3 and r["remaining"] == 1  # the second broker had 2, gave 1
        rest = shmq.Admin(namesrv=ns).resend_dlq("failing")
        assert len(rest.resent) == 1 and rest.remaining == 0


def test_bad_input_is_one_line(ipc_tracker: IpcTracker, capsys: pytest.CaptureFixture[str]) -> None:
    ns = ipc_tracker.name("ns")
    line = admin_fails(capsys, "topic", "list", "--namesrv", ns)
    assert f"start one with `shmq namesrv --name {ns}`" in line
    assert "Error:" not in line and "Traceback" not in line
    assert "not both" in admin_fails(capsys, "group", "list", "--name", "b", "--namesrv", ns)
    assert "give --namesrv" in admin_fails(capsys, "topic", "route", "--topic", "T", "--name", "b")


@pytest.mark.parametrize("command", ["top", "exporter"])
def test_name_and_namesrv_together_is_one_line(command: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "shmq", command, "--name", "b", "--namesrv", "ns"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"shmq {command}: error: give --name (one broker) or --namesrv (every broker of a name server), not both"
    ]
