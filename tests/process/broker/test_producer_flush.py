"""Producer.flush and shutdown against a real broker: every send handed over is answered first."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import wait

import shmq
from shmq import Message, Producer, SendStatus


def test_flush_sends_what_waits_and_waits_for_every_answer(store_dir, broker_name, config):
    with (
        shmq.Broker(store_dir, broker_name, config),
        Producer("pg", broker=broker_name, batch_max_delay=60.0) as p,
    ):  # nothing leaves by the delay
        futs = [
            p.send_async(Message("Flush", b"m%d" % i), selector=lambda qs, m, a: qs[a % len(qs)], arg=i)
            for i in range(2000)
        ]
        futs.append(p.send_batch_async([Message("Flush", b"b%d" % i) for i in range(50)]))
        assert not any(f.done() for f in futs[:10])  # they wait in the accumulator
        assert p.flush(timeout=5) is True
        assert all(f.done() for f in futs)  # done when flush returns, not a moment later
        assert all(f.result(0).status is SendStatus.SEND_OK for f in futs)
        assert p.pending_count == 0
        assert p.flush(timeout=0) is True  # nothing open: at once


def test_flush_0_hands_the_auto_batches_over_without_waiting(store_dir, broker_name, config):
    """What shmq.aio's producer calls once per event-loop iteration."""
    with (
        shmq.Broker(store_dir, broker_name, config),
        Producer("pg", broker=broker_name, batch_max_delay=60.0) as p,
    ):
        futs = [p.send_async(Message("Flush", b"m%d" % i)) for i in range(300)]
        assert not any(f.done() for f in futs)  # they wait in the accumulator, 60 s
        p.flush(0)
        assert not wait(futs, timeout=30).not_done  # answered well before the accumulator's 60 s
        assert all(f.result(0).status is SendStatus.SEND_OK for f in futs)


def test_flush_times_out_while_the_broker_is_stopped_then_completes(store_dir, broker_name, config):
    with (
        shmq.Broker(store_dir, broker_name, config) as broker,
        Producer("pg", broker=broker_name, send_msg_timeout=30.0) as p,
    ):
        p.send(Message("Flush", b"warm up"))
        os.kill(broker.pid, signal.SIGSTOP)  # hung: it answers nothing until continued
        try:
            futs = [p.send_async(Message("Flush", b"m%d" % i)) for i in range(100)]
            t = time.monotonic()
            assert p.flush(timeout=0.3) is False
            assert 0.25 <= time.monotonic() - t < 10  # its timeout, not at once or a hang
            assert p.pending_count > 0 and not any(f.done() for f in futs)
            assert p.flush(0) is False  # at once: every request is still open
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        assert p.flush(timeout=10) is True
        assert all(f.done() and f.result(0).status is SendStatus.SEND_OK for f in futs)


def test_shutdown_waits_for_answers_instead_of_failing_them(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        p = Producer("pg", broker=broker_name, batch_max_delay=60.0).start()
        futs = [p.send_async(Message("Flush", b"m%d" % i)) for i in range(500)]
        p.shutdown()
        assert all(f.result(0).status is SendStatus.SEND_OK for f in futs)
