"""A cluster producer's publish routes, alone: rotation, selector queues, brokers that come and go."""

from __future__ import annotations

from shmq.client.producer.publish_routes import DEFAULT_QUEUE_NUMS, KEEP_GONE_S, PublishRoutes
from shmq.model.perm import PERM_READ, PERM_RW
from shmq.namesrv.routes import BrokerData, RouteTable, TopicData


def broker(name: str, pid: int, topics: dict[str, tuple[int, int]], broker_id: int = 0) -> BrokerData:
    return BrokerData(
        broker_name=name,
        attach_name=name if broker_id == 0 else f"{name}-r{broker_id}",
        cluster="C",
        broker_id=broker_id,
        role="ASYNC_MASTER" if broker_id == 0 else "SLAVE",
        pid=pid,
        alive_key=pid + 1,
        store_dir=f"/s/{name}",
        registered_ms=1,
        topics=tuple(TopicData(t, n, n, perm) for t, (n, perm) in sorted(topics.items())),
    )


def table(version: int, *brokers: BrokerData) -> RouteTable:
    return RouteTable("ns", 1, version, tuple(sorted(brokers, key=lambda b: (b.broker_name, b.broker_id))))


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rotation_interleaves_every_masters_write_queues_and_skips_replicas_and_read_only():
    r = PublishRoutes()
    change = r.update(
        table(
            1,
            broker("a", 10, {"T": (2, PERM_RW)}),
            broker("b", 20, {"T": (4, PERM_RW)}),
            broker("b", 21, {"T": (4, PERM_RW)}, broker_id=1),
            broker("c", 30, {"T": (4, PERM_READ)}),
        )
    )
    assert change is not None and [b.broker_name for b in change.came] == ["a", "b", "c"]
    info = r.topic("T")
    assert info.rotation == ("a", "b", "a", "b", "b", "b")
    assert [(q.broker_name, q.queue_id) for q in info.queues] == [("a", 0), ("a", 1)] + [("b", i) for i in range(4)]
    assert info.routed


def test_unknown_topic_goes_to_every_master_with_the_auto_create_count():
    r = PublishRoutes()
    r.update(table(1, broker("a", 10, {}), broker("b", 20, {"T": (4, PERM_RW)})))
    info = r.topic("New")
    assert not info.routed
    assert sorted(info.rotation) == sorted(["a", "b"] * DEFAULT_QUEUE_NUMS)


def test_same_table_is_no_change_and_a_restart_is_renewed():
    r = PublishRoutes()
    t = table(1, broker("a", 10, {"T": (1, PERM_RW)}))
    assert r.update(t) is not None
    assert r.update(t) is None
    change = r.update(table(2, broker("a", 11, {"T": (1, PERM_RW)})))
    assert change is not None and change.renewed == ("a",) and not change.came and not change.left


def test_a_gone_master_keeps_its_queues_for_selectors_only_for_a_while():
    clock = Clock()
    r = PublishRoutes(clock)
    both = (broker("a", 10, {"T": (2, PERM_RW)}), broker("b", 20, {"T": (2, PERM_RW)}))
    r.update(table(1, *both))
    before = r.topic("T").queues
    change = r.update(table(2, both[0]))
    assert change is not None and change.left == ("b",)
    info = r.topic("T")
    assert info.queues == before  # a selector's choice does not move while b is down
    assert info.rotation == ("a", "a") and not r.is_live("b")
    clock.now += KEEP_GONE_S
    assert [q.broker_name for q in r.topic("T").queues] == ["a", "a"]
    r.update(table(3, *both))
    assert r.topic("T").queues == before and r.is_live("b")
