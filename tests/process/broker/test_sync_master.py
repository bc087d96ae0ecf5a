"""SYNC_MASTER with a real broker process: no replica -> SLAVE_NOT_AVAILABLE at once; a stand-in
replica (a child process writing its acked offset into the HA segment as the sender does) ->
SEND_OK only once the ack covers a send, FLUSH_SLAVE_TIMEOUT past syncFlushTimeout."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

import pytest

import shmq
from shmq import Message, Producer, PullConsumer, PullStatus, SendStatus
from shmq.ha.shared import HASegment
from tests.ha.sender_support import free_port
from tests.waiting import wait_for

STANDIN = os.path.join(os.path.dirname(__file__), "standin_replica.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def sync_master_config(config: dict, timeout_ms: int = 300, **more: object) -> dict:
    config.update(brokerRole="SYNC_MASTER", haListenPort=free_port(), syncFlushTimeout=timeout_ms, **more)
    return config


class StandIn:
    """The stand-in replica child; ``hold(n)`` acks at most n, ``auto()`` follows the log end."""

    def __init__(self, broker: str) -> None:
        self.p = subprocess.Popen(
            [sys.executable, STANDIN, broker],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT},
        )
        line = self.p.stdout.readline()
        assert line.startswith(b"ready"), line

    def command(self, line: str) -> None:
        self.p.stdin.write(line.encode() + b"\n")
        self.p.stdin.flush()
        assert self.p.stdout.readline() == b"ok\n"

    def hold(self, offset: int) -> None:
        self.command(f"hold {offset}")

    def auto(self) -> None:
        self.command("auto")

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.stdin.write(b"quit\n")
            self.p.stdin.close()
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.p.stdout.close()


@contextmanager
def sync_master_pair(
    store_dir: str, broker_name: str, values: dict
) -> Iterator[tuple[shmq.Broker, HASegment, StandIn]]:
    """A SYNC_MASTER broker of ``values`` and a stand-in replica; the broker is stopped on exit
    (its object stays usable for ``log()``)."""
    broker = shmq.Broker(store_dir, broker_name, values)
    ha = standin = None
    try:
        ha = HASegment.open(broker_name)
        standin = StandIn(broker_name)
        yield broker, ha, standin
    finally:
        if standin is not None:
            standin.close()
        if ha is not None:
            ha.close()
        broker.stop()


@pytest.fixture
def ha_pair(store_dir, broker_name, config) -> Iterator[tuple[shmq.Broker, HASegment, StandIn]]:
    """A SYNC_MASTER broker (syncFlushTimeout 2 s unless a test says otherwise) and a stand-in replica."""
    with sync_master_pair(store_dir, broker_name, sync_master_config(config, 2000)) as pair:
        yield pair


def read_all(broker: str, topic: str) -> list[bytes]:
    with PullConsumer("cg", broker=broker) as c:
        got = []
        for mq in c.fetch_queues(topic):
            r = c.pull(mq, "*", offset=0, max_nums=1000)
            if r.status is PullStatus.FOUND:
                got += [bytes(m.body) for m in r.messages]
        return got


def test_no_replica_answers_slave_not_available_at_once_and_stores(store_dir, broker_name, config):
    with (
        shmq.Broker(store_dir, broker_name, sync_master_config(config, timeout_ms=10_000)),
        Producer("pg", broker=broker_name, send_msg_timeout=60.0) as p,
    ):
        p.send(Message("T", b"warm"))  # topic auto-created
        start = time.perf_counter()
        results = [p.send(Message("T", b"m%d" % i)) for i in range(20)]
        per_send = (time.perf_counter() - start) / 20
        assert {r.status for r in results} == {SendStatus.SLAVE_NOT_AVAILABLE}
        assert per_send < 1.0  # never the 10 s timeout
        batch = p.send_batch([Message("T", b"b1"), Message("T", b"b2")])
        assert batch.status is SendStatus.SLAVE_NOT_AVAILABLE
        assert sorted(read_all(broker_name, "T")) == sorted([b"warm", b"b1", b"b2"] + [b"m%d" % i for i in range(20)])


def wait_grown(ha: HASegment, past: int) -> int:
    assert wait_for(lambda: ha.master_offset > past, 30)
    return ha.master_offset


def wait_settled(ha: HASegment, past: int, quiet: float = 0.2) -> int:
    """The log end once it grew past ``past`` and then stayed put for ``quiet`` seconds: on a
    loaded machine the sends of one burst may reach the broker in more than one frame."""
    end = wait_grown(ha, past)
    while True:
        time.sleep(quiet)
        if ha.master_offset == end:
            return end
        end = ha.master_offset


def test_sends_are_acknowledged_only_once_the_ack_covers_them(ha_pair, broker_name):
    _, ha, standin = ha_pair
    with Producer("pg", broker=broker_name, auto_batch=False) as p:
        assert p.send(Message("T", b"warm")).status is SendStatus.SEND_OK  # auto mode
        start = ha.master_offset
        standin.hold(start)
        a = p.send_async(Message("T", b"a"))
        end_a = wait_grown(ha, start)
        b = p.send_batch_async([Message("T", b"b1"), Message("T", b"b2")])
        end_b = wait_grown(ha, end_a)
        time.sleep(0.1)
        assert not a.done() and not b.done()  # stored, not yet replicated: no answer
        standin.hold(end_a - 1)
        time.sleep(0.05)
        assert not a.done()
        standin.hold(end_a)
        assert a.result(1).status is SendStatus.SEND_OK
        time.sleep(0.05)
        assert not b.done()  # one ack never releases a later send
        standin.hold(end_b)
        assert b.result(1).status is SendStatus.SEND_OK and b.result().count == 2


def test_multi_sends_wait_for_the_ack_too(ha_pair, broker_name):
    _, ha, standin = ha_pair
    with Producer("pg", broker=broker_name) as p:  # auto_batch: small groups of several topics go as SEND_MULTI
        p.send(Message("A", b"warm"))
        p.send(Message("B", b"warm"))
        start = ha.master_offset
        standin.hold(start)
        futures = [p.send_async(Message(t, b"x")) for t in ("A", "B", "A")]
        end = wait_settled(ha, start)
        assert not any(f.done() for f in futures)
        standin.hold(end)
        assert [f.result(1).status for f in futures] == [SendStatus.SEND_OK] * 3


def test_no_ack_within_sync_flush_timeout_answers_flush_slave_timeout(store_dir, broker_name, config):
    with sync_master_pair(store_dir, broker_name, sync_master_config(config, 300)) as (broker, ha, standin):
        with Producer("pg", broker=broker_name) as p:
            assert p.send(Message("T", b"warm")).status is SendStatus.SEND_OK
            standin.hold(ha.master_offset)
            start = time.perf_counter()
            r = p.send(Message("T", b"late"))
            waited = time.perf_counter() - start
            assert r.status is SendStatus.FLUSH_SLAVE_TIMEOUT
            assert 0.29 <= waited < 1.5, waited
            standin.auto()  # the replica catches up: the next send is acknowledged again
            assert p.send(Message("T", b"again")).status is SendStatus.SEND_OK
        assert sorted(read_all(broker_name, "T")) == [b"again", b"late", b"warm"]
    assert "1 timed out (FLUSH_SLAVE_TIMEOUT)" in broker.log()


def test_eight_concurrent_sync_senders(ha_pair, broker_name):
    """Each send waits for the stand-in's ack of its own record; all of them are acknowledged."""
    _, ha, _ = ha_pair
    statuses: list[SendStatus] = []
    errors: list[BaseException] = []

    def sender(k: int) -> None:
        try:
            with Producer(f"pg{k}", broker=broker_name) as p:
                for i in range(40):
                    r = p.send(Message("Conc", b"%d-%d" % (k, i)))
                    assert ha.master_offset >= r.phys_offsets[0]  # never answered before it was published
                    statuses.append(r.status)
        except BaseException as e:  # noqa: BLE001 - the thread's error fails the test in the main thread
            errors.append(e)

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and statuses == [SendStatus.SEND_OK] * 320
    assert len(read_all(broker_name, "Conc")) == 320


