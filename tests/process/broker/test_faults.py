"""Faults: hostile frames, clients and brokers killed mid-flight, a second broker, no broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import shmq
from shmq import Message, Producer, SendStatus
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.errors import BrokerGoneError, BrokerStartError
from shmq.ring import shm
from shmq.ring.liveness import Watch
from shmq.ring.state import StateReader
from tests.ipc_tracking import existing, store_objects
from tests.waiting import wait_for

from .conftest import open_store
from .rawclient import RawClient
from .sync_senders import SyncSenders


def _clients(name: str) -> int:
    r = StateReader.open(name)
    try:
        return r.read(lambda v: int((v.clients["used"] != 0).sum()))
    finally:
        r.close()


def _all_records(store, topic: str) -> list:
    out = []
    for qid in range(4):
        out += store.get_message(topic, qid, 0, 100000).messages
    return out


@pytest.mark.parametrize(
    "garbage", [b"\xff" * 5, P.encode_send(1, time.monotonic_ns(), 0, 0, 0, "T", [], b"short")[:-2]]
)
def test_garbage_frame_drops_only_that_channel(store_dir, broker_name, config, garbage):
    with shmq.Broker(store_dir, broker_name, config) as broker, Producer("pg", broker=broker_name) as good:
        bad = RawClient(broker_name, role="producer")
        bad.write(P.SEND, garbage)
        assert wait_for(lambda: f"shmq.{broker_name}.ch.{bad.client_id}" not in os.listdir("/dev/shm"), 30)
        assert good.send(Message("T", b"fine")).status is SendStatus.SEND_OK
        bad.close(detach=False)
        assert "malformed frame" in broker.log()


def test_garbage_kind_and_hostile_batch(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config) as broker, Producer("pg", broker=broker_name) as good:
        bad = RawClient(broker_name, role="producer")
        bad.write(P.SEND_RESULT, P.encode_wake(1, 2, False))  # a response kind sent as a request
        assert wait_for(lambda: _clients(broker_name) == 1, 30)
        assert good.send(Message("T", b"fine")).status is SendStatus.SEND_OK
        bad.close(detach=False)
        assert "is not a request" in broker.log()


def test_invalid_record_in_valid_frame_is_answered_not_dropped(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        c = RawClient(broker_name, role="producer")
        rec = bytearray(fmt.encode_message("T", b"x"))
        rec[4:8] = b"\0\0\0\0"  # bad magic
        c.write(P.SEND, P.encode_send(7, time.monotonic_ns(), -1, 0, 0, "T", [], bytes(rec)))
        kind, err = c.read()
        assert kind == P.ERROR and err.req_id == 7 and err.code == P.MESSAGE_ILLEGAL
        c.write(P.SEND, P.encode_send(8, time.monotonic_ns(), 9, 0, 0, "T", [], fmt.encode_message("T", b"x")))
        kind, err = c.read()
        assert kind == P.ERROR and "queue id 9 is illegal" in err.message
        c.close()


def test_hostile_send_multi_is_answered_or_dropped_never_fatal(store_dir, broker_name, config):
    """A SEND_MULTI record that lies about its topic gets an error status (the other records are
    stored: one error policy for every put); one whose topic table is broken drops only its channel."""
    with shmq.Broker(store_dir, broker_name, config) as broker, Producer("pg", broker=broker_name) as good:
        c = RawClient(broker_name, role="producer")
        batch = fmt.concat_batches([fmt.encode_batch("A", [b"a"]), fmt.encode_batch("B", [b"b"])])
        c.write(
            P.SEND_MULTI,
            P.encode_send_multi(3, time.monotonic_ns(), 0, ["A", "C"], np.array([0, 1]), np.array([-1, -1]), batch),
        )  # record 2 is of B, not C
        kind, r = c.read()
        assert kind == P.SEND_MULTI_RESULT and r.req_id == 3 and "topic" in r.message
        assert r.statuses.tolist() == [P.SEND_OK, -P.MESSAGE_ILLEGAL] and r.phys_offsets[1] == -1
        c.write(
            P.SEND_MULTI,
            P.encode_send_multi(4, time.monotonic_ns(), 0, ["A", "B"], np.array([0, 1]), np.array([0, 7]), batch),
        )  # queue 7 of 4: only record 2 fails
        kind, r = c.read()
        assert r.statuses[0] == P.SEND_OK and r.statuses[1] == -P.SYSTEM_ERROR and "illegal" in r.message
        raw = bytearray(
            P.encode_send_multi(5, time.monotonic_ns(), 0, ["A", "B"], np.array([0, 1]), np.array([-1, -1]), batch)
        )
        raw[40] = 200  # the first name's length now runs past the table
        c.write(P.SEND_MULTI, bytes(raw))
        assert wait_for(lambda: f"shmq.{broker_name}.ch.{c.client_id}" not in os.listdir("/dev/shm"), 30)
        assert good.send(Message("A", b"fine")).status is SendStatus.SEND_OK
        c.close(detach=False)
        assert "malformed frame" in broker.log()
    store = open_store(store_dir, config)
    try:
        assert sorted(bytes(m.body) for m in _all_records(store, "A")) == [b"a", b"a", b"fine"]
        assert _all_records(store, "B") == [] and _all_records(store, "C") == []
    finally:
        store.shutdown()


_BATCH_CHILD = """
import sys
from shmq import Message, Producer
p = Producer("pg", broker=sys.argv[1]).start()
print("ready", flush=True)
n = 0
while True:
    p.send_oneway(Message("Kill", b"%08d" % n)); n += 1
    if n % 50 == 0:
        p.send_batch([Message("Kill", b"%08d" % (n + i)) for i in range(100)]); n += 100
