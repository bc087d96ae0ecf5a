"""Compiled ``batch_messages`` (pulled columns -> MessageExt) against the reference.

Same store bytes in, the same objects out: every slot of every MessageExt equal (the lazy ones
still unmade), and the same exception for columns that do not fit their buffers or bodies that
do not decompress. Batches come from a real store (several segments, compressed bodies, tag
filters) and from hypothesis (garbage buffers and columns, torn positions and lengths).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.filter.tags import TagFilter
from shmq.model import pulled
from shmq.model.message import UNSET
from shmq.model.message_ext import MessageExt
from shmq.model.pulled import PulledBatch
from shmq.store.read.columns import read_batch
from shmq.store.write.hooks import PutRequest
from tests.client.consumer.conftest import put_many, reader, store  # noqa: F401 - fixtures
from tests.speedups.conftest import compiled_or_skip

COLUMNS = (
    "queue_offset",
    "commit_log_offset",
    "size",
    "store_timestamp",
    "born_timestamp",
    "sysflag",
    "reconsume_times",
    "store_host",
    "body_pos",
    "body_len",
    "props_pos",
    "props_len",
    "segment",
)


@pytest.fixture(scope="module")
def pair():
    return compiled_or_skip("_consumer", "batch_messages"), _speedups.reference("_consumer", "batch_messages")


def slots(m: MessageExt) -> tuple:
    """Every slot as stored (lazy fields not made by reading them), and the type."""
    return (type(m), *(object.__getattribute__(m, s) for s in MessageExt.__slots__))


def outcome(fn, batch: PulledBatch) -> tuple:
    try:
        return ("ok", [slots(m) for m in fn(batch)])
    except Exception as e:  # noqa: BLE001 - the point is comparing whatever is raised
        return ("error", type(e), str(e))


def test_layout_constants_match_the_reference() -> None:
    compiled_or_skip("_consumer", "batch_messages")
    import shmq._speedups._consumer as c
    from shmq.store.consume_queue import BLANK_SIZE

    for name, value in c.LAYOUT.items():
        assert (BLANK_SIZE if name == "BLANK_SIZE" else getattr(fmt, name)) == value, name
    assert set(c.SLOTS) == set(MessageExt.__slots__)


def test_columns_use_the_compiled_function_unless_disabled() -> None:
    fn = compiled_or_skip("_consumer", "batch_messages")
    assert (pulled.batch_messages is fn) != _speedups.DISABLED


def _put_mixed(store, n: int) -> list[bytes]:
    """Records with and without properties, some compressed, over several 64 KiB segments."""
    bodies = []
    for a in range(0, n, 16):
        recs = []
        for i in range(a, min(n, a + 16)):
            body = f"{i}:".encode().ljust(50 + i * 7 % 900, b"z")
            bodies.append(body)
            props = fmt.message_properties(
                tags=("TagA", "TagB", None)[i % 3],
                keys=f"k{i} j{i}" if i % 4 else None,
                uniq_key=f"{i:032X}" if i % 5 else None,
                user={"u": "\u00e9" * (i % 3)},
            )
            if i % 7 == 0:
                recs.append(
                    fmt.encode_message(
                        "T", zlib.compress(body), properties=props, sysflag=fmt.FLAG_COMPRESSED, reconsume_times=i % 3
                    )
                )
            else:
                recs.append(fmt.encode_message("T", body, properties=props, born_host=i))
        store.put(PutRequest.of_records("T", 1, recs))
    return bodies


@pytest.mark.parametrize("expression", ["*", "TagA", "TagA || TagB"])
def test_store_batches_build_identical_messages(pair, store, reader, expression) -> None:
    compiled, reference = pair
    bodies = _put_mixed(store, 300)
    mx = store.get_max_offset_in_queue("T", 1)
    for step in (1, 7, 32, 300):
        offset = 0
        while offset < mx:
            b = read_batch(reader, "T", 1, offset, step, mx, TagFilter(expression))
            got, want = outcome(compiled, b), outcome(reference, b)
            assert got == want
            offset = b.next_offset
    everything = read_batch(reader, "T", 1, 0, 1000, mx)
    assert len(everything.buffers) > 1
    msgs = compiled(everything)
    assert [m.body for m in msgs] == bodies
    assert msgs == reference(everything)  # ByValue equality makes every lazy field: they agree too
    assert all(object.__getattribute__(m, "_properties") is not UNSET for m in msgs)


def test_built_messages_behave_like_the_reference(pair, store, reader) -> None:
    compiled, reference = pair
    put_many(store, "T", 0, 10)
    b = read_batch(reader, "T", 0, 0, 10, store.get_max_offset_in_queue("T", 0))
    m, r = compiled(b)[3], reference(b)[3]
    assert (m.tags, m.keys, m.msg_id, m.offset_msg_id, m.properties) == (
        r.tags,
        r.keys,
        r.msg_id,
        r.offset_msg_id,
        r.properties,
    )
    again = m.redelivered()
    assert again.reconsume_times == m.reconsume_times + 1 and again.body == m.body
    m.tags = "X"
    assert m.tags == "X" and m != r


def test_an_empty_batch(pair) -> None:
    compiled, reference = pair
    e = np.empty(0, np.int64)
    b = PulledBatch("T", 0, 5, 0, *([e] * 13), [])
    assert compiled(b) == reference(b) == []


def _random_batch(data: st.DataObject) -> PulledBatch:
    """A batch whose columns point anywhere (in, across and out of its buffers), some compressed."""
    nbuf = data.draw(st.integers(0, 3))
    buffers = []
    for _ in range(nbuf):
        raw = data.draw(st.binary(max_size=300))
        if data.draw(st.booleans()):
            raw += zlib.compress(data.draw(st.binary(max_size=50)))
        arr = np.frombuffer(raw, np.uint8)
        buffers.append(arr)
    n = data.draw(st.integers(1, 8))
    small = st.integers(-5, 340)
    cols = {}
    for name in COLUMNS:
        if name == "segment":
            gen = st.integers(-1, max(nbuf, 1))
        elif name in ("body_pos", "body_len", "props_pos", "props_len"):
            gen = small
        elif name == "sysflag":
            gen = st.sampled_from([0, 1, 2, 3, 8])
        else:
            gen = st.integers(-(2**63), 2**63 - 1)
        cols[name] = np.array(data.draw(st.lists(gen, min_size=n, max_size=n)), np.int64)
    if data.draw(st.booleans()) and nbuf:  # a well-formed one: every position inside its buffer
        cols["segment"] = np.array(data.draw(st.lists(st.integers(0, nbuf - 1), min_size=n, max_size=n)), np.int64)
        for pos, length in (("body_pos", "body_len"), ("props_pos", "props_len")):
            lens = np.array([len(buffers[s]) for s in cols["segment"]], np.int64)
            cols[pos] = np.minimum(np.abs(cols[pos]), lens)
            cols[length] = np.minimum(np.abs(cols[length]), lens - cols[pos])
    return PulledBatch("T", data.draw(st.integers(0, 7)), 0, 0, **cols, buffers=buffers)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_garbage_columns_and_buffers_give_the_same_result_or_error(pair, data) -> None:
    compiled, reference = pair
    b = _random_batch(data)
    assert outcome(compiled, b) == outcome(reference, b)


def test_columns_of_another_type_fall_back_to_the_reference(pair) -> None:
    compiled, reference = pair
    buf = np.frombuffer(b"abcdefgh", np.uint8)
    cols = {name: np.zeros(2, np.int64) for name in COLUMNS}
    cols["body_len"] = np.array([3, 2], np.int32)  # not int64: the reference converts, so must the twin
    cols["props_len"] = np.array([1, 0], np.int64)[::1]
    b = PulledBatch("T", 0, 0, 0, **cols, buffers=[buf])
    assert outcome(compiled, b) == outcome(reference, b)
    b.segment = np.zeros(4, np.int64)[::2]  # not contiguous
    assert outcome(compiled, b) == outcome(reference, b)


def test_well_formed_batches_are_built_by_the_compiled_code(pair, store, reader, monkeypatch) -> None:
    """The fallback is for columns that do not fit; a store's batch never takes it."""
    compiled, reference = pair
    _put_mixed(store, 100)
    b = read_batch(reader, "T", 1, 0, 100, store.get_max_offset_in_queue("T", 1))
    want = [slots(m) for m in reference(b)]

    def no_fallback(batch):
        raise AssertionError("the compiled batch_messages fell back to the reference")

    monkeypatch.setitem(_speedups._references, "_consumer.batch_messages", no_fallback)
    assert [slots(m) for m in compiled(b)] == want


def test_a_closed_buffer_fails_as_the_reference(pair) -> None:
    compiled, reference = pair
    cols = {name: np.zeros(1, np.int64) for name in COLUMNS}
    b = PulledBatch("T", 0, 0, 0, **cols, buffers=[None])  # type: ignore[list-item]
    assert outcome(compiled, b) == outcome(reference, b)
    assert outcome(compiled, b)[0] == "error"
