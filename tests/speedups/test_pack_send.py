"""Compiled ``pack_send`` (a whole SEND payload: frame header and record) against the reference:
the same bytes for every input the reference writes, the same error for every one it refuses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.codec import frames as P
from shmq.codec import record as fmt
from tests.speedups.conftest import compiled_or_skip


@pytest.fixture(scope="module")
def pair():
    return compiled_or_skip("_producer", "pack_send"), _speedups.reference("_producer", "pack_send")


i64 = st.integers(-(2**63), 2**63 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
args = st.tuples(
    st.integers(0, 2**64 - 1),  # req_id
    i64,  # enqueue_ns
    i32,  # queue_id
    st.integers(0, 2**32 - 1),  # flags
    i64,  # tags_code
    st.text("abcXYZ09_-%|", min_size=1, max_size=20).map(str.encode),  # topic_b
    st.lists(i64, max_size=4),  # key_hashes
    st.one_of(st.binary(max_size=64), st.binary(max_size=64).map(bytearray), st.binary(max_size=64).map(memoryview)),
    st.binary(max_size=40),  # props_b
    i32,  # crc
    i32,  # flag
    i32,  # sysflag
    i64,  # born_timestamp
    i64,  # born_host
)


def _run(fn, a, extra=0):
    size = P.send_size(len(a[5]), len(a[6]), fmt.FIXED_OVERHEAD + len(a[7]) + len(a[5]) + len(a[8]))
    buf = bytearray(b"\xee" * (size + extra))
    try:
        fn(memoryview(buf), *a)
    except Exception as e:  # noqa: BLE001 - compared with the other side's
        return type(e), str(e)
    return bytes(buf)


@settings(max_examples=300, deadline=None)
@given(args, st.integers(0, 9))
def test_same_bytes(pair, a, extra):
    compiled, reference = pair
    out = _run(compiled, a, extra)
    assert isinstance(out, bytes)
    assert out == _run(reference, a, extra)
    if not extra:  # a frame the broker decodes: the record is the one encode_message makes
        send = P.decode_send(out)
        assert send.req_id == a[0] and send.queue_id == a[2] and list(send.key_hashes) == a[6]


@pytest.mark.parametrize(
    "i, bad",
    [
        (0, -1),  # req_id below its u64
        (2, 2**31),  # queue_id past its i32
        (3, -1),  # flags below u32
        (6, [2**63]),  # a key hash past i64
        (9, 1.5),  # crc not an int
        (10, 2**31),  # flag past i32
        (5, b"t" * 256),  # a topic longer than its length byte
    ],
)
def test_same_errors(pair, i, bad):
    compiled, reference = pair
    a = [7, 1, -1, 0, 0, b"Orders", [1, 2], b"body", b"p\x01v\x02", 5, 0, 0, 1, 2]
    a[i] = bad
    out = _run(reference, tuple(a))
    assert not isinstance(out, bytes)
    assert _run(compiled, tuple(a)) == out


def test_short_or_read_only_buffer_is_the_references_error(pair):
    compiled, reference = pair
    a = (7, 1, -1, 0, 0, b"Orders", [1], b"body", b"", 5, 0, 0, 1, 2)
    for buf in (bytearray(10), bytes(500)):
        errors = []
        for fn in (compiled, reference):
            with pytest.raises(Exception) as info:
                fn(memoryview(buf), *a)
            errors.append((info.type, str(info.value)))
        assert errors[0] == errors[1]
