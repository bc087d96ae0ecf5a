"""`shmq admin topic / group / clients / broker status / dlq` against a real broker, --json parsed back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

import shmq
from shmq import ConsumeFrom, ConsumeResult, LitePullConsumer, Message, Producer, PushConsumer
from shmq.cli.main import main


def admin_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """Run `shmq admin ARGV --json` in this process; its parsed output (status 0 asserted)."""
    capsys.readouterr()
    assert main(["admin", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def admin_json_when(capsys: pytest.CaptureFixture[str], ready: Callable[[Any], bool], *argv: str) -> Any:
    """``admin_json`` until ``ready(data)``: counters are published on the broker's tick, not per send."""
    deadline = time.monotonic() + 5
    data = admin_json(capsys, *argv)
    while not ready(data) and time.monotonic() < deadline:
        time.sleep(0.05)
        data = admin_json(capsys, *argv)
    return data


def admin_fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run a command that must fail: status 1 and exactly one line on stderr, which is returned."""
    capsys.readouterr()
    assert main(["admin", *argv]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("shmq admin ")
    return lines[0]


def test_topics_groups_clients_and_status(
    broker_name: str, store_dir: str, config: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    with shmq.Broker(store_dir, name=broker_name, config=config) as broker:
        made = admin_json(capsys, "topic", "create", "Orders", "--queues", "3", "--name", broker_name)
        assert made == {
            "topic": "Orders",
            "system": False,
            "perm": 6,
            "read_queue_nums": 3,
            "write_queue_nums": 3,
            "order": False,
        }
        assert admin_json(capsys, "topic", "create", "Seq", "--order", "--name", broker_name)["order"] is True
        assert shmq.Admin(broker_name).topics()["Seq"].order
        assert shmq.Admin(broker_name).delete_topic("Seq")
        p = Producer("pg", broker=broker_name).start()
        try:
            for i in range(7):
                p.send(Message("Orders", b"m%d" % i))
            status = admin_json_when(
                capsys, lambda d: d["msgs_in"] == 7, "topic", "status", "Orders", "--name", broker_name
            )
            assert [q["queue_id"] for q in status["queues"]] == [0, 1, 2]
            assert status["max_offset"] == sum(q["max_offset"] for q in status["queues"]) == 7
            assert status["messages"] == 7 and status["msgs_in"] == 7

            listed = {t["topic"]: t for t in admin_json(capsys, "topic", "list", "--name", broker_name)}
            assert listed["Orders"]["system"] is False and listed["Orders"]["max_offset"] == 7
            assert listed["SCHEDULE_TOPIC_XXXX"]["system"] is True
            assert [t["topic"] for t in admin_json(capsys, "topic", "list", "--no-system", "--name", broker_name)] == [
                "Orders"
            ]

            updated = admin_json(capsys, "topic", "update", "Orders", "--perm", "4", "--name", broker_name)
            assert updated["perm"] == 4
            assert admin_json(capsys, "topic", "status", "Orders", "--name", broker_name)["msgs_in"] == 7  # kept

            clients = admin_json(capsys, "clients", "--name", broker_name)
            mine = [c for c in clients if c["pid"] == os.getpid()]
            assert [c["role"] for c in mine] == ["producer"] and mine[0]["group"] is None

            st = admin_json(capsys, "broker", "status", "--name", broker_name)
            assert st["name"] == broker_name and st["pid"] == broker.pid and st["role"] == "ASYNC_MASTER"
            assert st["version"] == shmq.__version__ and st["clients"] == len(clients)
            assert st["commitlog_max_offset"] > 0 and st["msgs_in"] == 7
            assert 0 < st["disk_used_ratio"] < 1 and st["disk_max_used_space_ratio"] == 0.75
            assert st["config"]["mappedFileSizeCommitLog"] == config["mappedFileSizeCommitLog"]
            assert st["config"]["flushDiskType"] == "ASYNC_FLUSH"
            assert st["rss_bytes"] > 0 and st["cpu_percent"] >= 0 and st["uptime_s"] >= 0
            assert st["replicas"] == []  # a master with no replica connected

            assert admin_json(capsys, "topic", "delete", "Orders", "--name", broker_name)["deleted"] is True
            assert "no topic 'Orders'" in admin_fails(capsys, "topic", "status", "Orders", "--name", broker_name)
        finally:
            p.shutdown()


def test_progress_lag_after_a_consumer_commits(
    broker_name: str, store_dir: str, config: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    with shmq.Broker(store_dir, name=broker_name, config=config):
        shmq.Admin(broker_name).create_topic("Orders", queues=2)
        p = Producer("pg", broker=broker_name).start()
        try:
            for i in range(6):
                p.send(Message("Orders", b"m%d" % i))
            c = LitePullConsumer("cg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET).start()
            c.subscribe("Orders")
            got: list = []
            deadline = time.monotonic() + 10
            while len(got) < 6 and time.monotonic() < deadline:
                got += c.poll(0.5)
            c.commit()
            online = admin_json(capsys, "group", "progress", "cg", "--name", broker_name)
            assert online["online"] is True and online["lag"] == 0
            assert [(q["queue_id"], q["committed"], q["max_offset"]) for q in online["queues"]] == [
                (0, 3, 3),
                (1, 3, 3),
            ]
            groups = {g["group"]: g for g in admin_json(capsys, "group", "list", "--name", broker_name)}
            assert groups["cg"]["model"] == "CLUSTERING" and len(groups["cg"]["members"]) == 1
            assert groups["cg"]["subscriptions"] == {"Orders": "*"}
            c.shutdown()
            for i in range(4):
                p.send(Message("Orders", b"late%d" % i))
            away = admin_json(capsys, "group", "progress", "cg", "--name", broker_name)
            assert away["online"] is False
            assert away["lag"] == 4 == sum(q["max_offset"] - q["committed"] for q in away["queues"])
        finally:
            p.shutdown()


def test_dlq_list_shows_sizes_and_resend(
    broker_name: str, store_dir: str, config: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    with shmq.Broker(store_dir, name=broker_name, config=config):
        p = Producer("pg", broker=broker_name).start()
        c = PushConsumer("failing", broker=broker_name, max_reconsume_times=0, consume_from=ConsumeFrom.FIRST_OFFSET)
        try:
            for i in range(3):
                p.send(Message("Orders", b"m%d" % i))
            c.subscribe("Orders", "*")
            c.register_listener(lambda msgs, ctx: ConsumeResult.RECONSUME_LATER)
            c.start()
            deadline = time.monotonic() + 10
            dlq: list = []
            while time.monotonic() < deadline:
                dlq = admin_json(capsys, "dlq", "list", "--name", broker_name)
                if dlq and dlq[0]["messages"] == 3:
                    break
                time.sleep(0.1)
            assert dlq == [{"group": "failing", "topic": "%DLQ%failing", "queues": 1, "messages": 3}]
            c.shutdown()
            r = admin_json(capsys, "dlq", "resend", "failing", "--max", "2", "--name", broker_name)
            assert len(r["resent"]) == 2 and r["remaining"] == 1
        finally:
            p.shutdown()


def test_errors_are_one_line(
    broker_name: str, store_dir: str, config: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "no broker named" in admin_fails(capsys, "clients", "--name", broker_name)
    with shmq.Broker(store_dir, name=broker_name, config=config):
        assert "bad name!" in admin_fails(capsys, "topic", "create", "bad name!", "--name", broker_name)
        assert "system topic" in admin_fails(capsys, "topic", "create", "%DLQ%x", "--name", broker_name)
        assert "no topic 'Nope'" in admin_fails(capsys, "topic", "update", "Nope", "--perm", "4", "--name", broker_name)
        assert "nothing to change" in admin_fails(capsys, "topic", "update", "Nope", "--name", broker_name)
        with pytest.raises(SystemExit) as usage:
            main(["admin", "topic", "create", "T", "--perm", "5", "--name", broker_name])
        assert usage.value.code == 2


def test_as_a_subprocess(broker_name: str, store_dir: str, config: dict) -> None:
    """`python -m shmq admin ...` as a user runs it: --json on stdout, the broker named by $SHMQ_BROKER."""
    env = dict(os.environ, SHMQ_BROKER=broker_name)
    cmd = [sys.executable, "-m", "shmq", "admin"]
    with shmq.Broker(store_dir, name=broker_name, config=config):
        made = subprocess.run(
            [*cmd, "topic", "create", "Jobs", "--queues", "2", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert made.returncode == 0, made.stderr
        assert json.loads(made.stdout)["read_queue_nums"] == 2
        shown = subprocess.run([*cmd, "topic", "status", "Jobs"], env=env, capture_output=True, text=True, timeout=30)
        assert shown.returncode == 0 and "total" in shown.stdout and "perm 6 (rw)" in shown.stdout
    gone = subprocess.run([*cmd, "broker", "status"], env=env, capture_output=True, text=True, timeout=30)
    assert gone.returncode == 1 and gone.stdout == ""
    assert gone.stderr.splitlines() == [
        f"shmq admin broker status: error: no broker named {broker_name!r} is "
        f"running (no state segment); start one with `shmq broker --store DIR "
        f"--name {broker_name}`"
    ]
