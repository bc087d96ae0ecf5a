"""A client that piles up work for the broker: long polls past the caps, a flood of doorbell posts.
The broker answers the excess at once and goes back to idle when the flood stops."""

from __future__ import annotations

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
            given_way = [hog.read(10.0) for _ in range(4)]
            assert given_way == [(P.WAKE, P.Wake(100 + i, 0, True)) for i in range(4)]
            assert producer.send(Message("T", b"m"), selector=lambda queues, msg, arg: 0).status is SendStatus.SEND_OK
            assert waiter.read(10.0) == (P.WAKE, P.Wake(1, 1, False)), "another client's wait is untouched"
            assert sorted(hog.read(10.0)[1].req_id for _ in range(PER_CLIENT_QUEUE)) == list(
                range(104, 104 + PER_CLIENT_QUEUE)
            )
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


def test_a_doorbell_flood_rotates_the_bell_and_leaves_the_broker_idle(store_dir, broker_name, config):
    """Millions of posts on the broker's bell (far past the drain cap) cost it O(1): it moves to
    a new bell, is idle after the flood, and clients attached before and after the move are
    served (sync sends, a push consumer's long polls). That they post the new bell, so that each
    is served at once and not at the broker's 20 ms park timeout, is a matter of speed that
    only an idle machine shows: tools/bench/wakeup_bench.py measures it."""
    got: list[bytes] = []

    def listener(msgs, ctx) -> ConsumeResult:
        got.extend(m.body for m in msgs)
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
            rotated = ["sem." + broker_bell_name(broker_name, 1)[1:]]
            assert wait_for(
                lambda: [e for e in shm.leftovers(broker_name) if ".bell" in e and ".ch." not in e] == rotated, 30
            ), shm.leftovers(broker_name)
            time.sleep(0.3)
            busy = _broker_cpu(broker.pid, 0.5)  # a loaded machine gives it less CPU, never more
            assert busy < 0.1, f"the broker used {busy:.2f} s of CPU 0.3-0.8 s after the flood"
            with Producer("pg2", broker=broker_name) as late:
                for i in range(5):
                    assert early.send(Message("T", b"e%d" % i)).status is SendStatus.SEND_OK
                    assert late.send(Message("T", b"l%d" % i)).status is SendStatus.SEND_OK
                assert wait_for(lambda: len(got) >= 10, 30), got
            assert sorted(got) == sorted([b"e%d" % i for i in range(5)] + [b"l%d" % i for i in range(5)])
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
