"""RESET_OFFSET and RESET_OFFSET_ACK codecs alone: round trips and malformed payloads."""

from __future__ import annotations

import pytest

from shmq.codec.reset_frames import (
    OffsetReset,
    decode_reset_offset,
    decode_reset_offset_ack,
    encode_reset_offset,
    encode_reset_offset_ack,
)
from shmq.errors import CorruptFrameError


@pytest.mark.parametrize(
    "group, topic, offsets",
    [
        ("cg", "Orders", {0: 0, 1: 17, 2: 2**62}),
        ("g" * 127, "T", {}),
        ("a", "bb", {q: q * 3 for q in range(1024)}),
    ],
)
def test_reset_offset_round_trip(group, topic, offsets):
    r = OffsetReset(2**63 + 5, group, topic, offsets)
    payload = encode_reset_offset(r)
    assert len(payload) % 8 == 0
    assert decode_reset_offset(memoryview(payload)) == r


def test_reset_offset_ack_round_trip():
    assert decode_reset_offset_ack(encode_reset_offset_ack(12345)) == 12345


@pytest.mark.parametrize("cut", [0, 5, 15, 17, -8, -1])
def test_truncated_reset_offset_is_corrupt(cut):
    payload = encode_reset_offset(OffsetReset(1, "cg", "T", {0: 1, 1: 2}))
    with pytest.raises(CorruptFrameError):
        decode_reset_offset(payload[:cut] if cut >= 0 else payload[: len(payload) + cut])


def test_reset_offset_with_a_queue_count_over_the_limit_is_corrupt():
    payload = bytearray(encode_reset_offset(OffsetReset(1, "cg", "T", {0: 1})))
    payload[8:12] = (5000).to_bytes(4, "little")
    with pytest.raises(CorruptFrameError):
        decode_reset_offset(bytes(payload))


def test_non_ascii_names_are_corrupt():
    payload = bytearray(encode_reset_offset(OffsetReset(1, "cg", "T", {0: 1})))
    payload[16] = 0xFF
    with pytest.raises(CorruptFrameError, match="ASCII"):
        decode_reset_offset(bytes(payload))


def test_ack_of_the_wrong_size_is_corrupt():
    with pytest.raises(CorruptFrameError):
        decode_reset_offset_ack(b"\0" * 7)


def test_encoding_too_many_queues_is_refused():
    with pytest.raises(ValueError):
        encode_reset_offset(OffsetReset(1, "cg", "T", dict.fromkeys(range(1025), 0)))
