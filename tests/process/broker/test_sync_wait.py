"""A sync send that misses its poll window waits reading its own response ring
(``BrokerConnection.wait_answer``) and may stay the ring's reader between sends: nothing any
other request waits for may stall behind that (no answer left for a reader that stood down)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

import shmq
import shmq.client.producer.producer as producer_mod
from shmq import Message, Producer, SendStatus
from shmq.client import connection


@pytest.fixture
def no_poll(monkeypatch):
    """Every sync send waits through ``wait_answer`` (the poll window is 0)."""
    monkeypatch.setattr(producer_mod, "SYNC_POLL_S", 0.0)


@pytest.fixture
def long_tick(monkeypatch):
    """The reader thread's tick and a waiting sync send's park slice (``CHECK_S``, 50 ms)
    stretched to 30 s: an answer left for the next tick, or a lost wake-up, then costs seconds,
    while an answer read at once takes a round trip even on a loaded machine, so a bound of a
    few seconds tells them apart without measuring speed."""
    monkeypatch.setattr(connection, "CHECK_S", 30.0)


@pytest.fixture(params=["ASYNC_FLUSH", "SYNC_FLUSH"])
def flush_config(request, config):
    return dict(config, flushDiskType=request.param)


def test_sync_sends_then_an_async_send_is_answered_at_once(store_dir, broker_name, flush_config, no_poll, long_tick):
    with shmq.Broker(store_dir, broker_name, flush_config), Producer("pg", broker=broker_name) as p:
        for i in range(200):
            assert p.send(Message("Wait", b"s%d" % i)).status is SendStatus.SEND_OK
        conn = p._conn
        assert conn._idle_owner == threading.get_ident()  # it stayed the ring's reader
        t = time.monotonic()
        assert p.send_async(Message("Wait", b"a")).result(60).status is SendStatus.SEND_OK
        assert time.monotonic() - t < 10, "the answer waited for the reader thread's tick"
        assert conn._idle_owner is None  # the async frame's write took the ring back


def test_sync_sends_of_several_threads_and_async_sends_all_complete(
    store_dir, broker_name, flush_config, no_poll, long_tick
):
    took: list[float] = []
    lock = threading.Lock()
    with shmq.Broker(store_dir, broker_name, flush_config), Producer("pg", broker=broker_name) as p:

        def sync_sender(k: int) -> None:
            for i in range(150):
                t = time.monotonic()
                assert p.send(Message("Wait", b"t%d-%d" % (k, i))).status is SendStatus.SEND_OK
                with lock:
                    took.append(time.monotonic() - t)

        threads = [threading.Thread(target=sync_sender, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        futs = [p.send_async(Message("Wait", b"a%d" % i)) for i in range(300)]
        for th in threads:
            th.join(120)
        assert all(f.result(60).status is SendStatus.SEND_OK for f in futs)
    assert len(took) == 600
    # a lost wake-up shows as a send that waited out a whole (30 s) park slice
    assert max(took) < 10, sorted(took)[-5:]


def test_a_sync_send_fails_when_the_broker_dies_while_it_waits(store_dir, broker_name, flush_config, no_poll):
    import os
    import signal

    with (
        shmq.Broker(store_dir, broker_name, flush_config) as broker,
        # not idempotent: an idempotent send would wait for the broker to come back (its timeout)
        Producer("pg", broker=broker_name, send_msg_timeout=60.0, idempotent=False) as p,
    ):
        p.send(Message("Wait", b"warm up"))
        os.kill(broker.pid, signal.SIGSTOP)
        threading.Timer(0.2, os.kill, (broker.pid, signal.SIGKILL)).start()
        t = time.monotonic()
        with pytest.raises(shmq.ShmqError):
            p.send(Message("Wait", b"lost"))
        assert time.monotonic() - t < 30  # the broker's death, not the 60 s send timeout


def test_a_transaction_producer_gives_the_ring_back_after_each_sync_wait(store_dir, broker_name, flush_config, no_poll):
    # the broker sends it checks unasked: they must not wait for the reader's next tick
    with (
        shmq.Broker(store_dir, broker_name, flush_config),
        shmq.TransactionProducer("tpg", broker=broker_name, check=lambda m: shmq.TransactionStatus.COMMIT) as tp,
    ):
        for i in range(20):
            assert tp.send(Message("Wait", b"s%d" % i)).status is SendStatus.SEND_OK
        assert tp._conn._idle_owner is None and tp._conn._deputy is None


@pytest.mark.parametrize("sync_sends", [0, 20])
def test_shutdown_ends_the_reader_thread_wherever_it_waits(
    store_dir, broker_name, config, no_poll, long_tick, sync_sends
):
    """The reader thread waits on the client bell (idle) or on the deputy's hand-back (after sync
    sends): shutdown must end either wait, not leave the thread to its next tick (30 s here)
    while the channel it reads is closed under it."""
    with shmq.Broker(store_dir, broker_name, config):
        p = Producer("pg", broker=broker_name).start()
        p.send_async(Message("Wait", b"warm up")).result(60)
        for i in range(sync_sends):
            assert p.send(Message("Wait", b"s%d" % i)).status is SendStatus.SEND_OK
        reader = p._conn._reader
        t = time.monotonic()
        p.shutdown()
        reader.join(20)
        assert not reader.is_alive(), "the reader thread still waits after shutdown"
        assert time.monotonic() - t < 20


def test_shutdown_leaves_the_channel_mapped_until_a_slow_reader_thread_exits(store_dir, broker_name, config):
    """A reader thread held in user code (a future's done-callback) past shutdown's wait for it
    must not have its channel unmapped, or its bell closed, under it: the process would crash
    (as one did at load 19). The broker still learns that the client left without waiting for it."""
    child = os.path.join(os.path.dirname(__file__), "slow_reader_child.py")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    with shmq.Broker(store_dir, broker_name, config):
        p = subprocess.run(
            [sys.executable, child, broker_name],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, PYTHONPATH=root),
        )
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.stdout.strip() == "closed by the reader thread"
