"""Compiled ``encode_mixed`` (the producer's SEND_MULTI records) against the reference: for the
same messages, fixed UNIQ_KEY prefix and counter and timestamps, identical topic table, record
bytes, starts, tag codes, key hashes, UNIQ_KEYs, the same UNIQ_KEYs taken, and identical errors
(type and message) for messages the reference refuses."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.client.producer import encoder as E
from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.model.message import Message
from tests.speedups.conftest import compiled_or_skip


class FixedUniq(ids.UniqKeyGenerator):
    """UNIQ_KEYs from a fixed prefix (no clock), so both encoders take the same ones."""

    def __init__(self, first: int) -> None:
        super().__init__()
        self._counter = first

    def reserve(self, count: int) -> tuple[bytes, int]:
        with self._lock:
            first = self._counter + 1
            self._counter = (self._counter + count) & 0xFFFFFFFF
        return b"0000ABCD12345678650F0A1B", first


@pytest.fixture(scope="module")
def pair():
    return compiled_or_skip("_mixed", "encode_mixed"), _speedups.reference("_mixed", "encode_mixed")


def _encoder(first: int, compress_over: int | None) -> E.MessageEncoder:
    enc = E.MessageEncoder(max_message_size=64 * 1024, compress_over=compress_over)
    enc.uniq = FixedUniq(first)
    return enc


def _outcome(fn, msgs, first: int, compress_over: int | None, born: tuple) -> tuple:
    enc = _encoder(first, compress_over)
    try:
        r = fn(enc, msgs, *born)
    except Exception as e:  # noqa: BLE001 - the error itself is what is compared
        return ("error", type(e), str(e), enc.uniq._counter)
    b = r.batch
    return (
        "ok",
        r.topics_b,
        r.topic_idx.dtype,
        r.topic_idx.tolist(),
        bytes(b.buf),
        b.starts.dtype,
        b.starts.tolist(),
        b.tags_codes.dtype,
        b.tags_codes.tolist(),
        b.key_hashes.dtype,
        b.key_hashes.tolist(),
        b.key_records.dtype,
        b.key_records.tolist(),
        r.uniq_keys,
        enc.uniq._counter,
    )


def test_layout_constants_match_the_reference() -> None:
    compiled_or_skip("_mixed", "encode_mixed")
    import shmq._speedups._mixed as c

    for name, value in c.LAYOUT.items():
        assert {"UNIQ_LEN": E._UNIQ_LEN, "UNIQ_COUNTER": E._UNIQ_COUNTER}.get(
            name, getattr(fmt, name, None)
        ) == value, name


def test_the_encoder_uses_the_compiled_function_unless_disabled() -> None:
    fn = compiled_or_skip("_mixed", "encode_mixed")
    assert (E.encode_mixed is fn) != _speedups.DISABLED


TOPICS = st.sampled_from(["T0", "T1", "Topic_2", "%RETRY%g", "a" * 127, "bad topic", "", "T\u00e9"])
TEXT = st.one_of(st.none(), st.sampled_from(["", "TagA", "k1 k2", "\u00e9t\u00e9", "a\x01b"]), st.text(max_size=6))


@st.composite
def messages(draw) -> Message:
    body = draw(
        st.one_of(
            st.binary(max_size=300),
            st.binary(min_size=5000, max_size=5100),
            st.just(bytearray(b"ba")),
            st.just(memoryview(b"mv")),
            st.just("text"),
        )
    )
    flag = draw(st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**64), 2**64), st.just(True)))
    m = Message(
        draw(TOPICS),
        b"",
        draw(TEXT),
        draw(st.one_of(TEXT, st.just(["k1", "k2"]))),
        draw(st.one_of(st.none(), st.just({}), st.just({"p": "v"}))),
        0,
        draw(st.sampled_from([0, 0, 0, 3])),
    )
    m.body = body  # type: ignore[assignment]  # hostile values on purpose
    m.flag = flag
    return m


@settings(max_examples=400, deadline=None)
@given(
    st.lists(messages(), max_size=12),
    st.integers(0, 2**32 - 1),
    st.sampled_from([None, 4096]),
    st.sampled_from([(0, 0), (1_700_000_000_000, 0x7F000001_0000_1F90), (2**63, 0), (-1, -(2**63))]),
)
def test_compiled_encode_mixed_matches_the_reference(pair, msgs, first, compress_over, born) -> None:
    compiled, reference = pair
    assert _outcome(compiled, msgs, first, compress_over, born) == _outcome(reference, msgs, first, compress_over, born)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 40),
            st.binary(max_size=200),
            st.sampled_from([None, "TagA", "TagB"]),
            st.sampled_from([None, "", "order-1", "a b c"]),
            st.integers(-(2**63), 2**63 - 1),
        ),
        min_size=1,
        max_size=300,
    ),
    st.integers(0, 2**32 - 1),
)
def test_the_usual_frames_match_the_reference(pair, rows, first) -> None:
    """Many topics, valid messages (what the accumulator sends): the compiled path itself, not its fallback."""
    compiled, reference = pair
    msgs = [Message(f"BenchQ_{t}", body, tags, keys, None, flag) for t, body, tags, keys, flag in rows]
    born = (1_700_000_000_000, 123)
    out = _outcome(compiled, msgs, first, 4096, born)
    assert out[0] == "ok"
    assert out == _outcome(reference, msgs, first, 4096, born)


def test_a_subclass_or_odd_message_takes_the_reference(pair) -> None:
    compiled, reference = pair

    @dataclasses.dataclass(init=False)
    class Sub(Message):
        pass

    msgs = [Message("T", b"a"), Sub("T", b"b"), Message("U", b"c", properties={"x": "y"})]
    assert _outcome(compiled, msgs, 5, 4096, (1, 2)) == _outcome(reference, msgs, 5, 4096, (1, 2))
    assert _outcome(compiled, [], 5, 4096, (1, 2)) == _outcome(reference, [], 5, 4096, (1, 2))
    bad = [Message("T", b"a"), object()]
    assert _outcome(compiled, bad, 5, 4096, (1, 2)) == _outcome(reference, bad, 5, 4096, (1, 2))


def test_records_decode_as_the_messages(pair) -> None:
    compiled, _ = pair
    msgs = [
        Message(f"T{i % 3}", bytes([i]) * i, "tg" if i % 2 else None, f"key{i}" if i % 4 == 0 else None)
        for i in range(20)
    ]
    r = compiled(_encoder(0, 4096), msgs, 1234, 5678)
    for i, m in enumerate(msgs):
        end = r.batch.starts[i + 1] if i + 1 < len(msgs) else len(r.batch.buf)
        rec = fmt.decode_record(bytes(r.batch.buf[r.batch.starts[i] : end]))
        assert (rec.topic, rec.body, rec.born_timestamp) == (m.topic, m.body, 1234)
        assert rec.properties[fmt.PROPERTY_UNIQ_KEY] == r.uniq_keys[i]
    assert np.array_equal(r.topic_idx, [i % 3 for i in range(20)])
