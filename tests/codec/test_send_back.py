"""The SEND_BACK codec: round trip, and nothing but CorruptFrameError for a malformed frame."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shmq.codec.send_back import MAX_SEND_BACK, decode_send_back, encode_send_back
from shmq.errors import CorruptFrameError


def test_round_trip():
    raw = encode_send_back(5, 77, "cg", 16, [0, 1 << 40], [100, 200], [-1, 0])
    sb = decode_send_back(raw)
    assert (sb.req_id, sb.enqueue_ns, sb.group, sb.max_reconsume_times) == (5, 77, "cg", 16)
    assert sb.offsets.tolist() == [0, 1 << 40] and sb.sizes.tolist() == [100, 200]
    assert sb.delay_levels.tolist() == [-1, 0]


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"\0" * 10,
        encode_send_back(1, 0, "g", 16, [0], [100], [0])[:-1],  # truncated
        encode_send_back(1, 0, "g", 16, [0], [100], [0]) + b"\0",  # trailing bytes
        encode_send_back(1, 0, "g", 16, [0], [100], [-2]),  # a delay level below -1
        encode_send_back(1, 0, "g", -1, [0], [100], [0]),  # a negative max
        struct.pack("<QqiIH6x", 1, 0, 16, 0, 1) + b"g" + b"\0" * 7,  # no messages
        struct.pack("<QqiIH6x", 1, 0, 16, MAX_SEND_BACK + 1, 1) + b"g" + b"\0" * 7,  # too many
        struct.pack("<QqiIH6x", 1, 0, 16, 1, 0) + b"\0" * 16,  # no group
        struct.pack("<QqiIH6x", 1, 0, 16, 1, 2) + b"\xff\xfe" + b"\0" * 6 + b"\0" * 16,  # not ASCII
    ],
)
def test_malformed_frames_raise_corrupt_frame_error(bad):
    with pytest.raises(CorruptFrameError):
        decode_send_back(bad)


@given(st.binary(max_size=200))
def test_garbage_never_raises_anything_else(data):
    try:
        decode_send_back(data)
    except CorruptFrameError:
        pass
