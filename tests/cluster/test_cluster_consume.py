"""Consumer groups over a cluster of real brokers, their routes published in a route segment."""

from __future__ import annotations

import threading
import time
from collections import Counter

import shmq
from shmq import ConsumeFrom, ConsumeResult, Message, MessageModel, PullStatus, PushConsumer
from shmq.client.consumer.rebalance import allocate_averagely
from shmq.model.message import MessageQueue
from tests.waiting import wait_for

from .conftest import Brokers, Routes


class Inbox:
    """A listener that records (broker, body) of every message it is given."""

    def __init__(self, hold: threading.Event | None = None, held: str = "") -> None:
        """``hold``: while clear, a message of broker ``held`` keeps its listener call waiting."""
        self.got: Counter[tuple[str, str]] = Counter()
        self.lock = threading.Lock()
        self.hold = hold
        self.held = held

    def __call__(self, msgs, ctx) -> ConsumeResult:
        if self.hold is not None and ctx.message_queue.broker_name == self.held:
            self.hold.wait(30)
        with self.lock:
            for m in msgs:
                self.got[(ctx.message_queue.broker_name, m.body.decode())] += 1
        return ConsumeResult.SUCCESS


def _total(inboxes: list[Inbox]) -> Counter[tuple[str, str]]:
    out: Counter[tuple[str, str]] = Counter()
    for i in inboxes:
        with i.lock:
            out.update(i.got)
    return out


def _send(broker: str, topic: str, bodies: range) -> None:
    with shmq.Producer("pg", broker=broker) as p:
        for i in bodies:
            p.send(Message(topic, str(i).encode()))


def _member(routes: Routes, group: str, inbox: Inbox, **kw) -> PushConsumer:
    c = PushConsumer(group, namesrv=routes.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, **kw)
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
        assert wait_for(lambda: set(_total(inboxes)) == want, 30)
        assert max(_total(inboxes).values()) == 1
    finally:
        for m in members:
            m.shutdown()


def test_a_killed_broker_leaves_the_others_flowing_and_its_acked_messages_come_when_it_is_back(brokers, routes):
    a, b = _two_brokers(brokers, routes)
    hold = threading.Event()
    inboxes = [Inbox(hold, b.name) for _ in range(2)]
    members = [_member(routes, "cg", inbox).start() for inbox in inboxes]
    try:
        assert wait_for(lambda: len({q for m in members for q in m.assigned_queues() if q.topic == "T"}) == 8, 30)
        _send(a.name, "T", range(100))
        _send(b.name, "T", range(100))  # acknowledged, and held in (or before) the listener
        assert wait_for(
            lambda: {k for k in _total(inboxes) if k[0] == a.name} == {(a.name, str(i)) for i in range(100)}, 30
        )
        b.kill()
        hold.set()
        # b's queues leave the allocation at once; a's four are shared by the two members
        assert wait_for(
            lambda: sorted(len([q for q in m.assigned_queues() if q.topic == "T"]) for m in members) == [2, 2], 30
        )
        assert all(q.broker_name == a.name for m in members for q in m.assigned_queues())
        routes.publish((a, a.name, 0), (b, b.name, 0))  # the dead pid stays in the table: readers leave it out
        _send(a.name, "T", range(100, 200))  # the group's other queues keep flowing while b is down
        want_a = {(a.name, str(i)) for i in range(200)}
        assert wait_for(lambda: want_a <= set(_total(inboxes)), 30)
        b2 = brokers.start(b.name)  # the same name and store: a restart
        routes.publish((a, a.name, 0), (b2, b.name, 0))
        _send(b.name, "T", range(100, 150))
        want = want_a | {(b.name, str(i)) for i in range(150)}
        assert wait_for(lambda: set(_total(inboxes)) == want, 30), sorted(want - set(_total(inboxes)))[:10]
        total = _total(inboxes)
        dups = {k: n for k, n in total.items() if n > 1}
        # what was delivered and not yet committed when b died may come again: never a's messages
        assert all(k[0] == b.name for k in dups), dups
        print(f"duplicates after the kill: {len(dups)} of {len(total)}")
    finally:
        hold.set()
        for m in members:
            m.shutdown()


def test_a_restarted_name_servers_empty_table_moves_no_queue(brokers, routes):
    a, b = _two_brokers(brokers, routes)
    inbox = Inbox()
    c = _member(routes, "cg", inbox).start()
    try:
        assert wait_for(lambda: len([q for q in c.assigned_queues() if q.topic == "T"]) == 8, 30)
        routes.restart()
        routes.publish((a, a.name, 0))  # one broker registered again, the other not yet
        shown = []
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            shown.append(len([q for q in c.assigned_queues() if q.topic == "T"]))
            time.sleep(0.005)
        assert set(shown) == {8}, shown  # the brokers still live: their queues stay while they register again
        routes.publish((a, a.name, 0), (b, b.name, 0))
        _send(b.name, "T", range(1))
        assert wait_for(lambda: (b.name, "0") in inbox.got, 30)
    finally:
        c.shutdown()