"""


def test_producer_killed_mid_batch(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config) as broker:
        child = subprocess.Popen([sys.executable, "-c", _BATCH_CHILD, broker_name], stdout=subprocess.PIPE)
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(0.5)
        child.send_signal(signal.SIGKILL)
        child.wait()
        t = time.monotonic()
        assert wait_for(lambda: _clients(broker_name) == 0, 30), broker.log()
        reclaim = time.monotonic() - t
        assert not [e for e in shm.leftovers(broker_name) if ".ch." in e]
        assert "client died" in broker.log()
        child.stdout.close()
    assert reclaim < 0.5
    store = open_store(store_dir, config)
    try:
        bodies = [bytes(m.body) for m in _all_records(store, "Kill")]
        assert len(bodies) > 100 and len(bodies) == len(set(bodies))  # nothing twice
        for m in _all_records(store, "Kill"):
            assert fmt.body_crc(m.body) == m.body_crc  # nothing torn
    finally:
        store.shutdown()


def test_broker_killed_under_sync_flush_restarts_and_producer_reconnects(store_dir, broker_name, config):
    config["flushDiskType"] = "SYNC_FLUSH"
    broker = shmq.Broker(store_dir, broker_name, config)
    # not idempotent: an in-flight send fails with the broker (an idempotent one is resent, see
    # test_idempotent_producer.py)
    p = Producer("pg", broker=broker_name, send_msg_timeout=10, idempotent=False).start()
    load = SyncSenders(p, "Sync").start()
    time.sleep(0.5)
    before = len(load.acked)
    broker.kill()
    time.sleep(0.2)
    broker = shmq.Broker(store_dir, broker_name, config)
    assert "cleaning up after a crashed broker" in broker.log() or "removed leftovers" in broker.log()
    assert wait_for(lambda: len(load.acked) > before + 50, 10), "the producer did not reconnect"
    load.stop()
    p.shutdown()
    broker.stop()
    assert load.failed, "the kill should have failed some in-flight sends"
    assert all(isinstance(e, BrokerGoneError) for e in load.failed), load.failed[:3]
    store = open_store(store_dir, config)
    try:
        for body, r in load.acked:
            rec = store.look_message_by_offset(r.phys_offsets[0])
            assert rec is not None and bytes(rec.body) == body, body
    finally:
        store.shutdown()


_IDLE_CHILD = """
import sys, time
from shmq import Producer
Producer("pg", broker=sys.argv[1]).start()
print("ready", flush=True)
time.sleep(60)
"""


def _client_key(name: str, pid: int) -> int:
    r = StateReader.open(name)
    try:
        return r.read(lambda v: int(v.clients["alive_key"][(v.clients["used"] != 0) & (v.clients["pid"] == pid)][0]))
    finally:
        r.close()


@pytest.mark.parametrize("fault", [signal.SIGKILL, signal.SIGSTOP], ids=["crashed", "hung"])
def test_stop_removes_what_a_broker_that_could_not_shut_down_left(store_dir, broker_name, config, fault):
    """A crashed broker, or one SIGKILLed because it did not stop in time, cannot remove its IPC
    objects, and no later broker of a one-off name would; stop() does, dead clients' too."""
    with shmq.Broker(store_dir, broker_name, config) as broker:  # a failed assertion still stops it
        live = RawClient(broker_name)
        child = subprocess.Popen([sys.executable, "-c", _IDLE_CHILD, broker_name], stdout=subprocess.PIPE)
        assert child.stdout.readline().strip() == b"ready"
        dead_key = _client_key(broker_name, child.pid)
        os.kill(broker.pid, signal.SIGSTOP)  # so it cannot drop the child, which dies attached
        child.kill()
        child.wait()
        child.stdout.close()
        os.kill(broker.pid, fault)
        assert broker.stop(timeout=0.5) == -signal.SIGKILL
        assert not shm.leftovers(broker_name)
        assert not existing([*store_objects(store_dir), ("sem", dead_key)])
        assert Watch(live.liveness.key).is_alive()  # a live client's semaphore is its own to remove
        live.close(detach=False)


def test_second_broker_on_same_store_or_name_fails_clearly(store_dir, broker_name, config, tmp_path):
    with shmq.Broker(store_dir, broker_name, config):
        other = broker_name + "z"
        shm.check_broker_name(other)
        with pytest.raises(BrokerStartError, match="already open by another broker"):
            shmq.Broker(store_dir, other, config)
        with pytest.raises(BrokerStartError, match="already running"):
            shmq.Broker(str(tmp_path / "other"), broker_name, config)
    assert not shm.leftovers(other)
