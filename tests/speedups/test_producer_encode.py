"""Compiled ``pack_uniform`` (the producer's batch records) against the reference, and the
encoder with either: identical bytes, ids, hashes and errors for the same messages and fixed
UNIQ_KEY prefix, counter and timestamps."""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.client.producer import encoder as E
from shmq.codec import frames as P
from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.model.message import Message, MessageBatch
from tests.speedups.conftest import compiled_or_skip


@pytest.fixture(scope="module")
def pair():
    return compiled_or_skip("_producer", "pack_uniform"), _speedups.reference("_producer", "pack_uniform")


@pytest.fixture(scope="module")
def columns():
    return compiled_or_skip("_producer", "uniform_columns"), _speedups.reference("_producer", "uniform_columns")


# The encoder with the compiled twins and with the references (a name -> function map each).
COMPILED = "compiled"
REFERENCE = "reference"


def _fns(which: str) -> dict:
    get = _speedups.compiled if which == COMPILED else _speedups.reference
    return {name: get("_producer", name) for name in ("pack_uniform", "uniform_columns")}


def test_layout_constants_match_the_reference() -> None:
    compiled_or_skip("_producer", "pack_uniform")
    import shmq._speedups._producer as c

    reference = {"UNIQ_LEN": E._UNIQ_LEN, "UNIQ_COUNTER": E._UNIQ_COUNTER, "SEND_HEADER_BYTES": P.SEND_HEADER_BYTES}
    for name, value in c.LAYOUT.items():
        assert reference.get(name, getattr(fmt, name, None)) == value, name


def test_the_encoder_uses_the_compiled_functions_unless_disabled() -> None:
    for name in ("pack_uniform", "uniform_columns"):
        fn = compiled_or_skip("_producer", name)
        assert (getattr(E, name) is fn) != _speedups.DISABLED


text = st.text(
    st.characters(min_codepoint=32, blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=12
)
topics = st.text(st.sampled_from("abcXYZ019_-%|"), min_size=1, max_size=fmt.MAX_TOPIC_LENGTH)
bodies = st.lists(
    st.binary(max_size=300).flatmap(lambda b: st.sampled_from([b, bytearray(b), memoryview(b)])),
    min_size=1,
    max_size=40,
)
prefixes = st.binary(min_size=12, max_size=12).map(lambda b: b.hex().upper().encode())
int32s = st.integers(-(2**31), 2**31 - 1)


def _same(a, b) -> None:
    assert a[0] == b[0]
    for x, y in zip(a[1:], b[1:]):
        assert x.dtype == y.dtype and x.shape == y.shape and (x == y).all()


@settings(max_examples=300, deadline=None)
@given(
    topics,
    bodies,
    st.none() | text,
    st.none() | text,
    prefixes,
    st.integers(0, 2**32 + 5),
    int32s | st.lists(int32s, min_size=40, max_size=40),
    st.booleans(),
    st.integers(0, 2**62),
    st.integers(-(2**63), 2**63 - 1),
)
def test_same_records_ids_and_hashes(
    pair, topic, bs, tags, keys, prefix, first, flags, with_sysflags, ts, host
) -> None:
    compiled, reference = pair
    topic_b = topic.encode()
    head, end = E._tail_parts(topic_b, tags or None, keys or None)
    n = len(bs)
    fl = flags if isinstance(flags, int) else np.array(flags[:n], np.int64)
    sysflags = np.arange(n, dtype=np.int64) % 2 if with_sysflags else None
    args = (topic_b, bs, head, end, prefix, first, fl, sysflags, ts, host)
    _same(compiled(*args), reference(*args))


def test_records_are_those_of_the_record_codec(pair) -> None:
    compiled, _ = pair
    head, end = E._tail_parts(b"T", "tg", "a b")
    buf, starts, uniq, hashes = compiled(b"T", [b"one", b"", b"three"], head, end, b"A" * 24, 0xFFFFFFFF, 7, None, 5, 6)
    assert uniq.tolist() == [b"A" * 24 + b"FFFFFFFF", b"A" * 24 + b"00000000", b"A" * 24 + b"00000001"]
    for i, body in enumerate([b"one", b"", b"three"]):
        key = uniq[i].decode()
        expected = fmt.encode_message(
            "T", body, flag=7, born_timestamp=5, born_host=6, properties=fmt.message_properties("tg", "a b", key)
        )
        assert buf[starts[i] : starts[i] + len(expected)] == expected
        assert hashes[i] == fmt.index_key_hash("T", key)


@pytest.mark.parametrize(
    "bad", [{"flags": 2**31}, {"flags": -(2**31) - 1}, {"bodies": [b"a", "text"]}, {"bodies": [b"a", 3]}, {"ts": 2**63}]
)
def test_same_errors(pair, bad) -> None:
    compiled, reference = pair
    kw = {"bodies": [b"a", b"b"], "flags": 0, "ts": 1}
    kw.update(bad)
    head, end = E._tail_parts(b"T", None, None)
    outcomes = []
    for fn in (compiled, reference):
        with pytest.raises(Exception) as e:
            fn(b"T", kw["bodies"], head, end, b"0" * 24, 1, kw["flags"], None, kw["ts"], 0)
        outcomes.append((type(e.value), str(e.value)))
    assert outcomes[0] == outcomes[1]


def _encoder(monkeypatch, which: str) -> E.MessageEncoder:
    """An encoder with a fixed UNIQ_KEY prefix, counter and clock, encoding with the ``which`` functions."""
    for name, fn in _fns(which).items():
        monkeypatch.setattr(E, name, fn)
    monkeypatch.setattr(ids.time, "time", lambda: 1_700_000_000.5)
    enc = E.MessageEncoder(max_message_size=1000, compress_over=500)
    enc.uniq._prefix = "00001234DEADBEEF"
    enc.uniq._counter = 0xFFFFFFF0
    return enc


def _encode(which: str, msgs):
    with pytest.MonkeyPatch.context() as monkeypatch:
        enc = _encoder(monkeypatch, which)
        try:
            out = enc.encode_batch(msgs, 1_700_000_000_123, 42)
        except Exception as e:  # noqa: BLE001 - the type and text are compared
            return type(e), str(e)
    b = out.batch
    return (
        out.topic_b,
        b.buf,
        b.starts.tolist(),
        b.tags_codes.tolist(),
        b.key_hashes.tolist(),
        b.key_records.tolist(),
        out.uniq_keys.tolist(),
    )


messages = st.builds(
    Message,
    st.just("Topic"),
    st.binary(max_size=700),
    tags=st.none() | st.just("t"),
    keys=st.none() | st.just("k1 k2"),
    flag=st.integers(0, 3),
)


class SubMessage(Message):
    pass


def _odd(m: Message, what: int) -> object:
    """``m`` changed in one way that takes a batch off the uniform path (or keeps it on)."""
    if what == 0:
        return SubMessage(m.topic, m.body, m.tags, m.keys)
    if what == 1:
        return Message("Other", m.body, m.tags, m.keys)
    changes = [
        {"body": bytearray(b"abc")},
        {"body": b"x" * 800},
        {"tags": "u"},
        {"keys": "k9"},
        {"properties": {"a": "b"}},
        {"properties": {}},
        {"delay_level": 3},
        {"delay": 1.0},
        {"deliver_at": 5.0},
        {"flag": True},
        {"flag": 1.0},
        {"flag": 2**63},
        {"flag": -(2**63)},
        {"flag": 2**40},
        {"body": "text"},
        {"tags": ["t"]},
        {"topic": 5},
    ]
    m2 = Message(m.topic, m.body, m.tags, m.keys)
    for k, v in changes[(what - 2) % len(changes)].items():
        setattr(m2, k, v)
    return m2


@settings(max_examples=400, deadline=None)
@given(
    st.lists(messages, min_size=1, max_size=10),
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 30)), max_size=2),
    st.booleans(),
)
def test_uniform_columns_are_identical(columns, msgs, changes, uniform) -> None:
    compiled, reference = columns
    if uniform:
        msgs = [dataclasses.replace(m, tags=msgs[0].tags, keys=msgs[0].keys) for m in msgs]
    batch: list = list(msgs)
    for where, what in changes:
        batch[where % len(batch)] = _odd(batch[where % len(batch)], what)
    a, b = compiled(batch, Message, 700), reference(batch, Message, 700)
    assert (a is None) == (b is None)
    if a is not None:
        assert a[0] == b[0] and a[1] == b[1] and a[2:4] == b[2:4]
        assert a[4].dtype == b[4].dtype and (a[4] == b[4]).all()
    assert compiled([], Message, 700) is reference([], Message, 700) is None
    assert _encode(COMPILED, batch) == _encode(REFERENCE, batch)


