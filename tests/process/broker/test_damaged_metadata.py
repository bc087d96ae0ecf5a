"""Issue 10 D11/D12 as a user meets them: a broker stopped (cleanly or by SIGKILL), its metadata
and consume queues damaged, restarted. Every acknowledged message must be readable at its
offset, committed offsets kept, the damage logged; a start that cannot be made safe is refused
with one line and exit status 2, leaving no IPC object (the autouse ipc_tracker checks)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import shmq
from shmq import Message, MessageQueue, Producer, PullConsumer, PullStatus, SendStatus
from shmq.config import BrokerConfig

KEEP, GONE = "Keep", "Gone"


def produce(broker_name: str) -> dict[tuple[str, int], list[bytes]]:
    """Acknowledged messages per queue, in queue-offset order (checked against the send results)."""
    acked: dict[tuple[str, int], list[bytes]] = {}
    with Producer("pg", broker=broker_name) as p:
        for topic, queues, n in ((KEEP, 4, 120), (GONE, 2, 20)):
            for i in range(n):
                body = b"%s-%d" % (topic.encode(), i)
                r = p.send(Message(topic, body), selector=lambda qs, m, a: qs[a], arg=i % queues)
                assert r.status is SendStatus.SEND_OK
                got = acked.setdefault((topic, r.queue.queue_id), [])
                assert r.queue_offset == len(got)
                got.append(body)
    return acked


COMMITS = {(KEEP, 1): 10, (KEEP, 2): 30, (GONE, 1): 4}


def commit(broker_name: str, store_dir: str) -> None:
    """Commit COMMITS for group cg and wait until the broker persisted them."""
    with PullConsumer("cg", broker=broker_name) as c:
        for (topic, qid), offset in COMMITS.items():
            c.commit(MessageQueue(topic, broker_name, qid), offset)
        path = os.path.join(store_dir, "config", "consumerOffset.json")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with open(path) as f:
                    table = json.load(f)["offsetTable"]
                if len(table) == 2:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        raise AssertionError("offsets were not persisted")


def read_all(broker_name: str, topic: str, queues: int) -> dict[tuple[str, int], list[bytes]]:
    out: dict[tuple[str, int], list[bytes]] = {}
    with PullConsumer("reader", broker=broker_name) as c:
        for qid in range(queues):
            mq = MessageQueue(topic, broker_name, qid)
            got: list[bytes] = []
            while True:
                r = c.pull(mq, "*", offset=len(got), max_nums=64, timeout=0.05)
                if r.status is not PullStatus.FOUND:
                    break
                assert [m.queue_offset for m in r.messages] == list(range(len(got), len(got) + len(r.messages)))
                got += [bytes(m.body) for m in r.messages]
            out[(topic, qid)] = got
    return out


def damage(store_dir: str) -> None:
    """Keep/1's queue truncated to nothing, Gone's folder removed, topics.json and its copy garbage."""
    d = os.path.join(store_dir, "consumequeue", KEEP, "1")
    for name in os.listdir(d):
        os.truncate(os.path.join(d, name), 0)
    shutil.rmtree(os.path.join(store_dir, "consumequeue", GONE))
    for name in ("topics.json", "topics.json.bak"):
        with open(os.path.join(store_dir, "config", name), "wb") as f:
            f.write(b"\xff\xfe garbage")


@pytest.mark.parametrize("stop", ["clean", "sigkill"])
def test_damaged_queues_and_topics_are_rebuilt_at_restart(store_dir, broker_name, config, stop):
    """Regression: the damaged queues came back empty (Keep/1: 30 messages invisible, its next
    message at offset 0 below the committed 10), Gone and its 20 messages vanished with topics.json."""
    config["flushConsumerOffsetInterval"] = 50
    broker = shmq.Broker(store_dir, broker_name, config)
    try:
        acked = produce(broker_name)
        commit(broker_name, store_dir)
        if stop == "sigkill":
            os.kill(broker.pid, signal.SIGKILL)
            broker.process.wait()
    finally:
        broker.stop()
    damage(store_dir)
    with shmq.Broker(store_dir, broker_name, config) as broker:
        got = read_all(broker_name, KEEP, 4)
        got.update(read_all(broker_name, GONE, 2))
        assert got == acked
        with PullConsumer("cg", broker=broker_name) as c:
            assert len(c.fetch_queues(GONE)) == 4  # rebuilt: what auto-creation gives
            for (topic, qid), offset in COMMITS.items():
                assert c.fetch_consume_offset(MessageQueue(topic, broker_name, qid), from_store=True) == offset
        with Producer("pg", broker=broker_name) as p:
            r = p.send(Message(KEEP, b"next"), selector=lambda qs, m, a: qs[1])
            assert r.queue_offset == 30
        log = broker.log()
    assert "ERROR topic config damaged" in log and "topics.json.damaged" in log
    if stop == "clean":  # after SIGKILL recovery re-dispatches the whole (one-segment) log anyway
        assert "consume queues lost entries that the commitlog holds: Gone/0, Gone/1, Keep/1" in log


def run_cli(store_dir: str, broker_name: str, config: dict) -> subprocess.CompletedProcess:
    """``python -m shmq broker`` as an operator runs it; a broker that starts anyway is stopped."""
    conf = os.path.join(os.path.dirname(store_dir), "broker.conf")
    with open(conf, "w") as f:
        f.write(BrokerConfig.load(config).to_properties())
    proc = subprocess.Popen(
        [sys.executable, "-m", "shmq", "broker", "--store", store_dir, "--name", broker_name, "--config", conf],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        raise AssertionError(f"the broker started on damaged offsets:\n{err}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_damaged_offsets_without_a_good_copy_refuse_the_start(store_dir, broker_name, config):
    """Regression: garbage in consumerOffset.json (and its copy) silently started the broker
    with every offset reset to -1."""
    with shmq.Broker(store_dir, broker_name, config):
        produce(broker_name)
        commit(broker_name, store_dir)
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        with open(os.path.join(store_dir, "config", name), "w") as f:
            f.write('{"offsetTable": {"Keep@cg": {"1": "ten"}}}')
    done = run_cli(store_dir, broker_name, config)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("shmq broker: error: consumer offsets cannot be read")
    assert "consumerOffset.json" in errors[0] and "Traceback" not in done.stderr
    with pytest.raises(shmq.BrokerStartError, match="consumer offsets cannot be read"):
        shmq.Broker(store_dir, broker_name, config)


def test_wrong_types_in_topics_json_do_not_stop_the_start(store_dir, broker_name, config):
    """Regression: a list where an int belongs exited with a traceback (TypeError) and leaked the
    control queue and the liveness semaphore; a string exited with status 2, leaking the same."""
    with shmq.Broker(store_dir, broker_name, config):
        acked = produce(broker_name)
    path = os.path.join(store_dir, "config", "topics.json")
    with open(path) as f:
        data = json.load(f)
    data["topicConfigTable"][KEEP]["perm"] = [6]
    data["topicConfigTable"][GONE]["readQueueNums"] = "x"
    with open(path, "w") as f:
        json.dump(data, f)
    with shmq.Broker(store_dir, broker_name, config) as broker:
        got = read_all(broker_name, KEEP, 4)
        got.update(read_all(broker_name, GONE, 2))
        assert got == acked
        log = broker.log()
    assert "topic 'Keep'" in log and "topic 'Gone'" in log and "entry dropped" in log
