"""Admin over the control queue, long-poll wake-ups, offsets persisted, the CLI with a broker.conf."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import shmq
from shmq import Message, Producer
from shmq.codec import frames as P
from shmq.ring.state import StateReader
from tests.waiting import wait_for

from .rawclient import RawClient


def test_admin_long_poll_and_offsets(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        c = RawClient(broker_name)
        assert c.admin("create_topic", topic="Eight", read_queue_nums=8, write_queue_nums=8).ok
        assert c.admin("list_topics").body["topics"]["Eight"]["writeQueueNums"] == 8
        assert not c.admin("create_topic", topic="bad topic").ok
        assert not c.admin("nope").ok
        joined = c.admin("join_group", group="cg", model="CLUSTERING", subscriptions={"Eight": "*"})
        assert joined.ok and joined.body["members"] == [c.client_id]
        state = StateReader.open(broker_name)
        v = state.snapshot()
        g = v.group_slot("cg")
        assert v.group_members(g) == [c.client_id] and int(v.groups[g]["version"]) == 1
        assert int(v.topics[v.topic_slot("Eight")]["write_queues"]) == 8

        c.write(P.PULL_WAIT, P.encode_pull_wait(1, "Eight", 5, 0, 5000))
        with Producer("pg", broker=broker_name) as p:
            time.sleep(0.05)
            p.send(Message("Eight", b"x"), selector=lambda qs, m, a: qs[5])
            kind, wake = c.read()
            assert kind == P.WAKE and wake == P.Wake(1, 1, False)
        assert int(state.snapshot().topic_queues(state.snapshot().topic_slot("Eight"))[5]["max_offset"]) == 1
        c.write(P.PULL_WAIT, P.encode_pull_wait(2, "Eight", 6, 0, 50))
        kind, wake = c.read()
        assert kind == P.WAKE and wake.timed_out and wake.max_offset == 0

        c.write(P.COMMIT_OFFSET, P.encode_commit_offset(3, "cg", "Eight", 5, 1))
        assert c.admin("commit_offset", group="cg", topic="Eight", queue_id=2, offset=7).ok
        assert c.admin("query_offset", group="cg", topic="Eight", queue_id=5).body["offset"] == 1
        assert c.admin("query_offset", group="cg", topic="Eight", queue_id=1).body["offset"] == -1
        state.close()
        c.close()
    offsets = json.loads(Path(os.path.join(store_dir, "config", "consumerOffset.json")).read_text())
    assert offsets["offsetTable"]["Eight@cg"] == {"5": 1, "2": 7}
    topics = json.loads(Path(os.path.join(store_dir, "config", "topics.json")).read_text())
    assert topics["topicConfigTable"]["Eight"]["readQueueNums"] == 8


def test_dead_member_leaves_group(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        c = RawClient(broker_name)
        assert c.admin("join_group", group="cg", model="BROADCASTING", subscriptions={}).ok
        c.liveness._sem.release()  # what the kernel does when the holder dies
        state = StateReader.open(broker_name)
        assert wait_for(lambda: not state.snapshot().group_members(state.snapshot().group_slot("cg")), 30)
        v = state.snapshot()
        assert v.group_members(v.group_slot("cg")) == [] and int(v.groups[v.group_slot("cg")]["version"]) == 2
        state.close()
        c.close(detach=False)


def test_cli_with_broker_conf_and_sigint(store_dir, broker_name, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("# RocketMQ style\nflushDiskType=SYNC_FLUSH\nmappedFileSizeCommitLog=4194304\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "shmq", "broker", "--store", store_dir, "--name", broker_name, "--config", str(conf)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while f"shmq.{broker_name}.state" not in os.listdir("/dev/shm") and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)
        with Producer("pg", broker=broker_name) as p:
            assert p.send(Message("T", b"x")).status is shmq.SendStatus.SEND_OK
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = proc.stderr.read()
    assert "SYNC_FLUSH" in log and "stopped" in log


def test_auto_created_topics_reach_topics_json_soon_and_at_shutdown(store_dir, broker_name, config):
    path = os.path.join(store_dir, "config", "topics.json")

    def on_disk() -> set[str]:
        return set(json.loads(Path(path).read_text())["topicConfigTable"]) if os.path.exists(path) else set()

    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        for i in range(20):
            p.send(Message(f"Auto{i}", b"x"))
        auto = {f"Auto{i}" for i in range(20)}
        assert wait_for(lambda: auto <= on_disk(), 30), on_disk()  # written by the loop, not per creation
        p.send(Message("Last", b"x"))
    assert "Last" in on_disk()  # shutdown writes what is still pending
