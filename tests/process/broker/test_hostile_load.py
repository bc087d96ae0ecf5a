"""A client that piles up work for the broker: long polls past the caps, a flood of doorbell posts.
The broker answers the excess at once and goes back to idle when the flood stops."""
from __future__ import annotations

import statistics
import time

import posix_ipc
import psutil

import shmq
from shmq import ConsumeFrom, ConsumeResult, Message, Producer, PushConsumer, SendStatus
from shmq.codec import frames as P
from shmq.ring import shm
from shmq.ring.channel import broker_bell_name

from tests.waiting import wait_for
from .rawclient import RawClient

PER_CLIENT_QUEUE = 16  # maxPullWaitersPerClientQueue's default


def test_long_polls_past_the_per_queue_cap_are_answered_at_once(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config) as broker, Producer("pg", broker=broker_name) as producer:
        hog, waiter = RawClient(broker_name), RawClient(broker_name)
        try:
            waiter.write(P.PULL_WAIT, P.encode_pull_wait(1, "T", 0, 0, 60_000))
            for i in range(PER_CLIENT_QUEUE + 4):
                hog.write(P.PULL_WAIT, P.encode_pull_wait(100 + i, "T", 0, 0, 60_000))
            given_way = [hog.read(2.0) for _ in range(4)]
            assert given_way == [(P.WAKE, P.Wake(100 + i, 0, True)) for i in range(4)]
            assert producer.send(Message("T", b"m"), selector=lambda queues, msg, arg: 0).status is SendStatus.SEND_OK
            assert waiter.read(2.0) == (P.WAKE, P.Wake(1, 1, False)), "another client's wait is untouched"
            assert sorted(hog.read(2.0)[1].req_id for _ in range(PER_CLIENT_QUEUE)) == \
                list(range(104, 104 + PER_CLIENT_QUEUE))
            assert broker.process.poll() is None
        finally:
            hog.close()
            waiter.close()


def _broker_cpu(pid: int, seconds: float) -> float:
    """CPU seconds the broker used in the next ``seconds``."""
    proc = psutil.Process(pid)
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    return (after.user + after.system) - (before.user + before.system)


def _sync_send_ms(producer: Producer, n: int) -> float:
    """Median latency of ``n`` sync sends, each after a pause long enough for the broker to
    park: each send has to post the broker's bell (a lost post waits for the 20 ms park timeout)."""
    times = []
    for i in range(n):
        time.sleep(0.03)
        t = time.perf_counter()
        assert producer.send(Message("T", b"s%d" % i)).status is SendStatus.SEND_OK
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def test_a_doorbell_flood_rotates_the_bell_and_leaves_the_broker_idle(store_dir, broker_name, config):
    """Millions of posts on the broker's bell (far past the drain cap) cost it O(1): it moves to
    a new bell, is idle 0.3 s after the flood, and clients attached before and after the move
    post the new bell (sync sends and a push consumer's long polls see no park timeouts)."""
    got: list[float] = []

    def listener(msgs, ctx) -> ConsumeResult:
        got.extend(time.perf_counter() for _ in msgs)
        return ConsumeResult.SUCCESS

    push = PushConsumer("cg", broker=broker_name, consume_from=ConsumeFrom.LAST_OFFSET)
    push.subscribe("T", "*")
    push.register_listener(listener)
    with shmq.Broker(store_dir, broker_name, config) as broker, Producer("pg", broker=broker_name) as early:
        assert early.send(Message("T", b"topic")).status is SendStatus.SEND_OK
        with push:
            sem = posix_ipc.Semaphore(broker_bell_name(broker_name))
            try:
                release = sem.release
                for _ in range(10_000_000):
                    release()
            finally:
                sem.close()
            time.sleep(0.3)
            busy = _broker_cpu(broker.pid, 0.5)
            assert busy < 0.1, f"the broker used {busy:.2f} s of CPU 0.3-0.8 s after the flood"
            bells = [e for e in shm.leftovers(broker_name) if ".bell" in e and ".ch." not in e]
            assert bells == ["sem." + broker_bell_name(broker_name, 1)[1:]], bells
            with Producer("pg2", broker=broker_name) as late:
                assert _sync_send_ms(early, 15) < 5 and _sync_send_ms(late, 15) < 5
                delays = []
                for i in range(10):
                    time.sleep(0.03)
                    n, t = len(got), time.perf_counter()
                    late.send(Message("T", b"p%d" % i))
                    assert wait_for(lambda: len(got) > n, 5)
                    delays.append((got[n] - t) * 1000)
                assert statistics.median(delays) < 10, delays
            assert "T" in shmq.Admin(broker=broker_name).topics(), "an admin call nudges the new bell"
        assert broker.process.poll() is None


def _flood_until_rotated(broker_name: str) -> str:
    """Post the gen-0 bell until the broker moved on; the name of its new bell."""
    rotated = "sem." + broker_bell_name(broker_name, 1)[1:]
    sem = posix_ipc.Semaphore(broker_bell_name(broker_name))
    try:
        for _ in range(20):
            for _ in range(500_000):
                sem.release()
            if rotated in shm.leftovers(broker_name):
                return rotated
            time.sleep(0.05)
    finally:
        sem.close()
    raise AssertionError(f"the broker never rotated its bell: {shm.leftovers(broker_name)}")


def test_a_rotated_bell_of_a_crashed_broker_is_reclaimed(store_dir, broker_name, config):
    """A broker killed after a rotation leaves /shmq.<name>.bell.<gen>: the next broker of the
    name removes it at start (same prefix as every other object), and its own stop leaves nothing."""
    broker = shmq.Broker(store_dir, broker_name, config)
    try:
        rotated = _flood_until_rotated(broker_name)
    finally:
        broker.kill()
    assert rotated in shm.leftovers(broker_name)
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as producer:
        assert rotated not in shm.leftovers(broker_name)
        assert producer.send(Message("T", b"again")).status is SendStatus.SEND_OK
    assert shm.leftovers(broker_name) == []
