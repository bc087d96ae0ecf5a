"""A consumer group on a real cluster (``shmq.Cluster``: a name server and brokers that register
with it): the averagely split, and a broker SIGKILLed and restarted under load."""

from __future__ import annotations

import os
import threading
import time

import shmq
from shmq import ConsumeFrom, Message, PushConsumer
from shmq.client.consumer.rebalance import allocate_averagely
from shmq.model.message import MessageQueue
from tests.process.cluster import SMALL, running_cluster
from tests.waiting import wait_for

from .test_cluster_consume import Inbox, _total


def test_a_group_on_a_real_cluster_splits_averagely_and_rides_out_a_broker_kill(tmp_path, ipc_tracker):
    ns = ipc_tracker.namesrv("ns")
    root = str(tmp_path / "cluster")
    names = ipc_tracker.cluster(ns, root, 2)
    config = {**SMALL, "namesrvAddr": ns}
    with shmq.Cluster(root, brokers=2, namesrv=ns, config=SMALL) as cluster:
        for name in names:
            shmq.Admin(name).create_topic("T", 4)
        hold = threading.Event()
        inboxes = [Inbox(hold, names[1]) for _ in range(3)]
        members = []
        for inbox in inboxes:
            c = PushConsumer("cg", namesrv=ns, consume_from=ConsumeFrom.FIRST_OFFSET)
            c.subscribe("T")
            c.register_listener(inbox)
            members.append(c.start())
        try:
            every = [MessageQueue("T", n, q) for n in names for q in range(4)]
            ids = sorted(m._member.client_id for m in members)
            assert wait_for(
                lambda: all(
                    [q for q in m.assigned_queues() if q.topic == "T"]
                    == sorted(allocate_averagely(every, ids, m._member.client_id))
                    for m in members
                ),
                30,
            ), [m.assigned_queues() for m in members]
            with shmq.Producer("pg", broker=names[0]) as p0, shmq.Producer("pg", broker=names[1]) as p1:
                for i in range(100):
                    p0.send(Message("T", str(i).encode()))
                    p1.send(Message("T", str(i).encode()))  # acknowledged; held in (or before) the listener
            cluster.brokers[1].kill()
            hold.set()
            with shmq.Producer("pg", broker=names[0]) as p0:
                for i in range(100, 200):
                    p0.send(Message("T", str(i).encode()))
            want_0 = {(names[0], str(i)) for i in range(200)}
            assert wait_for(lambda: want_0 <= set(_total(inboxes)), 30)  # b0's queues kept flowing
            cluster.brokers[1] = shmq.Broker(os.path.join(root, names[1]), names[1], config)  # registers again
            cluster.wait_registered()
            want = want_0 | {(names[1], str(i)) for i in range(100)}
            assert wait_for(lambda: set(_total(inboxes)) == want, 30), sorted(want - set(_total(inboxes)))[:10]
            dups = {k: n for k, n in _total(inboxes).items() if n > 1}
            assert all(k[0] == names[1] for k in dups), dups  # only what b1 had delivered, uncommitted
            print(f"duplicates after a broker kill on a real cluster: {len(dups)} of {len(want)}")
        finally:
            hold.set()
            for m in members:
                m.shutdown()


def test_a_name_server_restart_leaves_the_groups_queues_where_they_are(tmp_path, ipc_tracker):
    ns = ipc_tracker.namesrv("ns")
    root = str(tmp_path / "cluster")
    names = ipc_tracker.cluster(ns, root, 2)
    with shmq.Cluster(root, brokers=2, namesrv=ns, config=SMALL) as cluster:
        for name in names:
            shmq.Admin(name).create_topic("T", 2)
        inbox = Inbox()
        c = PushConsumer("cg", namesrv=ns, consume_from=ConsumeFrom.FIRST_OFFSET)
        c.subscribe("T")
        c.register_listener(inbox)
        with c:
            every = [MessageQueue("T", n, q) for n in names for q in range(2)]
            assert wait_for(lambda: [q for q in c.assigned_queues() if q.topic == "T"] == every, 30)
            cluster.namesrv.kill()
            cluster.namesrv = shmq.NameServer(ns, os.path.join(root, "namesrv.log"))  # brokers register again
            shown = []
            deadline = time.monotonic() + 2.0  # the brokers' registrations come back within 1 s
            while time.monotonic() < deadline:
                shown.append(len([q for q in c.assigned_queues() if q.topic == "T"]))
                time.sleep(0.005)
            cluster.wait_registered()
            assert set(shown) == {4}, shown  # never a queue dropped while the routes were rebuilt
            with shmq.Producer("pg", broker=names[1]) as p:
                p.send(Message("T", b"after"))
            assert wait_for(lambda: (names[1], "after") in inbox.got, 30)


def test_members_joining_and_leaving_a_real_cluster_under_load_get_each_message_once(tmp_path, ipc_tracker):
    """A clean join or leave hands its queues over with a synchronous commit before the new
    owner reads them: no message comes twice, even while a producer sends through it all."""
    with running_cluster(ipc_tracker, tmp_path) as cluster:
        for b in cluster.brokers:
            shmq.Admin(b.name).create_topic("T", 4)
        cluster.wait_route("T")
        inboxes = [Inbox() for _ in range(3)]
        members: list[PushConsumer] = []
        acked: list[str] = []
        stop = threading.Event()

        def produce() -> None:
            with shmq.Producer("pg", namesrv=cluster.namesrv) as p:
                i = 0
                while not stop.is_set():
                    if p.send(Message("T", str(i).encode())).status is shmq.SendStatus.SEND_OK:
                        acked.append(str(i))
                    i += 1
                    time.sleep(0.001)

        def consumed() -> set[str]:
            return {body for _, body in _total(inboxes)}

        def more_consumed(n: int = 100) -> None:
            before = len(consumed())
            assert wait_for(lambda: len(consumed()) >= before + n, 30)

        sender = threading.Thread(target=produce)
        sender.start()
        try:
            members.append(_start_member(cluster.namesrv, inboxes[0]))
            more_consumed()
            members.append(_start_member(cluster.namesrv, inboxes[1]))  # joins under load
            more_consumed()
            members.append(_start_member(cluster.namesrv, inboxes[2]))
            more_consumed()
            members.pop(0).shutdown()  # leaves under load
            more_consumed()
            members.pop(0).shutdown()
            more_consumed()
            stop.set()
            sender.join(30)
            assert wait_for(lambda: set(acked) <= consumed(), 30), len(set(acked) - consumed())
        finally:
            stop.set()
            sender.join(30)
            for m in members:
                m.shutdown()
        total = _total(inboxes)
        dups = {k: n for k, n in total.items() if n > 1}
        print(f"duplicates with members joining and leaving a real cluster: {len(dups)} of {len(total)}")
        assert not dups


def _start_member(namesrv: str, inbox: Inbox) -> PushConsumer:
    c = PushConsumer("cg", namesrv=namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
    c.subscribe("T")
    c.register_listener(inbox)
    return c.start()
