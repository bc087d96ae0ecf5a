"""Compiled ``pull_messages`` (consume-queue range -> MessageExt objects) against the reference
(``read_batch`` then ``messages``).

The same store gives the same next offset and the same objects (every slot), or the same error;
ranges over two consume-queue files, cleaned-up records, tag filters and damaged entries or
records are handed to the reference and so agree by construction, which these tests check too.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.filter.tags import TagFilter
from shmq.store.read import columns
from shmq.store.read.reader import ConsumeQueueReader
from tests.client.consumer.conftest import delete_commitlog_head, put_many, reader, store  # noqa: F401 - fixtures
from tests.speedups.conftest import compiled_or_skip
from tests.speedups.test_consumer_decode import EXPRESSIONS, FakeSegment, _put_mixed, damaged_store
from tests.speedups.test_consumer_messages import slots


@pytest.fixture(scope="module")
def pair():
    return compiled_or_skip("_consumer", "pull_messages"), _speedups.reference("_consumer", "pull_messages")


def outcome(fn, *args) -> tuple:
    try:
        nxt, msgs = fn(*args)
    except Exception as e:  # noqa: BLE001 - the point is comparing whatever is raised
        return ("error", type(e), str(e))
    return ("ok", nxt, [slots(m) for m in msgs])


def test_the_push_pull_uses_the_compiled_function_unless_disabled() -> None:
    fn = compiled_or_skip("_consumer", "pull_messages")
    assert (columns.pull_messages is fn) != _speedups.DISABLED


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_store_pulls_give_the_same_objects(pair, store, reader, expression) -> None:
    """240 records over two consume-queue files (128 entries each): compressed bodies, no properties,
    properties not starting with TAGS; every step size, from every offset (some below the min)."""
    compiled, reference = pair
    _put_mixed(store)
    expr = None if expression is None else TagFilter(expression)
    mx = store.get_max_offset_in_queue("T", 0)
    for step in (1, 3, 32, 1000):
        for offset in range(0, mx + 1, 7 if step > 3 else 1):
            for top in (mx, min(mx, offset + 2)):
                got = outcome(compiled, reader, "T", 0, offset, step, top, expr)
                assert got == outcome(reference, reader, "T", 0, offset, step, top, expr), (step, offset, top)


@pytest.mark.parametrize("expression", [None, "*"])
def test_healthy_ranges_in_one_file_are_read_by_the_compiled_code(pair, store, reader, monkeypatch, expression) -> None:
    compiled, reference = pair
    _put_mixed(store)
    expr = None if expression is None else TagFilter(expression)
    mx = store.get_max_offset_in_queue("T", 0)
    want = [outcome(reference, reader, "T", 0, off, 4, mx, expr) for off in range(124)]

    def no_fallback(*args):
        raise AssertionError("the compiled pull_messages fell back to the reference")

    monkeypatch.setitem(_speedups._references, "_consumer.pull_messages", no_fallback)
    assert [outcome(compiled, reader, "T", 0, off, 4, mx, expr) for off in range(124)] == want
    assert sum(len(w[2]) for w in want if w[0] == "ok") > 300  # (every 11th body is flagged compressed but is not)


def test_cleaned_up_records_agree(pair, store, reader) -> None:
    compiled, reference = pair
    put_many(store, "T", 0, 600, body_size=300)
    mx = store.get_max_offset_in_queue("T", 0)
    delete_commitlog_head(store, 2)
    reader.refresh()
    for offset in range(0, mx, 37):
        for expr in (None, TagFilter("TagA")):
            assert outcome(compiled, reader, "T", 0, offset, 32, mx, expr) == outcome(
                reference, reader, "T", 0, offset, 32, mx, expr
            )


# --------------------------------------------------------------------------- garbage


class FakeQueueFiles:
    """A consume queue's files: one segment of (possibly damaged) entry bytes."""

    def __init__(self, segments: list[FakeSegment]) -> None:
        self.segments = segments

    def find(self, offset: int) -> FakeSegment | None:
        for s in self.segments:
            if s.start <= offset < s.end:
                return s
        return None


class FakeReader:
    def __init__(self, cq: ConsumeQueueReader, commitlog) -> None:
        self.cq, self.commitlog = cq, commitlog

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueueReader:
        return self.cq


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    damaged_store(),
    st.sampled_from([None, "*", "TagA"]),
    st.integers(0, 20),
    st.integers(0, 40),
    st.integers(-3, 40),
    st.sampled_from([0, 20, 37]),
)
def test_damaged_entries_and_records_pull_the_same_or_fail_the_same(
    pair, data, expression, offset, max_num, top, shift
) -> None:
    compiled, reference = pair
    log, rng = data
    cq = ConsumeQueueReader.__new__(ConsumeQueueReader)
    cq.topic, cq.queue_id, cq.commitlog, cq._min_cache = "T", 3, None, None
    raw = np.frombuffer(rng.entries.tobytes(), np.uint8)
    cq.files = FakeQueueFiles([FakeSegment(rng.start * fmt.CQ_ENTRY_SIZE + shift, raw)] if len(raw) else [])
    expr = None if expression is None else TagFilter(expression)
    max_offset = rng.start + top
    start = rng.start + offset
    fake = FakeReader(cq, log)
    assert outcome(compiled, fake, "T", 3, start, max_num, max_offset, expr) == outcome(
        reference, fake, "T", 3, start, max_num, max_offset, expr
    )


@pytest.mark.parametrize("delta", [-1, 1, -3, 0x70000000, -0x7FFFFFFF])
def test_a_damaged_bodylen_is_a_corrupt_record_error_in_both(pair, store, reader, delta) -> None:
    """One record's BODYLEN changed (TOTALSIZE, magic, offset intact): both paths raise
    CorruptRecordError naming it, never IndexError and never a wrongly cut body."""
    compiled, reference = pair
    put_many(store, "T", 0, 20)
    mx = store.get_max_offset_in_queue("T", 0)
    phys = int(store.find_consume_queue("T", 0).entry(7)["offset"])
    mf = store.commitlog.queue.find(phys)
    at = phys - mf.file_from_offset + fmt.OFF_BODYLEN
    (body_len,) = fmt._I32.unpack_from(mf.view, at)
    fmt._I32.pack_into(mf.view, at, (body_len + delta + 2**31) % 2**32 - 2**31)
    want = outcome(reference, reader, "T", 0, 0, 32, mx, None)
    assert want[0] == "error" and want[1] is fmt.CorruptRecordError and f"offset {phys}" in want[2]
    assert outcome(compiled, reader, "T", 0, 0, 32, mx, None) == want
    decode = compiled_or_skip("_consumer", "decode_batch")
    rng = reader.consume_queue("T", 0).entries(0, 32, mx)
    with pytest.raises(fmt.CorruptRecordError, match=f"offset {phys}"):
        decode(reader.commitlog, "T", 0, rng)
