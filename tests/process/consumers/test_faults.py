"""Consumers across a broker crash: SIGKILL under load with SYNC_FLUSH, restart on the same store."""

from __future__ import annotations

import threading
import time

import shmq
from shmq import Message, Producer, SendStatus
from shmq.errors import BrokerGoneError, ShmqError
from tests.waiting import wait_for

from .procs import bodies, expect_line, spawn, stop


def test_broker_killed_under_load_consumers_resume_by_themselves(store_dir, broker_name, config, tmp_path):
    config["flushDiskType"] = "SYNC_FLUSH"
    outs = [str(tmp_path / f"c{i}") for i in range(2)]
    acked: list[str] = []
    stop_sending = threading.Event()
    broker = shmq.Broker(store_dir, broker_name, config)
    members = [spawn("consume", broker_name, "cg", out) for out in outs]
    p = Producer("pg", broker=broker_name, send_msg_timeout=10).start()

    def sender(k: int) -> None:
        n = 0
        while not stop_sending.is_set():
            body = f"{k}-{n}"
            n += 1
            try:
                if p.send(Message("T", body.encode())).status is SendStatus.SEND_OK:
                    acked.append(body)
            except (BrokerGoneError, ShmqError):
                pass

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(3)]
    try:
        for m in members:
            expect_line(m, "ready")
        for t in threads:
            t.start()
        assert wait_for(lambda: len(bodies(*outs)) > 200, 20)
        broker.kill()
        time.sleep(0.3)
        broker = shmq.Broker(store_dir, broker_name, config)
        before = len(acked)
        assert wait_for(lambda: len(acked) > before + 200, 20), "the producer did not reconnect"
        stop_sending.set()
        for t in threads:
            t.join(15)
        missing = lambda: set(acked) - set(bodies(*outs))  # noqa: E731
        assert wait_for(lambda: not missing(), 30), f"{len(missing())} acknowledged messages never consumed"
    finally:
        stop_sending.set()
        p.shutdown()
        for m in members:
            assert stop(m) == 0
        broker.stop()
    got = bodies(*outs)
    dup = sum(v - 1 for v in got.values())
    assert dup <= len(got) // 2  # duplicates allowed, not a replay of everything
