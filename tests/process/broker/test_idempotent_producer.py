"""The idempotent producer (on by default) against a real broker: a send cut by a broker
SIGKILL is resent once the broker is back, and the topic holds each message exactly once."""

from __future__ import annotations

import re
import signal
import threading
import time
from collections import Counter

import pytest

import shmq
from shmq import Message, Producer, SendStatus
from tests.waiting import wait_for

from .conftest import open_store
from .sync_senders import SyncSenders


def _stored_bodies(store_dir: str, config: dict, topic: str) -> Counter[bytes]:
    store = open_store(store_dir, config)
    try:
        return Counter(bytes(m.body) for q in range(8) for m in store.get_message(topic, q, 0, 100_000).messages)
    finally:
        store.shutdown()


def test_sends_cut_by_a_broker_sigkill_are_resent_and_stored_once(store_dir, broker_name, config):
    config["flushDiskType"] = "SYNC_FLUSH"  # answers wait for a flush: a kill finds sends stored, unanswered
    broker = shmq.Broker(store_dir, broker_name, config)
    shmq.Admin(broker_name).create_topic("Idem", 4)
    p = Producer("pg", broker=broker_name, send_msg_timeout=20).start()
    load = SyncSenders(p, "Idem").start()
    try:
        assert wait_for(lambda: len(load.acked) > 200, 30)
        broker.kill()
        time.sleep(0.2)
        broker = shmq.Broker(store_dir, broker_name, config)
        before = len(load.acked)
        assert wait_for(lambda: len(load.acked) > before + 200, 30), "the producer did not come back"
    finally:
        load.stop()
        p.shutdown()
        broker.stop()
    assert load.failed == []  # the sends the kill cut were resent, not failed
    stored = _stored_bodies(store_dir, config, "Idem")
    assert {body for body, _ in load.acked} <= set(stored)
    assert [b for b, n in stored.items() if n > 1] == []  # and none stored twice


def test_a_send_whose_attempt_times_out_is_resent_and_stored_once(store_dir, broker_name, config):
    """A broker that stalls (SIGSTOP) past an attempt's share of the timeout: the producer writes
    the send again behind the first; the broker, back, stores the first and answers the resend
    with its result."""
    config["waitTimeMillsInSendQueue"] = 120_000  # the stalled sends are stored, not refused as busy
    broker = shmq.Broker(store_dir, broker_name, config)
    shmq.Admin(broker_name).create_topic("Idem", 4)
    p = Producer("pg", broker=broker_name, send_msg_timeout=15, retry_times_when_send_failed=2).start()
    results: list[object] = []
    sender = threading.Thread(target=lambda: results.append(p.send(Message("Idem", b"once"))))
    try:
        p.send(Message("Idem", b"before"))
        broker.process.send_signal(signal.SIGSTOP)
        sender.start()
        # the first attempt and, 5 s on (15 s / 3 attempts), its resend await an answer
        assert wait_for(lambda: len(p._pending) >= 2, 30)
    finally:
        broker.process.send_signal(signal.SIGCONT)
    sender.join(60)
    p.shutdown()
    broker.stop()
    resent = re.search(r"(\d+) resent sends stored already", broker.log())
    assert resent is not None and int(resent.group(1)) >= 1
    (r,) = results
    assert r.status is SendStatus.SEND_OK
    assert _stored_bodies(store_dir, config, "Idem") == Counter({b"before": 1, b"once": 1})


def test_a_send_cut_by_a_broker_that_never_comes_back_fails_at_its_timeout(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config) as broker, Producer("pg", broker=broker_name) as p:
        p.send(Message("Idem", b"warm up"))
        broker.process.send_signal(signal.SIGSTOP)
        threading.Timer(0.2, broker.process.send_signal, (signal.SIGKILL,)).start()
        t = time.monotonic()
        with pytest.raises(shmq.BrokerGoneError, match="went away"):
            p.send(Message("Idem", b"lost"))  # resent once the broker is back: it is not
        assert time.monotonic() - t < 30  # the send's timeout (3 s), not a hang
