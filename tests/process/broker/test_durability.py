"""What a broker acknowledged survives it: auto-created topics across SIGKILL, and the min
offsets cleanup moves are published at once."""

from __future__ import annotations

import json
import os
import signal
import time

import shmq
from shmq import Message, Producer, PullConsumer, PullStatus, SendStatus
from shmq.ring.state import StateReader


def test_auto_created_topic_survives_sigkill_right_after_the_ack(store_dir, broker_name, config):
    """Regression (issue 9 A1): the topic's config used to be written up to 200 ms after its
    first send was acknowledged; a SIGKILL in between lost it and hid the stored messages."""
    broker = shmq.Broker(store_dir, broker_name, config)
    try:
        p = Producer("pg", broker=broker_name).start()
        sent = [p.send(Message("Fresh", b"m%d" % i)) for i in range(20)]
        os.kill(broker.pid, signal.SIGKILL)  # right after the last ack
        assert all(r.status is SendStatus.SEND_OK for r in sent)
        broker.process.wait()
        p.shutdown()
    finally:
        broker.stop()
    with open(os.path.join(store_dir, "config", "topics.json")) as f:
        assert "Fresh" in json.load(f)["topicConfigTable"]
    with shmq.Broker(store_dir, broker_name, config), PullConsumer("cg", broker=broker_name) as c:
        queues = c.fetch_queues("Fresh")
        assert len(queues) == 4
        got = []
        for mq in queues:
            r = c.pull(mq, "*", offset=0, max_nums=100)
            if r.status is PullStatus.FOUND:
                got += [m.body for m in r.messages]
        assert sorted(got) == sorted(b"m%d" % i for i in range(20))


def test_cleanup_publishes_the_new_min_offset_at_once(store_dir, broker_name, config):
    """Regression (issue 9 A5): after expired segments are deleted the published min offset of
    a queue moves without waiting for a write to that queue."""
    config.update(
        mappedFileSizeCommitLog=64 * 1024,
        mappedFileSizeConsumeQueue=20 * 64,
        fileReservedTime=0,
        deleteWhen=";".join(str(h) for h in range(24)),
        cleanResourceInterval=2500,
        deleteCommitLogFilesInterval=0,
        deleteFileBatchMax=100,
    )
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        for _i in range(200):  # ~4 segments, all to queue 0; nothing is written afterwards
            p.send_oneway(Message("Old", b"x" * 1000), selector=lambda qs, m, a: qs[0])
        p.send(Message("Old", b"last"), selector=lambda qs, m, a: qs[0])
        state = StateReader.open(broker_name)
        try:

            def published_min() -> int:
                v = state.snapshot()
                return int(v.topic_queues(v.topic_slot("Old"))[0]["min_offset"])

            assert published_min() == 0  # the first cleanup round comes after the last write
            deadline = time.monotonic() + 10
            while published_min() == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            lo = published_min()
            assert 0 < lo < 201
            with PullConsumer("cg", broker=broker_name) as c:
                mq = c.fetch_queues("Old")[0]
                assert c.min_offset(mq) == lo
                r = c.pull(mq, "*", offset=lo, max_nums=1)
                assert r.status is PullStatus.FOUND and r.messages[0].queue_offset == lo
        finally:
            state.close()