@settings(max_examples=150, deadline=None)
@given(st.lists(messages, min_size=1, max_size=20), st.booleans())
def test_encoder_batches_are_identical(pair, msgs, uniform) -> None:
    _compiled, _reference = pair
    if uniform:
        msgs = [dataclasses.replace(m, tags=msgs[0].tags, keys=msgs[0].keys) for m in msgs]
    assert _encode(COMPILED, msgs) == _encode(REFERENCE, msgs)
    batch = MessageBatch("Topic", [m.body for m in msgs], tags=msgs[0].tags, keys=msgs[0].keys, flag=msgs[0].flag)
    assert _encode(COMPILED, batch) == _encode(REFERENCE, batch)


@pytest.mark.parametrize(
    "msgs",
    [
        MessageBatch("Topic", [b"x" * 1001]),  # too large
        MessageBatch("bad topic", [b"x"]),
        MessageBatch("T" * 200, [b"x"]),
        MessageBatch("Topic", [b"x"], properties={"a\x01": "b"}),
        MessageBatch("Topic", [b"x"], properties={"a": 1}),  # type: ignore[dict-item]
        MessageBatch("Topic", [b"x", "text"]),  # type: ignore[list-item]
        MessageBatch("Topic", [b"x"], flag=2**40),
        [Message("Topic", b"x"), Message("Other", b"y")],
    ],
)
def test_encoder_errors_are_identical(pair, msgs) -> None:
    _compiled, _reference = pair
    got = _encode(COMPILED, msgs)
    assert got == _encode(REFERENCE, msgs)
    assert isinstance(got, tuple) and isinstance(got[0], type) and issubclass(got[0], Exception)


def test_compressed_bodies_keep_their_sysflag(pair) -> None:
    _compiled, _reference = pair
    body = bytes(range(256)) * 3
    msgs = MessageBatch("Topic", [b"small", body])
    a = _encode(COMPILED, msgs)
    assert a == _encode(REFERENCE, msgs)
    rec = fmt.decode_record(a[1], a[2][1])
    assert rec.sysflag & fmt.FLAG_COMPRESSED and zlib.decompress(bytes(rec.body)) == body
