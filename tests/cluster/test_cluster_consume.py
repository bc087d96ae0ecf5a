"""Consumer groups over a cluster of real brokers, their routes published in a route segment."""

from __future__ import annotations

import threading
from collections import Counter

import shmq
from shmq import ConsumeResult, Message, PushConsumer
from shmq.client.consumer.rebalance import allocate_averagely
from shmq.model.message import MessageQueue
from tests.waiting import wait_for

from .conftest import Brokers, Routes


class Inbox:
    """A listener that records (broker, body) of every message it is given."""

    def __init__(self) -> None:
        self.got: Counter[tuple[str, str]] = Counter()
        self.lock = threading.Lock()

    def __call__(self, msgs, ctx) -> ConsumeResult:
        with self.lock:
            for m in msgs:
                self.got[(ctx.message_queue.broker_name, m.body.decode())] += 1
        return ConsumeResult.CONSUME_SUCCESS


def _send(broker: str, topic: str, bodies: range) -> None:
    with shmq.Producer("pg", broker=broker) as p:
        for i in bodies:
            p.send(Message(topic, str(i).encode()))


def _member(routes: Routes, group: str, inbox: Inbox, **kw) -> PushConsumer:
    c = PushConsumer(group, namesrv=routes.namesrv, **kw)
    c.subscribe("T")
    c.register_listener(inbox)
    return c


def _two_brokers(brokers: Brokers, routes: Routes, queues: int = 4) -> list[shmq.Broker]:
    bs = [brokers.start(), brokers.start()]
    for b in bs:
        shmq.Admin(b.name).create_topic("T", queues)
    routes.publish(*((b, b.name, 0) for b in bs))
    return bs


def test_a_group_of_three_over_two_brokers_gets_the_averagely_split(brokers, routes):
    bs = _two_brokers(brokers, routes)
    inboxes = [Inbox() for _ in range(3)]
    members = [_member(routes, "cg", inbox).start() for inbox in inboxes]
    try:
        every = sorted(
            (MessageQueue("T", b.name, q) for b in bs for q in range(4)), key=lambda mq: (mq.broker_name, mq.queue_id)
        )
        ids = sorted(m._member.client_id for m in members)

        def split_is_averagely() -> bool:
            return all(
                [q for q in m.assigned_queues() if q.topic == "T"]
                == sorted(allocate_averagely(every, ids, m._member.client_id))
                for m in members
            )

        assert wait_for(split_is_averagely, 30), [m.assigned_queues() for m in members]
        for b in bs:
            _send(b.name, "T", range(100))
        want = {(b.name, str(i)) for b in bs for i in range(100)}
        assert wait_for(lambda: set(sum((i.got for i in inboxes), Counter())) == want, 30)
        total = sum((i.got for i in inboxes), Counter())
        assert max(total.values()) == 1
    finally:
        for m in members:
            m.shutdown()
