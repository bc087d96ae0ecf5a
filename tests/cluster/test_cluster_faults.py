"""A cluster under load while its parts fail: a producer and a consumer group given only
``namesrv=``, real processes, a sender thread that never stops while brokers and the name server
are SIGKILLed, restarted, added and stopped. What every test checks: no send fails while a broker
is up, every acknowledged message is consumed, and the duplicates stay within what was in flight
(printed, for the figures of docs/CLUSTER.md)."""

from __future__ import annotations

import os
import threading
import time

import shmq
from shmq import ConsumeFrom, Message, Producer, PushConsumer
from shmq.namesrv.segment import RouteReader
from tests.waiting import wait_for

from .conftest import CONFIG
from .test_cluster_consume import Inbox, _total

TOPIC = "Load"


class SyncLoad:
    """A thread sending sync sends through the name server, one after another: what was
    acknowledged (broker, body), what failed, and when each answer came."""

    def __init__(self, namesrv: str) -> None:
        self.producer = Producer("pg", namesrv=namesrv, send_msg_timeout=10.0).start()
        self.acked: list[tuple[str, str]] = []
        self.answered_at: list[float] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> SyncLoad:
        self._thread.start()
        return self

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                r = self.producer.send(Message(TOPIC, str(i).encode()))
            except shmq.ShmqError as e:
                self.failed.append(f"{type(e).__name__}: {e}")
            else:
                self.acked.append((r.queue.broker_name, str(i)))
                self.answered_at.append(time.monotonic())
            i += 1
            time.sleep(0.002)

    def answers_between(self, start: float, end: float) -> int:
        return sum(1 for t in list(self.answered_at) if start <= t <= end)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.producer.shutdown()


