"""SimpleConsumer (POP) on a real 2-broker cluster (``namesrv=``): messages of both brokers
received and acked once, acks routed to the broker that handed each out, a receive's long poll
over both brokers, and a killed broker's part leaving the receives and coming back."""

from __future__ import annotations

import threading
import time

import shmq
from shmq import Message, SimpleConsumer
from shmq.client.consumer.cluster_simple import ClusterSimpleConsumer
from tests.waiting import wait_for

from .conftest import restart


def _send(broker: str, bodies: range) -> None:
    with shmq.Producer("pg", broker=broker) as p:
        for i in bodies:
            p.send(Message("Jobs", str(i).encode()))


def _drain(sc, want: int, timeout: float = 30.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += sc.receive(32, 30.0)
    return got


def test_a_simple_consumer_over_a_cluster_receives_from_every_broker_and_acks_each_once(make_cluster, namesrv):
    cluster = make_cluster(2)
    names = [b.name for b in cluster.brokers]
    for name in names:
        shmq.Admin(name).create_topic("Jobs", 4)
    sc = SimpleConsumer("wg", namesrv=namesrv, subscriptions={"Jobs": "*"}, await_duration=1.0).start()
    try:
        assert isinstance(sc, ClusterSimpleConsumer)
        _send(names[0], range(50))
        _send(names[1], range(50, 100))
        got = _drain(sc, 100)
        assert sorted(int(m.body) for m in got) == list(range(100))
        assert {m.receipt_handle.broker_name for m in got} == set(names)
        for m in got:
            sc.ack_async(m)
        assert sc.receive(32, 30.0) == []  # all acked, on their own brokers

        # a long poll over both brokers: a message sent to either while it waits is returned
        later = threading.Timer(0.3, _send, (names[1], range(100, 101)))
        later.start()
        t0 = time.monotonic()
        (m,) = _drain(sc, 1)
        later.join()
        assert m.body == b"100" and time.monotonic() - t0 < 30
        sc.ack(m)

        # a killed broker's part drops out of the receives; the other broker's messages flow
        cluster.brokers[1].kill()
        _send(names[0], range(200, 210))
        got = _drain(sc, 10)
        assert sorted(int(m.body) for m in got) == list(range(200, 210))
        for m in got:
            sc.ack(m)
        restart(cluster, 1)
        assert wait_for(lambda: len(sc._member.serving_parts()) == 2, 30)
        _send(names[1], range(300, 305))
        got = _drain(sc, 5)
        assert sorted(int(m.body) for m in got) == list(range(300, 305))
        for m in got:
            sc.ack(m)
    finally:
        sc.shutdown()
