"""RESET_OFFSET and RESET_OFFSET_ACK payloads (pure; decoders raise only CorruptFrameError).

An operator's ``offset reset`` reaches the live members of a clustering group as RESET_OFFSET
(RocketMQ's RESET_CONSUMER_CLIENT_OFFSET, request code 220, broker -> client): the group, the
topic and the new offset of every queue of the topic. ``req_id`` is the reset's id (it grows
with every reset of the broker's run); a member answers RESET_OFFSET_ACK with that id once it
dropped what it had cached of those queues, on the same request ring as its COMMIT_OFFSET
frames, so the broker knows every later commit of the member is of a position after the reset.

Layouts (little-endian)::

    RESET_OFFSET      req_id u64, count u32, group_len u16, topic_len u16 | group | topic | pad8 |
                      queue_id i64 * count | offset i64 * count
    RESET_OFFSET_ACK  req_id u64
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from shmq.codec.buffers import ReadBuffer
from shmq.errors import CorruptFrameError

_RESET = struct.Struct("<QIHH")
_ACK = struct.Struct("<Q")
MAX_NAME = 255
MAX_QUEUES = 1024  # a topic's most queues (MAX_QUEUE_NUMS)


class OffsetReset(NamedTuple):
    req_id: int
    group: str
    topic: str
    offsets: dict[int, int]  # queue id -> the offset to resume from


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def encode_reset_offset(r: OffsetReset) -> bytes:
    g, t = r.group.encode("ascii"), r.topic.encode("ascii")
    if len(g) > MAX_NAME or len(t) > MAX_NAME or len(r.offsets) > MAX_QUEUES:
        raise ValueError("RESET_OFFSET: group or topic over 255 bytes, or more than 1024 queues")
    names = g + t
    qids = sorted(r.offsets)
    body = struct.pack(f"<{len(qids)}q{len(qids)}q", *qids, *(r.offsets[q] for q in qids))
    return _RESET.pack(r.req_id, len(qids), len(g), len(t)) + names + bytes(_pad8(len(names)) - len(names)) + body


def decode_reset_offset(payload: ReadBuffer) -> OffsetReset:
    try:
        req_id, n, glen, tlen = _RESET.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("RESET_OFFSET frame shorter than its header") from None
    start = _RESET.size + _pad8(glen + tlen)
    if n > MAX_QUEUES or len(payload) != start + 16 * n:
        raise CorruptFrameError(f"RESET_OFFSET frame is {len(payload)} bytes, its fields say {start + 16 * n}")
    try:
        group = bytes(payload[_RESET.size : _RESET.size + glen]).decode("ascii")
        topic = bytes(payload[_RESET.size + glen : _RESET.size + glen + tlen]).decode("ascii")
    except UnicodeDecodeError:
        raise CorruptFrameError("RESET_OFFSET group or topic is not ASCII") from None
    values = struct.unpack_from(f"<{2 * n}q", payload, start)
    return OffsetReset(req_id, group, topic, dict(zip(values[:n], values[n:])))


def encode_reset_offset_ack(req_id: int) -> bytes:
    return _ACK.pack(req_id)


def decode_reset_offset_ack(payload: ReadBuffer) -> int:
    if len(payload) != _ACK.size:
        raise CorruptFrameError(f"RESET_OFFSET_ACK frame is {len(payload)} bytes, not {_ACK.size}")
    return int(_ACK.unpack_from(payload)[0])