def _group(namesrv: str, inbox: Inbox) -> PushConsumer:
    c = PushConsumer("cg", namesrv=namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
    c.subscribe(TOPIC)
    c.register_listener(inbox)
    return c.start()


def _topic_everywhere(cluster: shmq.Cluster) -> None:
    for b in cluster.brokers:
        shmq.Admin(b.name).create_topic(TOPIC, 4)


def _routed(namesrv: str, names: set[str]) -> bool:
    reader = RouteReader(namesrv)
    try:
        return {b.attach_name for b in reader.read().topic_route(TOPIC).brokers} == names
    except shmq.ShmqError:
        return False
    finally:
        reader.close()


def _all_consumed(load: SyncLoad, inbox: Inbox) -> None:
    want = set(load.acked)
    assert wait_for(lambda: want <= set(_total([inbox])), 60), sorted(want - set(_total([inbox])))[:10]


def _under_load(cluster: shmq.Cluster, namesrv: str) -> tuple[shmq.Cluster, Inbox, PushConsumer, SyncLoad]:
    """``cluster`` with the topic on every broker, a push group reading it and a sync load running."""
    _topic_everywhere(cluster)
    assert wait_for(lambda: _routed(namesrv, {b.name for b in cluster.brokers}), 30)
    inbox = Inbox()
    group = _group(namesrv, inbox)
    return cluster, inbox, group, SyncLoad(namesrv).start()


def test_a_broker_killed_under_sync_sends_fails_no_send_and_loses_nothing(make_cluster, namesrv):
    cluster, inbox, group, load = _under_load(make_cluster(2), namesrv)
    try:
        assert wait_for(lambda: len(load.acked) >= 100, 30)
        victim = cluster.brokers[1]
        victim.kill()
        killed = time.monotonic()
        assert wait_for(lambda: load.answers_between(killed, time.monotonic()) >= 200, 60)
        survivor = cluster.brokers[0].name
        # the group's other queues never stopped: what the survivor acknowledged after the kill is consumed
        after = {k for k in load.acked[-100:] if k[0] == survivor}
        assert after and wait_for(lambda: after <= set(_total([inbox])), 30)
        cluster.brokers[1] = shmq.Broker(victim.store_dir, victim.name, {**CONFIG, "namesrvAddr": namesrv})
        cluster.wait_registered()
        assert wait_for(lambda: {k[0] for k in load.acked[-50:]} == {survivor, victim.name}, 30)
    finally:
        load.stop()
    try:
        assert load.failed == []
        _all_consumed(load, inbox)
        dups = sum(n - 1 for n in _total([inbox]).values() if n > 1)
        print(f"broker SIGKILL under sync sends: {len(load.acked)} acknowledged, 0 failed, {dups} duplicates")
    finally:
        group.shutdown()


def test_traffic_rides_out_a_name_server_kill_and_a_broker_started_meanwhile_joins(
    make_cluster, namesrv, ipc_tracker, tmp_path
):
    cluster, inbox, group, load = _under_load(make_cluster(2), namesrv)
    try:
        assert wait_for(lambda: len(load.acked) >= 100, 30)
        cluster.namesrv.kill()
        down = time.monotonic()
        late_name = ipc_tracker.name("late")
        late_store = ipc_tracker.store(os.path.join(str(tmp_path), late_name))
        late = shmq.Broker(late_store, late_name, {**CONFIG, "namesrvAddr": namesrv})  # starts while none serves
        cluster.brokers.append(late)
        shmq.Admin(late_name).create_topic(TOPIC, 4)
        # traffic never stopped while the name server was down: clients route on their last table
        assert wait_for(lambda: load.answers_between(down, time.monotonic()) >= 100, 30)
        assert load.failed == []
        cluster.namesrv = shmq.NameServer(namesrv)
        serving = time.monotonic()
        every = {b.name for b in cluster.brokers}
        assert wait_for(lambda: _routed(namesrv, every), 30), "the routes never became whole again"
        whole = time.monotonic() - serving
        # the late broker joined: the producer sends to it and the group reads its queues
        assert wait_for(lambda: any(k[0] == late_name for k in load.acked[-100:]), 30)
        assert wait_for(lambda: any(k[0] == late_name for k in _total([inbox])), 30)
    finally:
        load.stop()
    try:
        assert load.failed == []
        _all_consumed(load, inbox)
        print(f"name server SIGKILL under load: routes whole {whole * 1000:.0f} ms after the new one served")
    finally:
        group.shutdown()


def test_brokers_joining_and_leaving_lose_nothing(make_cluster, namesrv, ipc_tracker, tmp_path):
    cluster, inbox, group, load = _under_load(make_cluster(2), namesrv)
    try:
        assert wait_for(lambda: len(load.acked) >= 100, 30)
        extra_name = ipc_tracker.name("join")
        extra_store = ipc_tracker.store(os.path.join(str(tmp_path), extra_name))
        extra = shmq.Broker(extra_store, extra_name, {**CONFIG, "namesrvAddr": namesrv})
        cluster.brokers.append(extra)
        shmq.Admin(extra_name).create_topic(TOPIC, 4)
        assert wait_for(lambda: any(k[0] == extra_name for k in load.acked[-100:]), 30)
        assert wait_for(lambda: any(k[0] == extra_name for k in _total([inbox])), 30)
        leaving = cluster.brokers[0]
        leaving.stop()  # a clean stop: it deregisters, the clients move on to the others
        stopped = time.monotonic()
        assert wait_for(lambda: load.answers_between(stopped, time.monotonic()) >= 100, 30)
        assert all(k[0] != leaving.name for k in load.acked[-50:])
        # back again: what it acknowledged before it left and the group had not read yet is read now
        cluster.brokers[0] = shmq.Broker(leaving.store_dir, leaving.name, {**CONFIG, "namesrvAddr": namesrv})
        cluster.wait_registered()
        assert wait_for(lambda: any(k[0] == leaving.name for k in load.acked[-100:]), 30)
    finally:
        load.stop()
    try:
        assert load.failed == []
        _all_consumed(load, inbox)
        dups = {k: n - 1 for k, n in _total([inbox]).items() if n > 1}
        # only what the group had read from the leaving broker after its last offset commit reached it
        assert {k[0] for k in dups} <= {leaving.name}, dups
        print(f"brokers joining and leaving: {len(load.acked)} acknowledged, {sum(dups.values())} duplicates")
    finally:
        group.shutdown()
