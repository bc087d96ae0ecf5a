"""StatePublisher: topic rows are allocated before anything is written, and only changes are written."""

import os
import time

import pytest

from shmq.broker.publish import StatePublisher
from shmq.broker.topics import TopicConfig
from shmq.ring.state import StateLayout, StateWriter


@pytest.fixture
def writer():
    w = StateWriter.create(
        f"pub{os.getpid()}x{time.monotonic_ns() % 10**6}",
        "/tmp",
        1,
        1,
        StateLayout(topics=8, queues=20, groups=2, members=2, offsets=8, clients=2),
    )
    yield w
    w.close()
    w.unlink()


def _topics(n: int, queues: int = 4) -> dict[str, TopicConfig]:
    return {f"T{i}": TopicConfig(f"T{i}", queues, queues, 6) for i in range(n)}


def test_full_table_raises_and_keeps_published_state(writer):
    pub = StatePublisher(writer)
    offsets = lambda t, q: (0, 10 * q)  # noqa: E731
    topics = _topics(5)
    pub.topics(topics, offsets, {})
    assert {pub.queue_row(t, 3) for t in topics} == {3, 7, 11, 15, 19}
    more = dict(topics, Big=TopicConfig("Big", 4, 4, 6))  # 24 queue rows > 20
    with pytest.raises(ValueError, match="at most 20 queues"):
        pub.topics(more, offsets, {})
    assert pub.queue_row("Big", 0) is None
    pub.topics(topics, offsets, {})  # the broker undoes the topic: consistent again
    del topics["T0"]
    pub.topics(dict(topics, Small=TopicConfig("Small", 2, 2, 6)), offsets, {})  # reuses freed rows (compaction)
    v = writer.view
    names = {bytes(r["name"]).rstrip(b"\0").decode() for r in v.topics if r["used"]}
    assert names == {"T1", "T2", "T3", "T4", "Small"}
    for name in names:
        row = pub.queue_row(name, 1)
        assert int(v.queues[row]["max_offset"]) == 10


def test_only_changed_topics_are_rewritten(writer):
    pub = StatePublisher(writer)
    calls = []

    def offsets(t, q):
        calls.append(t)
        return 0, 0

    pub.topics(_topics(3, 2), offsets, {})
    calls.clear()
    pub.topics(dict(_topics(3, 2), New=TopicConfig("New", 2, 2, 6)), offsets, {})
    assert set(calls) == {"New"}


def test_counters_add_up_per_topic_and_in_total(writer):
    pub = StatePublisher(writer)
    pub.topics(_topics(3), lambda t, q: (0, 0), {})
    pub.counters({"T0": (5, 500), "T2": (1, 100), "Gone": (9, 900)}, 15, 1500, 2, 4096, 4000)
    pub.counters({"T0": (1, 10)}, 1, 10, 0, 8192, 8000)
    v = writer.view
    by_name = {
        bytes(r["name"]).rstrip(b"\0").decode(): (int(r["msgs_in"]), int(r["bytes_in"])) for r in v.topics if r["used"]
    }
    assert by_name == {"T0": (6, 510), "T1": (0, 0), "T2": (1, 100)}
    s = v.stats[0]
    assert (int(s["msgs_in"]), int(s["bytes_in"]), int(s["busy_rejections"]), int(s["max_phy_offset"])) == (
        16,
        1510,
        2,
        8192,
    )
