"""Compiled ``decode_send_batch`` (the broker's decode of a SEND_BATCH frame) against the
reference: the same SendBatch for valid frames, the same CorruptFrameError text for damaged
frames and garbage, whatever buffer type the frame arrives in."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.codec import frames as P
from shmq.codec import record as fmt
from tests.speedups.conftest import compiled_or_skip


@pytest.fixture(scope="module")
def decoders():
    return compiled_or_skip("_put", "decode_send_batch"), _speedups.reference("_put", "decode_send_batch")


def test_layout_constants_match_the_reference() -> None:
    compiled_or_skip("_put", "decode_send_batch")
    import shmq._speedups._put as c

    assert {"_BATCH.size": P._BATCH.size, "MAX_TOPIC_LENGTH": fmt.MAX_TOPIC_LENGTH} == c.LAYOUT


def test_the_codec_uses_the_compiled_decoder_unless_disabled() -> None:
    assert (P.decode_send_batch is compiled_or_skip("_put", "decode_send_batch")) != _speedups.DISABLED


def _outcome(fn, payload):
    try:
        b = fn(payload)
    except Exception as e:  # noqa: BLE001 - the type and message are what is compared
        return ("error", type(e), str(e))
    e = b.batch
    arrays = [e.starts, e.tags_codes, e.key_hashes, e.key_records]
    assert all(a.dtype == np.int64 for a in arrays)
    assert type(e.buf) is memoryview and type(e.buf.obj) is bytes  # a private copy (MessageStore._private)
    return (b.req_id, b.enqueue_ns, b.queue_id, b.flags, b.topic, bytes(e.buf), *(a.tolist() for a in arrays))


def _same(decoders, payload) -> None:
    compiled, reference = decoders
    want = _outcome(reference, payload)
    for kind in (bytes, bytearray, memoryview):
        assert _outcome(compiled, kind(payload)) == want


def _frame(draw) -> bytes:
    topic = draw(st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20))
    sizes = draw(st.lists(st.integers(fmt.FIXED_OVERHEAD, 300), min_size=1, max_size=8))
    buf = draw(st.binary(min_size=sum(sizes), max_size=sum(sizes)))
    starts = np.cumsum([0, *sizes[:-1]]).astype(np.int64)
    n = len(sizes)
    keys = draw(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(0, n - 1)), max_size=10))
    batch = fmt.EncodedBatch(
        buf,
        starts,
        np.array(draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)), np.int64),
        np.array([k for k, _ in keys], np.int64),
        np.array([r for _, r in keys], np.int64),
    )
    return P.encode_send_batch(
        draw(st.integers(0, 2**64 - 1)),
        draw(st.integers(-(2**63), 2**63 - 1)),
        draw(st.integers(-(2**31), 2**31 - 1)),
        draw(st.integers(0, 2**32 - 1)),
        topic,
        batch,
    )


@st.composite
def frames(draw):
    return _frame(draw)


@settings(max_examples=300, deadline=None)
@given(frames())
def test_valid_frames_decode_the_same(decoders, payload) -> None:
    _same(decoders, payload)
    assert _outcome(decoders[0], payload)[0] != "error"


@settings(max_examples=600, deadline=None)
@given(
    frames(),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    st.integers(-40, 40),
)
def test_damaged_frames_fail_the_same(decoders, payload, flips, resize) -> None:
    raw = bytearray(payload)
    for at, value in flips:
        raw[at % len(raw)] = value
    raw = raw[: len(raw) + resize] if resize < 0 else raw + bytes(resize)
    _same(decoders, bytes(raw))


@settings(max_examples=600, deadline=None)
@given(st.binary(max_size=400))
def test_garbage_fails_the_same(decoders, payload) -> None:
    _same(decoders, payload)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 200),
    st.binary(max_size=200),
)
def test_header_fields_of_any_size_fail_the_same(decoders, count, n, blen, t, tail) -> None:
    """Counts near 2**32 must not overflow the size check or read past the copy."""
    head = struct.pack("<QqiIHHIII", 1, 2, 3, 4, t, 0, count, n, blen)
    _same(decoders, head + tail)


@pytest.mark.parametrize(
    "starts,key_records,why",
    [
        ([1, 100], [], "starts"),
        ([0, 0], [], "starts"),
        ([0, 50, 40], [], "starts"),
        ([0, 500], [], "starts"),
        ([0, -(2**63) + 1], [], "starts"),
        ([0, 50], [2], "key record"),
        ([0, 50], [-1], "key record"),
        ([5, 50], [9], "key record"),
    ],
)
def test_each_check_fails_the_same(decoders, starts, key_records, why) -> None:
    count, n, blen = len(starts), len(key_records), 200
    head = struct.pack("<QqiIHHIII", 1, 2, 3, 4, 5, 0, count, n, blen) + b"Topic\0\0\0"
    arrays = np.array(starts + [7] * count + [11] * n + key_records, "<i8").tobytes()
    payload = head + arrays + bytes(blen)
    got = _outcome(decoders[0], payload)
    assert got[0] == "error" and why in got[2]
    _same(decoders, payload)


def test_non_ascii_topic_fails_the_same(decoders) -> None:
    head = struct.pack("<QqiIHHIII", 1, 2, 3, 4, 2, 0, 1, 0, 100) + "é".encode() + bytes(6)
    _same(decoders, head + np.array([0, 0], "<i8").tobytes() + bytes(100))


# ---------------------------------------------------------------------------- the lane's reads
# The broker's SEND_BATCH lane reads a frame as send_batch_head + send_batch_arrays: together
# they must accept exactly the frames decode_send_batch accepts, with the same fields and columns.


def _lane_reads(arrays_fn, payload):
    head = P.send_batch_head(memoryview(payload))
    if head is None:
        return None
    a = arrays_fn(memoryview(payload), len(head[4]), head[5], head[6])
    return None if a is None else (head, a.dtype == np.int64, a.tolist())


def _same_as_decode(payload) -> None:
    compiled = compiled_or_skip("_put", "send_batch_arrays")
    want = _lane_reads(_speedups.reference("_put", "send_batch_arrays"), payload)
    assert _lane_reads(compiled, payload) == want
    got = _outcome(_speedups.reference("_put", "decode_send_batch"), payload)
    if got[0] == "error":
        assert want is None
    else:
        req_id, enq, qid, flags, topic, buf, starts, tags, keys, key_records = got
        count, n = len(starts), len(keys)
        assert want == ((req_id, enq, qid, flags, topic, count, n, len(buf)), True, starts + tags + keys + key_records)


@settings(max_examples=300, deadline=None)
@given(frames())
def test_lane_reads_valid_frames_as_decode(payload) -> None:
    _same_as_decode(payload)


@settings(max_examples=600, deadline=None)
@given(
    frames(),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    st.integers(-40, 40),
)
def test_lane_reads_damaged_frames_as_decode(payload, flips, resize) -> None:
    raw = bytearray(payload)
    for at, value in flips:
        raw[at % len(raw)] = value
    raw = raw[: len(raw) + resize] if resize < 0 else raw + bytes(resize)
    _same_as_decode(bytes(raw))


@pytest.mark.parametrize(
    "starts,key_records",
    [([1, 100], []), ([0, 0], []), ([0, 50, 40], []), ([0, 500], []), ([0, -(2**63) + 1], []), ([0, 50], [2])],
)
def test_lane_reads_refuse_each_check(starts, key_records) -> None:
    count, n, blen = len(starts), len(key_records), 200
    head = struct.pack("<QqiIHHIII", 1, 2, 3, 4, 5, 0, count, n, blen) + b"Topic\0\0\0"
    arrays = np.array(starts + [7] * count + [11] * n + key_records, "<i8").tobytes()
    _same_as_decode(head + arrays + bytes(blen))
