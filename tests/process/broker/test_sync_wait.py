"""A sync send that misses its poll window waits reading its own response ring
(``BrokerConnection.wait_answer``) and may stay the ring's reader between sends: nothing any
other request waits for may stall behind that (no answer left for a reader that stood down)."""
from __future__ import annotations

import threading
import time

import pytest

import shmq
import shmq.client.producer.producer as producer_mod
from shmq import Message, Producer, SendStatus


@pytest.fixture
def no_poll(monkeypatch):
    """Every sync send waits through ``wait_answer`` (the poll window is 0)."""
    monkeypatch.setattr(producer_mod, "SYNC_POLL_S", 0.0)


@pytest.fixture(params=["ASYNC_FLUSH", "SYNC_FLUSH"])
def flush_config(request, config):
    return dict(config, flushDiskType=request.param)


def test_sync_sends_then_an_async_send_is_answered_at_once(store_dir, broker_name, flush_config, no_poll):
    with shmq.Broker(store_dir, broker_name, flush_config), Producer("pg", broker=broker_name) as p:
        for i in range(200):
            assert p.send(Message("Wait", b"s%d" % i)).status is SendStatus.SEND_OK
        conn = p._conn
        assert conn._idle_owner == threading.get_ident()  # it stayed the ring's reader
        t = time.monotonic()
        assert p.send_async(Message("Wait", b"a")).result(5).status is SendStatus.SEND_OK
        # batch_max_delay (1 ms) plus a round trip, not the reader's 50 ms tick
        assert time.monotonic() - t < 0.03
        assert conn._idle_owner is None  # the async frame's write took the ring back


def test_sync_sends_of_several_threads_and_async_sends_all_complete(store_dir, broker_name, flush_config, no_poll):
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
            th.join(30)
        assert all(f.result(5).status is SendStatus.SEND_OK for f in futs)
    assert len(took) == 600
    # a lost wake-up shows as a send that waited out a 50 ms park slice; a loaded machine can
    # delay a few sends that long, not a tenth of them
    assert sum(t > 0.045 for t in took) < 60


def test_a_sync_send_fails_when_the_broker_dies_while_it_waits(store_dir, broker_name, flush_config, no_poll):
    import os
    import signal
    with shmq.Broker(store_dir, broker_name, flush_config) as broker, \
            Producer("pg", broker=broker_name, send_msg_timeout=3.0) as p:
        p.send(Message("Wait", b"warm up"))
        os.kill(broker.pid, signal.SIGSTOP)
        threading.Timer(0.2, os.kill, (broker.pid, signal.SIGKILL)).start()
        t = time.monotonic()
        with pytest.raises(shmq.ShmqError):
            p.send(Message("Wait", b"lost"))
        assert time.monotonic() - t < 5.0


def test_a_transaction_producer_gives_the_ring_back_after_each_sync_wait(store_dir, broker_name, flush_config, no_poll):
    # the broker sends it checks unasked: they must not wait for the reader's next tick
    with shmq.Broker(store_dir, broker_name, flush_config), \
            shmq.TransactionProducer("tpg", broker=broker_name, check=lambda m: shmq.TransactionStatus.COMMIT) as tp:
        for i in range(20):
            assert tp.send(Message("Wait", b"s%d" % i)).status is SendStatus.SEND_OK
        assert tp._conn._idle_owner is None and tp._conn._deputy is None
