"""A client that piles up work for the broker: long polls past the caps, a flood of doorbell posts.
The broker answers the excess at once and goes back to idle when the flood stops."""
from __future__ import annotations

import time

import psutil

import shmq
from shmq import Message, Producer, SendStatus
from shmq.codec import frames as P
from shmq.ring.channel import broker_bell_name
from shmq.ring.doorbell import Doorbell

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


def test_a_doorbell_flood_leaves_the_broker_idle_once_it_stops(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config) as broker, Producer("pg", broker=broker_name) as producer:
        bell = Doorbell.open(broker_bell_name(broker_name))
        try:
            for _ in range(5_000_000):
                bell.ring()
        finally:
            bell.close()
        time.sleep(1.5)
        proc = psutil.Process(broker.pid)
        before = proc.cpu_times()
        time.sleep(1.0)
        after = proc.cpu_times()
        busy = (after.user + after.system) - (before.user + before.system)
        assert busy < 0.2, f"the broker used {busy:.2f} s of CPU in the second after the flood"
        assert producer.send(Message("T", b"fine")).status is SendStatus.SEND_OK
