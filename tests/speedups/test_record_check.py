"""Compiled ``check_record`` against the reference on valid, damaged and random bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.codec import record as fmt
from tests.speedups.conftest import compiled_or_skip


@pytest.fixture(scope="module")
def pair():
    return compiled_or_skip("_record", "check_record"), _speedups.reference("_record", "check_record")


def _stored(body: bytes, phys: int, props: dict[str, str] | None = None, topic: str = "T") -> bytearray:
    raw = bytearray(fmt.encode_message(topic, body, properties=props))
    struct.pack_into(">q", raw, fmt.OFF_STORETIMESTAMP, 1)
    struct.pack_into(">q", raw, fmt.OFF_PHYSICALOFFSET, phys)
    return raw


def test_layout_constants_match_the_reference() -> None:
    compiled_or_skip("_record", "check_record")
    import shmq._speedups._record as c

    for name, value in c.LAYOUT.items():
        assert getattr(fmt, name) == value, name
    assert (c.RECORD_OK, c.RECORD_BLANK, c.RECORD_END, c.RECORD_BAD_CRC) == (
        fmt.RECORD_OK,
        fmt.RECORD_BLANK,
        fmt.RECORD_END,
        fmt.RECORD_BAD_CRC,
    )


def test_the_codec_uses_the_compiled_function_unless_disabled() -> None:
    fn = compiled_or_skip("_record", "check_record")
    assert (fmt.check_record is fn) != _speedups.DISABLED


records = st.builds(
    lambda body, tags, phys, lead: (
        bytearray(lead) + _stored(body, phys, {"TAGS": tags} if tags else None),
        lead,
        phys,
    ),
    st.binary(max_size=300),
    st.text(st.characters(min_codepoint=32, blacklist_categories=("Cs",)), max_size=20),
    st.integers(0, 2**40),
    st.integers(0, 64),
)


@settings(max_examples=400, deadline=None)
@given(
    records,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    st.integers(0, 400),
    st.booleans(),
    st.integers(-2, 2),
)
def test_damaged_records_classify_the_same(pair, rec, flips, cut, verify, offset_skew) -> None:
    compiled, reference = pair
    buf, pos, phys = rec
    for where, value in flips:
        buf[where % len(buf)] = value
    limit = max(pos, len(buf) - cut)
    expected = phys + offset_skew
    assert compiled(buf, pos, limit, expected, verify) == reference(buf, pos, limit, expected, verify)


@settings(max_examples=400, deadline=None)
@given(st.binary(min_size=0, max_size=512), st.integers(0, 600), st.booleans())
def test_garbage_classifies_the_same(pair, data, pos, verify) -> None:
    compiled, reference = pair
    pos = min(pos, len(data))
    assert compiled(data, pos, len(data), pos, verify) == reference(data, pos, len(data), pos, verify)


def test_blank_and_a_scan_of_a_segment(pair) -> None:
    compiled, reference = pair
    a, b = _stored(b"first", 0), _stored(b"second", 0)
    struct.pack_into(">q", b, fmt.OFF_PHYSICALOFFSET, len(a))
    seg = a + b + bytearray(64)
    fmt.BLANK.pack_into(seg, len(a) + len(b), 64, fmt.BLANK_MAGIC)
    for buf in (seg, bytes(seg), memoryview(seg)):
        for pos in (0, len(a), len(a) + len(b)):
            assert compiled(buf, pos, len(seg), pos, True) == reference(buf, pos, len(seg), pos, True)
    assert compiled(seg, len(a) + len(b), len(seg), 0, True) == (fmt.RECORD_BLANK, 64)


def test_positions_outside_the_buffer_are_refused(pair) -> None:
    compiled, _ = pair
    with pytest.raises(ValueError):
        compiled(bytearray(16), 0, 32, 0, True)
    with pytest.raises(ValueError):
        compiled(bytearray(16), -1, 16, 0, True)
