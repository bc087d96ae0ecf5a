"""Store discovery and scan planning alone (no Spark): real store files written by MessageStore,
then changed the way a broker in the middle of a write, or a crash, leaves them."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import shmq
from shmq.codec import record as fmt
from shmq.errors import BadTopicError, NotAStoreError
from shmq.spark.layout import check_store, parse_topic_option, queue_extent, select_topics, split_extent, topic_queues
from shmq.spark.planner import plan_scan, queue_extents
from shmq.spark.pushdown import ScanBounds
from shmq.store.message_store import MessageStore
from shmq.store.read.reader import CommitLogReader
from shmq.store.write.hooks import PutRequest
from tests.spark.conftest import SMALL


def _write(store_dir: str, topic: str, queue_id: int, bodies: list[bytes]) -> None:
    with MessageStore(store_dir, dict(SMALL)) as store:
        for b in bodies:  # one put each: store times step along the queue
            store.put(PutRequest.of_records(topic, queue_id, [fmt.encode_message(topic, b)]))


def _entries(store_dir: str, topic: str, qid: int) -> tuple[str, np.ndarray]:
    d = os.path.join(store_dir, "consumequeue", topic, str(qid))
    path = os.path.join(d, sorted(os.listdir(d))[0])
    with open(path, "rb") as f:
        return path, np.frombuffer(f.read(), fmt.CQ_DTYPE).copy()


def _store_times(store_dir: str, entries: np.ndarray) -> list[int]:
    with open(os.path.join(store_dir, "commitlog", fmt.offset_file_name(0)), "rb") as f:
        log = f.read()
    return [int.from_bytes(log[int(e["offset"]) + fmt.OFF_STORETIMESTAMP :][:8], "big") for e in entries]


def test_an_entry_ahead_of_its_record_ends_the_queue(tmp_path: Any) -> None:
    """The broker writes a record, then its entry; a reader that finds an entry whose record is
    not whole yet (here: pointing at the unwritten end of the log) stops the queue before it."""
    store = str(tmp_path / "s")
    _write(store, "Orders", 0, [b"m%d" % i for i in range(10)])
    path, entries = _entries(store, "Orders", 0)
    last = entries[9]
    ahead = np.array([(int(last["offset"]) + int(last["size"]), int(last["size"]), 0)], fmt.CQ_DTYPE)
    with open(path, "r+b") as f:
        f.seek(10 * fmt.CQ_ENTRY_SIZE)
        f.write(ahead.tobytes())
    [ext] = queue_extents(store, None, ScanBounds())
    assert (ext.start, ext.end) == (0, 10)


def test_time_bounds_become_the_offsets_where_store_times_cross(tmp_path: Any) -> None:
    store = str(tmp_path / "s")
    _write(store, "Orders", 2, [b"m%d" % i for i in range(200)])
    times = _store_times(store, _entries(store, "Orders", 2)[1][:200])
    assert times == sorted(times) and times[0] < times[-1]
    t = times[100]
    lo, hi = times.index(t), len(times) - times[::-1].index(t)  # the run of records stored in that millisecond
    for bounds, want in [
        (ScanBounds(time_lo_ms=t), (lo, 200)),
        (ScanBounds(time_hi_ms=t), (0, lo)),
        (ScanBounds(time_lo_ms=t, time_hi_ms=t + 1), (lo, hi)),
        (ScanBounds(time_lo_ms=times[-1] + 1), (200, 200)),
        (ScanBounds(time_lo_ms=t, offset_lo=150, offset_hi=160), (max(lo, 150), 160)),
    ]:
        [ext] = queue_extents(store, None, bounds)
        assert (ext.start, ext.end) == want, bounds
    assert queue_extents(store, None, ScanBounds(offset_lo=5, offset_hi=5)) == []  # empty: nothing planned
    assert plan_scan(store, None, ScanBounds(topics=frozenset({"Pay"}))) == []


def test_one_record_over_the_limit_is_a_slice_of_its_own(tmp_path: Any) -> None:
    store = str(tmp_path / "s")
    _write(store, "Big", 0, [b"a" * 100, b"b" * 5000, b"c" * 100, b"d" * 100])
    [ext] = queue_extents(store, None, ScanBounds())
    slices = split_extent(store, ext, 1000)
    assert [(s.start, s.end) for s in slices] == [(0, 1), (1, 2), (2, 4)]
    assert slices[1].nbytes > 5000 and sum(s.nbytes for s in slices) == sum(
        s.nbytes for s in split_extent(store, ext, 1 << 30)
    )


def test_topics_of_a_scan(tmp_path: Any) -> None:
    store = str(tmp_path / "s")
    for topic in ("Orders", "%RETRY%cg", "%DLQ%cg", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "Pay"):
        _write(store, topic, 0, [b"x"])
    os.makedirs(os.path.join(store, "consumequeue", "not a topic"))
    assert select_topics(store, None) == ["Orders", "Pay"]
    assert select_topics(store, ["%DLQ%cg", "Gone", "Pay", "%DLQ%cg"]) == ["%DLQ%cg", "Pay"]
    assert parse_topic_option(" Pay , ,%DLQ%cg") == ["Pay", "%DLQ%cg"]
    assert parse_topic_option(" , ") is None and parse_topic_option(None) is None
    with pytest.raises(BadTopicError, match="characters outside"):
        parse_topic_option("Pay,Or/ders")
    with pytest.raises(NotAStoreError, match="no commitlog/ directory nor checkpoint file"):
        check_store(os.path.join(store, "consumequeue"))


def test_a_store_no_message_was_sent_to_scans_empty(store_dir: str, broker_name: str) -> None:
    with shmq.Broker(store_dir, name=broker_name):
        assert not os.path.exists(os.path.join(store_dir, "commitlog"))  # made with the first message
        assert plan_scan(store_dir, None, ScanBounds()) == []
    assert plan_scan(store_dir, ["Orders"], ScanBounds()) == []


def test_layout_of_a_store_without_queues(tmp_path: Any) -> None:
    """A store a broker started on and never wrote to: no topics, no partitions, no error."""
    os.makedirs(tmp_path / "s" / "commitlog")
    store = check_store(str(tmp_path / "s"))
    assert plan_scan(store, None, ScanBounds()) == []
    assert topic_queues(store, "Orders") == []
    commitlog = CommitLogReader(store)
    try:
        ext = queue_extent(store, "Orders", 0, commitlog)
    finally:
        commitlog.close()
    assert (ext.start, ext.end) == (0, 0)
