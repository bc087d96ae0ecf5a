"""Compiled ``records_pass`` (the put hook's checks of a batch) against the reference: the same
verdict on valid, damaged and random records, and so the same refusals through RecordCheck."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.config import BrokerConfig
from shmq.store.write import hooks
from tests.speedups.conftest import compiled_or_skip


@pytest.fixture(scope="module")
def pair():
    return compiled_or_skip("_store", "records_pass"), _speedups.reference("_store", "records_pass")


def test_the_hook_uses_the_compiled_function_unless_disabled() -> None:
    assert (hooks.records_pass is compiled_or_skip("_store", "records_pass")) != _speedups.DISABLED


def _batch(topics: list[str], ids: list[int], bodies: list[bytes], props: list[bool]) -> tuple[bytearray, np.ndarray]:
    recs = [
        fmt.encode_message(topics[i], body, properties={"TAGS": "t" * len(body)} if p else None)
        for i, body, p in zip(ids, bodies, props)
    ]
    return bytearray(b"".join(recs)), np.cumsum([0] + [len(r) for r in recs[:-1]]).astype(np.int64)


def _args(buf, starts, ids, topics, max_body, max_record):
    sizes = np.empty(len(starts), np.int64)
    sizes[:-1] = starts[1:] - starts[:-1]
    sizes[-1] = len(buf) - starts[-1]
    header = fmt.gather_header_fields(np.frombuffer(bytes(buf), np.uint8), starts)
    return bytes(buf), starts, sizes, header, np.array(ids, np.int64), topics, max_body, max_record


names = st.from_regex(r"[a-zA-Z0-9_%|-]{1,12}", fullmatch=True)
batches = st.lists(names, min_size=1, max_size=4, unique=True).flatmap(
    lambda topics: st.tuples(
        st.just(topics),
        st.lists(
            st.tuples(st.integers(0, len(topics) - 1), st.binary(max_size=60), st.booleans()), min_size=1, max_size=30
        ),
    )
)


@settings(max_examples=500, deadline=None)
@given(
    batches,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.integers(0, 80),
    st.sampled_from([-1, 150, 400]),
    st.integers(-1, 3),
)
def test_damaged_batches_get_the_same_verdict(pair, batch, flips, max_body, max_record, renamed) -> None:
    compiled, reference = pair
    topics, rows = batch
    ids = [i for i, _, _ in rows]
    buf, starts = _batch(topics, ids, [b for _, b, _ in rows], [p for _, _, p in rows])
    for where, value in flips:
        buf[where % len(buf)] = value
    if 0 <= renamed < len(topics):  # a record's topic field that names another topic
        topics = [*topics[:renamed], topics[renamed] + "x", *topics[renamed + 1 :]]
    args = _args(buf, starts, ids, topics, max_body, max_record)
    assert compiled(*args) == reference(*args)
    if not flips and renamed < 0 and max_record < 0:
        assert compiled(*args) == (max_body >= 60 or all(len(b) <= max_body for _, b, _ in rows))


@settings(max_examples=300, deadline=None)
@given(
    st.binary(min_size=0, max_size=600),
    st.lists(st.integers(0, 700), min_size=1, max_size=6, unique=True),
    st.lists(names, min_size=1, max_size=3),
)
def test_garbage_gets_the_same_verdict(pair, data, at, topics) -> None:
    compiled, reference = pair
    starts = np.array(sorted(a for a in at if a + 88 <= len(data)) or [0], np.int64)
    if starts[0] + 88 > len(data):
        return
    ids = [i % len(topics) for i in range(len(starts))]
    args = _args(bytearray(data), starts, ids, topics, 1000, -1)
    assert compiled(*args) == reference(*args)


def test_unusual_arguments_go_to_the_reference(pair) -> None:
    compiled, reference = pair
    buf, starts = _batch(["A", "B"], [0, 1, 0], [b"1", b"22", b"333"], [True, False, True])
    args = list(_args(buf, starts, [0, 1, 0], ["A", "B"], 100, -1))
    for i, other in ((1, starts.astype(np.int32)), (4, np.array([0, 1, 0], np.int32)), (5, ["A", "B" * 300])):
        changed = list(args)
        changed[i] = other
        assert compiled(*changed) == reference(*changed)
    changed = list(args)
    changed[4] = np.array([0, 5, 0], np.int64)
    with pytest.raises(IndexError):
        compiled(*changed)


def test_refusals_through_the_hook_are_the_same(pair, monkeypatch) -> None:
    compiled, reference = pair
    buf, starts = _batch(["A", "B"], [0, 1, 0, 1], [b"1", b"x" * 50, b"333", b""], [True, False, True, False])
    buf[starts[2] + fmt.OFF_MAGIC] ^= 1
    seen = []
    for fn in (compiled, reference):
        monkeypatch.setattr(hooks, "records_pass", fn)
        b = fmt.EncodedBatch(bytes(buf), starts, np.zeros(4, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        req = hooks.PutRequest(b, ["A", "B"], np.array([0, 1, 0, 1], np.int64), 0)
        hooks.RecordCheck(BrokerConfig.load({"maxMessageSize": 40})).before_put(req)
        seen.append((req.refused.tolist(), req.refusals))
    assert seen[0] == seen[1]
    assert seen[0][0] == [0, 2, 1, 0]
