"""meta_gen: the broker raises it with every change of topic rows or groups (never for max offsets),
and the consumer's cached reads keyed on it (``BrokerState.pull_bounds``, ``RebalanceImpl.check``)
answer exactly what a read of the tables answers."""

import logging
import os
import time

import pytest

from shmq.broker.groups import ConsumerGroup
from shmq.broker.publish import StatePublisher
from shmq.broker.topics import TopicConfig
from shmq.client.broker_state import BrokerState
from shmq.client.consumer.rebalance import allocate_averagely
from shmq.client.consumer.rebalance_impl import RebalanceImpl
from shmq.model.consumer_types import MessageModel
from shmq.model.perm import PERM_READ
from shmq.ring.state import StateLayout, StateReader, StateView, StateWriter


@pytest.fixture
def pair():
    name = f"mg{os.getpid()}x{time.monotonic_ns() % 10**6}"
    w = StateWriter.create(
        name, "/tmp", 1, 1, StateLayout(topics=8, queues=20, groups=2, members=4, offsets=8, clients=2)
    )
    r = StateReader.open(name)
    yield StatePublisher(w), w, BrokerState(r)
    r.close()
    w.close()
    w.unlink()


def _bounds_from_tables(v: StateView, topic: str, qid: int) -> tuple[int, int, int]:
    """What ``pull_bounds`` must answer, read the slow way (a scan of the topic table)."""
    slot = v.topic_slot(topic)
    if slot is None:
        return PERM_READ, 0, 0
    t = v.topics[slot]
    if qid >= int(t["read_queues"]):
        return int(t["perm"]), 0, 0
    q = v.queues[int(t["queue_base"]) + qid]
    return int(t["perm"]), int(q["min_offset"]), int(q["max_offset"])


def test_meta_gen_moves_with_topics_and_groups_only(pair):
    pub, _w, state = pair
    g0 = state.meta_gen()
    pub.topics({"A": TopicConfig("A", 2, 2, 6)}, lambda t, q: (0, 0), {})
    g1 = state.meta_gen()
    assert g1 != g0
    pub.queue_offsets([("A", 0, 0, 5)], 0)
    pub.counters({"A": (5, 500)}, 5, 500, 0, 100, 100)
    pub.offset("g", "A", 0, 3)
    assert state.meta_gen() == g1
    pub.groups({"g": ConsumerGroup("g")}, {})
    assert state.meta_gen() != g1


def test_pull_bounds_fast_path_answers_what_the_tables_say(pair, monkeypatch):
    pub, w, state = pair
    offsets = {}
    topics = {"A": TopicConfig("A", 2, 2, 6), "B": TopicConfig("B", 3, 3, 6)}

    def check():
        for topic in ("A", "B", "C"):
            for qid in range(5):
                want = _bounds_from_tables(w.view, topic, qid)
                assert state.pull_bounds(topic, qid) == want, (topic, qid)

    pub.topics(topics, lambda t, q: offsets.get((t, q), (0, 0)), {})
    check()
    reads = []
    real_read = state.reader.read
    monkeypatch.setattr(state.reader, "read", lambda fn, *a: reads.append(1) or real_read(fn, *a))
    pub.queue_offsets([("A", 1, 2, 9), ("B", 2, 0, 4)], 0)  # no meta change: answered from the cache
    check()
    assert not reads
    steps = [
        dict(topics, A=TopicConfig("A", 2, 2, 2)),  # perm without read
        dict(topics, A=TopicConfig("A", 4, 4, 6)),  # grows: its block moves
        {"B": topics["B"]},  # A deleted
        {"B": topics["B"], "C": TopicConfig("C", 8, 8, 6)},  # C reuses A's row
        {"C": TopicConfig("C", 8, 8, 6), "A": TopicConfig("A", 9, 9, 6)},  # compaction moves blocks
    ]
    for i, step in enumerate(steps):
        offsets.update({(t, q): (q, 10 * q + i) for t in step for q in range(9)})
        pub.topics(step, lambda t, q: offsets.get((t, q), (0, 0)), {})
        check()


def test_rebalance_check_recomputes_only_after_a_meta_change(pair):
    pub, _w, state = pair
    pub.topics({"A": TopicConfig("A", 4, 4, 6)}, lambda t, q: (0, 0), {})
    g = ConsumerGroup("g")
    g.members.update({11: {}, 22: {}})
    g.version = 1
    pub.groups({"g": g}, {})
    r = RebalanceImpl("g", "b", MessageModel.CLUSTERING, allocate_averagely, logging.getLogger("t"))
    a = r.check(state, ["A"], 11, [])
    assert a is not None and {mq.queue_id for mq in a.mine} == {0, 1}
    r.done(a)
    assert r.check(state, ["A"], 11, a.mine) is None
    pub.queue_offsets([("A", 0, 0, 5)], 0)
    assert r.check(state, ["A"], 11, a.mine) is None
    ab = r.check(state, ["A", "B"], 11, a.mine)  # new topics (B does not exist): computed, not taken from the cache
    assert ab is not None and ab.mine == a.mine
    assert r.check(state, ["A"], 11, a.mine) is None  # back to what was applied
    del g.members[22]
    g.version = 2
    pub.groups({"g": g}, {})
    b = r.check(state, ["A"], 11, a.mine)
    assert b is not None and {mq.queue_id for mq in b.mine} == {0, 1, 2, 3}
    assert r.check(state, ["A"], 11, b.mine) is not None  # not applied (no ``done``): computed again
