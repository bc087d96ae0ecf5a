"""Compiled ``decode_batch`` (consume-queue range -> columns) against the reference.

The same store bytes give the same columns, the same buffers, the same ``missing`` and
``next_offset``; garbage and torn entries or records give the same columns or the same error.
Store batches cover several segments, cleaned-up heads, compressed bodies, records without
properties, tag filters with hash collisions and properties that do not start with TAGS.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.filter.sql import SqlFilter
from shmq.filter.tags import TagFilter
from shmq.store.read import columns
from shmq.store.read.reader import EntryRange
from shmq.store.write.hooks import PutRequest
from tests.client.consumer.conftest import delete_commitlog_head, put_many, reader, store  # noqa: F401 - fixtures
from tests.speedups.conftest import compiled_or_skip
from tests.speedups.test_consumer_messages import COLUMNS

COLLIDING = ("Tag29685295", "Tag32060020")  # one tags_code


@pytest.fixture(scope="module")
def pair():
    return compiled_or_skip("_consumer", "decode_batch"), _speedups.reference("_consumer", "decode_batch")


def outcome(fn, *args) -> tuple:
    try:
        b = fn(*args)
    except Exception as e:  # noqa: BLE001 - the point is comparing whatever is raised
        return ("error", type(e), str(e))
    cols = {name: getattr(b, name) for name in COLUMNS}
    assert all(c.dtype == np.int64 and c.flags.c_contiguous for c in cols.values())
    return (
        "ok",
        b.topic,
        b.queue_id,
        b.next_offset,
        b.missing,
        {k: c.tolist() for k, c in cols.items()},
        [id(x) for x in b.buffers],
    )


def test_the_read_path_uses_the_compiled_function_unless_disabled() -> None:
    fn = compiled_or_skip("_consumer", "decode_batch")
    assert (columns.decode_batch is fn) != _speedups.DISABLED


def _put_mixed(store) -> None:
    """Tags (colliding ones too), no properties, properties not starting with TAGS, compressed bodies."""
    recs = []
    for i in range(240):
        kind = i % 6
        if kind == 0:
            props = None
        elif kind == 1:
            props = {"KEYS": f"k{i}", "TAGS": "TagA"}  # TAGS not first: decoded one by one
        elif kind == 2:
            props = fmt.message_properties(tags=COLLIDING[i % 2], uniq_key=f"{i:032X}")
        else:
            props = fmt.message_properties(tags=("TagA", "TagB", "TagC")[i % 3], keys="a b")
        body = bytes([i % 256]) * (40 + i * 13 % 700)
        sysflag = fmt.FLAG_COMPRESSED if i % 11 == 0 else 0
        recs.append(
            fmt.encode_message("T", body, properties=props, sysflag=sysflag, reconsume_times=i % 4, born_host=i)
        )
        if len(recs) == 12:
            store.put(PutRequest.of_records("T", 0, recs))
            recs = []


EXPRESSIONS = [
    None,
    "*",
    "TagA",
    "TagB || TagC",
    "TagA || TagB || TagC",
    COLLIDING[0],
    COLLIDING[1],
    " || ".join(COLLIDING),
    "Nothing",
]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_store_ranges_decode_to_the_same_columns(pair, store, reader, expression) -> None:
    compiled, reference = pair
    _put_mixed(store)
    expr = None if expression is None else TagFilter(expression)
    mx = store.get_max_offset_in_queue("T", 0)
    cq = reader.consume_queue("T", 0)
    for step in (1, 5, 64, 1000):
        offset = 0
        while offset < mx:
            rng = cq.entries(offset, step, mx)
            got = outcome(compiled, reader.commitlog, "T", 0, rng, expr)
            assert got == outcome(reference, reader.commitlog, "T", 0, rng, expr)
            offset = rng.next_offset


def test_cleaned_up_records_count_as_missing_the_same(pair, store, reader) -> None:
    compiled, reference = pair
    put_many(store, "T", 0, 600, body_size=300)
    mx = store.get_max_offset_in_queue("T", 0)
    rng = reader.consume_queue("T", 0).entries(0, 1000, mx)
    delete_commitlog_head(store, 2)
    reader.refresh()
    for expr in (None, TagFilter("TagA")):
        got = outcome(compiled, reader.commitlog, "T", 0, rng, expr)
        assert got == outcome(reference, reader.commitlog, "T", 0, rng, expr)
        assert got[4] > 0  # missing


def test_sql_filters_and_skips_go_to_the_reference(pair, store, reader) -> None:
    compiled, reference = pair
    put_many(store, "T", 0, 50)
    rng = reader.consume_queue("T", 0).entries(0, 100, store.get_max_offset_in_queue("T", 0))
    sql = SqlFilter("TAGS = 'TagA'")
    skip = np.zeros(len(rng.entries), bool)
    skip[::3] = True
    for expr, sk in ((sql, None), (TagFilter("TagB"), skip)):
        assert outcome(compiled, reader.commitlog, "T", 0, rng, expr, sk) == outcome(
            reference, reader.commitlog, "T", 0, rng, expr, sk
        )


# --------------------------------------------------------------------------- garbage


@dataclass
class FakeSegment:
    start: int
    array: np.ndarray

    @property
    def size(self) -> int:
        return len(self.array)

    @property
    def end(self) -> int:
        return self.start + self.size


class FakeFiles:
    def __init__(self, segments: list[FakeSegment]) -> None:
        self.segments = segments
        self.refreshed = 0

    def refresh(self) -> None:
        self.refreshed += 1

    def starts(self) -> np.ndarray:
        return np.asarray([s.start for s in self.segments], dtype=np.int64)


class FakeLog:
    def __init__(self, segments: list[FakeSegment]) -> None:
        self.files = FakeFiles(segments)


def _record(phys: int, body: bytes, tags: str | None) -> bytes:
    raw = bytearray(fmt.encode_message("T", body, properties=fmt.message_properties(tags=tags)))
    struct.pack_into(">q", raw, fmt.OFF_PHYSICALOFFSET, phys)
    struct.pack_into(">q", raw, fmt.OFF_STORETIMESTAMP, 5)
    return bytes(raw)


@st.composite
def damaged_store(draw):
    """Two segments of real records, then bytes flipped in records and entries, and garbage entries."""
    tags = st.sampled_from([None, "TagA", "TagB", COLLIDING[0], COLLIDING[1]])
    segments, entries = [], []
    start = draw(st.sampled_from([0, 4096]))
    for _ in range(draw(st.integers(1, 2))):
        buf, pos = bytearray(), 0
        for _ in range(draw(st.integers(0, 6))):
            rec = _record(start + pos, draw(st.binary(max_size=60)), draw(tags))
            entries.append((start + pos, len(rec), fmt.tags_code(_tag_of(rec))))
            buf += rec
            pos += len(rec)
        buf += bytes(draw(st.integers(0, 100)))
        for where, value in draw(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3)):
            if buf:
                buf[where % len(buf)] = value
        segments.append(FakeSegment(start, np.frombuffer(bytes(buf), np.uint8)))
        start += max(len(buf), 1)
    for _ in range(draw(st.integers(0, 3))):  # garbage entries anywhere in the list
        entry = (
            draw(st.integers(-(2**40), 2**40)),
            draw(st.sampled_from([0, 1, 91, 150, 0x7FFFFFFF, -5])),
            draw(st.integers(-(2**63), 2**63 - 1)),
        )
        entries.insert(draw(st.integers(0, len(entries))), entry)
    arr = np.array(entries, dtype=[("offset", np.int64), ("size", np.int32), ("tags_code", np.int64)])
    cq = np.empty(len(entries), fmt.CQ_DTYPE)
    for name in ("offset", "size", "tags_code"):
        cq[name] = arr[name]
    raw = bytearray(cq.tobytes())
    for where, value in draw(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=2)):
        if raw:
            raw[where % len(raw)] = value
    return FakeLog(segments), EntryRange(draw(st.integers(0, 1000)), np.frombuffer(bytes(raw), fmt.CQ_DTYPE))


def _tag_of(rec: bytes) -> str | None:
    return fmt.decode_record(rec).properties.get(fmt.PROPERTY_TAGS)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_store(), st.sampled_from(EXPRESSIONS))
def test_damaged_entries_and_records_decode_the_same_or_fail_the_same(pair, data, expression) -> None:
    compiled, reference = pair
    log, rng = data
    expr = None if expression is None else TagFilter(expression)
    assert outcome(compiled, log, "T", 3, rng, expr) == outcome(reference, log, "T", 3, rng, expr)


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_healthy_ranges_are_decoded_by_the_compiled_code(pair, store, reader, monkeypatch, expression) -> None:
    """The reference is for what the fast path does not decide; a healthy store never needs it."""
    compiled, reference = pair
    _put_mixed(store)
    expr = None if expression is None else TagFilter(expression)
    rng = reader.consume_queue("T", 0).entries(0, 1000, store.get_max_offset_in_queue("T", 0))
    want = outcome(reference, reader.commitlog, "T", 0, rng, expr)

    def no_fallback(*args):
        raise AssertionError("the compiled decode_batch fell back to the reference")

    monkeypatch.setitem(_speedups._references, "_consumer.decode_batch", no_fallback)
    assert outcome(compiled, reader.commitlog, "T", 0, rng, expr) == want


class ClosedSegment:
    """A segment whose mapping was closed (``ReadOnlySegment.close`` sets its array to None)."""

    def __init__(self, start: int, size: int) -> None:
        self.start, self.size, self.array = start, size, None

    @property
    def end(self) -> int:
        return self.start + self.size


def test_a_closed_segment_fails_as_the_reference(pair) -> None:
    compiled, reference = pair
    rec = _record(0, b"body", "TagA")
    cq = np.zeros(1, fmt.CQ_DTYPE)
    cq["offset"], cq["size"], cq["tags_code"] = 0, len(rec), fmt.tags_code("TagA")
    log = FakeLog([ClosedSegment(0, len(rec))])  # type: ignore[list-item]
    got = outcome(compiled, log, "T", 0, EntryRange(0, cq), None)
    assert got == outcome(reference, log, "T", 0, EntryRange(0, cq), None)
    assert got[0] == "error"