def test_sync_flush_and_sync_master_together(store_dir, broker_name, config):
    values = sync_master_config(config, 300, flushDiskType="SYNC_FLUSH")
    with (
        sync_master_pair(store_dir, broker_name, values) as (broker, ha, standin),
        Producer("pg", broker=broker_name, auto_batch=False) as p,
    ):
        assert [p.send(Message("F", b"%d" % i)).status for i in range(5)] == [SendStatus.SEND_OK] * 5
        standin.hold(ha.master_offset)
        late = p.send_async(Message("F", b"late"))
        assert late.result(2).status is SendStatus.FLUSH_SLAVE_TIMEOUT
    log = broker.log()
    assert "group commit: 6 answers in 6 flushes" in log and "1 timed out" in log


def test_shutdown_answers_what_waits(store_dir, broker_name, config):
    """A broker stopped while sends wait for a replica answers them FLUSH_SLAVE_TIMEOUT, not never."""
    with (
        sync_master_pair(store_dir, broker_name, sync_master_config(config, 30_000)) as (broker, ha, standin),
        Producer("pg", broker=broker_name, auto_batch=False) as p,
    ):
        p.send(Message("T", b"warm"))
        standin.hold(ha.master_offset)
        waiting: list[Future] = [p.send_async(Message("T", b"w%d" % i)) for i in range(3)]
        time.sleep(0.1)
        assert not any(f.done() for f in waiting)
        start = time.perf_counter()
        broker.process.send_signal(15)
        assert [f.result(60).status for f in waiting] == [SendStatus.FLUSH_SLAVE_TIMEOUT] * 3
        assert time.perf_counter() - start < 20  # answered as it stops, not at the 30 s timeout