def test_members_joining_and_leaving_lose_nothing(brokers, routes):
    a, b = _two_brokers(brokers, routes)
    inboxes = [Inbox() for _ in range(4)]
    members = [_member(routes, "cg", inboxes[0]).start()]
    sent = 0
    try:
        for step in range(1, 6):
            for x in (a, b):
                _send(x.name, "T", range(sent, sent + 50))
            sent += 50
            if step < 4:
                members.append(_member(routes, "cg", inboxes[step]).start())  # joins mid-stream
            else:
                members.pop(0).shutdown()  # leaves mid-stream
        want = {(x.name, str(i)) for x in (a, b) for i in range(sent)}
        assert wait_for(lambda: set(_total(inboxes)) == want, 30), len(want - set(_total(inboxes)))
        dups = {k: n for k, n in _total(inboxes).items() if n > 1}
        print(f"duplicates with members joining and leaving: {len(dups)} of {len(want)}")
        assert not dups  # a member leaving commits before its queues' new owners read them
    finally:
        for m in members:
            m.shutdown()


def test_broadcasting_over_two_brokers_gives_every_member_every_message(brokers, routes, tmp_path):
    a, b = _two_brokers(brokers, routes)
    inboxes = [Inbox() for _ in range(2)]
    members = [
        _member(routes, "bg", inbox, model=MessageModel.BROADCASTING, offset_store_dir=str(tmp_path / "off")).start()
        for inbox in inboxes
    ]
    try:
        assert wait_for(lambda: all(len(m.assigned_queues()) == 8 for m in members), 30)
        for x in (a, b):
            _send(x.name, "T", range(60))
        want = {(x.name, str(i)) for x in (a, b) for i in range(60)}
        for inbox in inboxes:
            assert wait_for(lambda inbox=inbox: set(inbox.got) == want, 30)
            assert max(inbox.got.values()) == 1
    finally:
        for m in members:
            m.shutdown()
    # offsets are local, one file per broker
    assert sorted(p.name for p in (tmp_path / "off").iterdir()) == sorted([a.name, b.name])


def test_pull_consumer_reads_and_commits_across_brokers(brokers, routes):
    a, b = _two_brokers(brokers, routes, queues=2)
    for x in (a, b):
        _send(x.name, "T", range(10))
    with shmq.PullConsumer("pg", namesrv=routes.namesrv) as pc:
        mqs = pc.fetch_queues("T")
        assert [(q.broker_name, q.queue_id) for q in mqs] == sorted((x.name, q) for x in (a, b) for q in range(2))
        got = Counter()
        for mq in mqs:
            r = pc.pull(mq, offset=0, max_nums=100, timeout=0)
            assert r.status is PullStatus.FOUND
            got.update((mq.broker_name, m.body.decode()) for m in r.messages)
            pc.commit(mq, r.next_begin_offset)
        assert got == Counter({(x.name, str(i)): 1 for x in (a, b) for i in range(10)})
        for mq in mqs:  # each queue's offset went to its own broker
            assert pc.fetch_consume_offset(mq, from_store=True) == pc.max_offset(mq) > 0


def test_a_message_sent_back_comes_again_from_the_broker_that_delivered_it_and_dies_there(brokers, routes):
    a, b = _two_brokers(brokers, routes)
    seen: list[tuple[str, str, int]] = []
    hooked: list[tuple[str, bool]] = []
    lock = threading.Lock()

    def listener(msgs, ctx) -> ConsumeResult:
        with lock:
            seen.extend((ctx.message_queue.topic, ctx.message_queue.broker_name, m.reconsume_times) for m in msgs)
        ctx.delay_level_when_next_consume = 1  # 1 s
        return ConsumeResult.RECONSUME_LATER

    class Hook:
        def consume_message_before(self, ctx) -> None:
            pass

        def consume_message_after(self, ctx) -> None:
            with lock:
                hooked.append((ctx.queue.broker_name, ctx.success))

    c = PushConsumer("rg", namesrv=routes.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, max_reconsume_times=1)
    c.subscribe("T")
    c.register_listener(listener)
    c.register_consume_hook(Hook())

    def dlq(broker: str) -> int:
        with shmq.PullConsumer("inspector", broker=broker) as pc:
            return sum(pc.max_offset(q) for q in pc.fetch_queues("%DLQ%rg"))

    with c:
        _send(b.name, "T", range(1))
        assert wait_for(lambda: dlq(b.name) == 1, 30), seen
    assert seen == [("T", b.name, 0), ("%RETRY%rg", b.name, 1)]
    assert hooked == [(b.name, False), (b.name, False)]  # the hooks saw both calls, on the broker that made them
    assert dlq(a.name) == 0


def test_trace_records_of_a_cluster_consumer_go_to_the_broker_that_delivered(brokers, routes):
    a, b = _two_brokers(brokers, routes)
    ids = {}
    for x in (a, b):
        with shmq.Producer("pg", broker=x.name) as p:
            ids[x.name] = p.send(Message("T", x.name.encode())).msg_id
    inbox = Inbox()
    with _member(routes, "tg", inbox, trace=True):
        assert wait_for(lambda: len(inbox.got) == 2, 30)
        for x in (a, b):
            admin = shmq.Admin(broker=x.name)
            assert wait_for(lambda admin=admin, x=x: len(admin.view_trace(ids[x.name])) == 2, 30)
            assert [t.type for t in admin.view_trace(ids[x.name])] == ["SubBefore", "SubAfter"]