def test_a_send_waiting_longer_than_a_third_of_its_timeout_is_not_sent_again(store_dir, broker_name, config):
    """Regression: the producer resent a request that had no answer after a third of
    send_msg_timeout (one attempt of three). A ring never loses a request, so the broker had
    stored it and held the answer for a replica: each resend stored another copy, and the
    caller got SendTimeoutError instead of FLUSH_SLAVE_TIMEOUT."""
    # a 6 s replica timeout under a 12 s send timeout: a resend would come after 4 s, and a
    # loaded machine's delays stay far below the 6 s left between the answer and the send timeout
    with sync_master_pair(store_dir, broker_name, sync_master_config(config, 6000)) as (_broker, ha, standin):
        with Producer("pg", broker=broker_name, auto_batch=False, send_msg_timeout=12.0) as p:
            p.send(Message("T", b"warm"))
            standin.hold(ha.master_offset)
            start = time.perf_counter()
            r = p.send(Message("T", b"once"))
            assert r.status is SendStatus.FLUSH_SLAVE_TIMEOUT and 5.9 < time.perf_counter() - start < 12
        assert sorted(read_all(broker_name, "T")) == [b"once", b"warm"]


DYING_PRODUCER = """
import sys, time
from shmq import Message, Producer
p = Producer("dying", broker=sys.argv[1], auto_batch=False).start()
futures = [p.send_async(Message("T", b"orphan%d" % i)) for i in range(3)]
print("sent", flush=True)
time.sleep(60)
"""


def test_a_dead_clients_waiting_answers_are_dropped(ha_pair, broker_name):
    broker, ha, standin = ha_pair
    with Producer("pg", broker=broker_name) as p:
        p.send(Message("T", b"warm"))
        standin.hold(ha.master_offset)
        start = ha.master_offset
        child = subprocess.Popen(
            [sys.executable, "-c", DYING_PRODUCER, broker_name],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT},
        )
        try:
            assert child.stdout.readline() == b"sent\n"
            wait_grown(ha, start)
            child.kill()
            child.wait()
            assert wait_for(lambda: f"(pid {child.pid})" in broker.log(), 30)  # dropped by the broker
        finally:
            child.kill()
            child.wait()
            child.stdout.close()
        standin.auto()
        assert p.send(Message("T", b"after")).status is SendStatus.SEND_OK
    broker.stop()
    assert "3 dropped" in broker.log()


def test_end_to_end_with_the_supervised_sender_and_a_tcp_replica(store_dir, broker_name, config):
    """The whole chain: the broker's own `shmq ha` child, a replica speaking the protocol over
    TCP (tests/ha/sender_support.py), acks through the HA segment and the broker's doorbell.
    Sends are SEND_OK while it follows; once it is gone, SLAVE_NOT_AVAILABLE."""
    from tests.ha.sender_support import TOKEN, Replica

    broker = shmq.Broker(store_dir, broker_name, sync_master_config(config, 2000, haAuthToken=TOKEN))
    ha = None
    stop = threading.Event()
    errors: list[BaseException] = []
    try:
        ha = HASegment.open(broker_name)
        assert wait_for(lambda: int(ha.header["listen_port"][0]) != 0, 10)
        replica = Replica(int(ha.header["listen_port"][0]))
        welcome = replica.handshake()
        replica.start = welcome.max_offset
        replica.report(replica.offset)

        def follow() -> None:
            replica.sock.settimeout(0.05)
            try:
                while not stop.is_set():
                    try:
                        if replica._read_once():
                            replica.report(replica.offset)
                    except TimeoutError:
                        pass
            except BaseException as e:  # noqa: BLE001 - the thread's error fails the test in the main thread
                errors.append(e)

        thread = threading.Thread(target=follow)
        thread.start()
        try:
            with Producer("pg", broker=broker_name) as p:
                assert wait_for(lambda: ha.best_acked(ha.master_offset, 1 << 30) >= 0, 10)
                results = [p.send(Message("E2E", b"m%d" % i)) for i in range(50)]
                assert {r.status for r in results} == {SendStatus.SEND_OK}
                assert replica.offset >= results[-1].phys_offsets[0]  # it has them
        finally:
            stop.set()
            thread.join(10)
        assert not errors
        replica.close()
        assert wait_for(lambda: ha.best_acked(ha.master_offset, 1 << 30) < 0, 10)
        with Producer("pg", broker=broker_name) as p:
            assert p.send(Message("E2E", b"alone")).status is SendStatus.SLAVE_NOT_AVAILABLE
    finally:
        stop.set()
        if ha is not None:
            ha.close()
        broker.stop()
