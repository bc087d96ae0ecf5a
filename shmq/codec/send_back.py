"""SEND_BACK frames (consumer -> broker): messages a listener did not consume, to be redelivered
later through the group's retry topic or parked in its dead-letter queue (RocketMQ's
CONSUMER_SEND_MSG_BACK request, several messages a frame so a failing batch costs one round
trip). Pure codec: decoders raise only ``CorruptFrameError``. The broker answers with one
SEND_MULTI_RESULT (a status per message) or an ERROR for the whole frame.

Layout (little-endian, ``pad8`` = zero padding to a multiple of 8)::

    SEND_BACK  req_id u64, enqueue_ns i64, max_reconsume_times i32, count u32, group_len u16,
               pad u16 * 3 | group pad8 | commitlog_offset i64 * count | size i32 * count |
               delay_level i32 * count

``delay_level`` per message: -1 straight to the DLQ, 0 the broker's rule (3 + reconsume
times), n > 0 that level (the last level if n is above it).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from shmq.codec.buffers import ReadBuffer
from shmq.errors import CorruptFrameError

_HEAD = struct.Struct("<QqiIH6x")
MAX_SEND_BACK = 4096  # messages in one frame (the client splits longer lists)
MAX_GROUP_BYTES = 120  # "%RETRY%" + group must be a legal topic name (127 characters)
TO_DLQ = -1  # delay level: straight to the dead-letter queue
BROKER_RULE = 0  # delay level: the broker's rule, 3 + reconsume times


class SendBack(NamedTuple):
    req_id: int
    enqueue_ns: int
    group: str
    max_reconsume_times: int
    offsets: np.ndarray  # commitlog offset of each consumed message
    sizes: np.ndarray  # its stored size
    delay_levels: np.ndarray


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def encode_send_back(
    req_id: int,
    enqueue_ns: int,
    group: str,
    max_reconsume_times: int,
    offsets: Sequence[int] | np.ndarray,
    sizes: Sequence[int] | np.ndarray,
    delay_levels: Sequence[int] | np.ndarray,
) -> bytes:
    g = group.encode("ascii")
    n = len(offsets)
    if not 0 < n <= MAX_SEND_BACK or len(sizes) != n or len(delay_levels) != n:
        raise ValueError(f"a SEND_BACK carries 1..{MAX_SEND_BACK} messages, each with a size and a delay level")
    head = _HEAD.pack(req_id, enqueue_ns, max_reconsume_times, n, len(g))
    return b"".join(
        (
            head,
            g,
            bytes(_pad8(len(g)) - len(g)),
            np.asarray(offsets, "<i8").tobytes(),
            np.asarray(sizes, "<i4").tobytes(),
            np.asarray(delay_levels, "<i4").tobytes(),
        )
    )


def decode_send_back(payload: ReadBuffer) -> SendBack:
    try:
        req_id, enq, max_times, n, g = _HEAD.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("SEND_BACK frame shorter than its header") from None
    if not 0 < n <= MAX_SEND_BACK:
        raise CorruptFrameError(f"SEND_BACK with {n} messages (1..{MAX_SEND_BACK})")
    if not 0 < g <= MAX_GROUP_BYTES:
        raise CorruptFrameError(f"SEND_BACK group length {g} (1..{MAX_GROUP_BYTES})")
    if max_times < 0:
        raise CorruptFrameError(f"SEND_BACK max_reconsume_times {max_times} is negative")
    p = _HEAD.size + _pad8(g)
    if len(payload) != p + 16 * n:
        raise CorruptFrameError(f"SEND_BACK frame is {len(payload)} bytes, its fields say {p + 16 * n}")
    try:
        group = bytes(payload[_HEAD.size : _HEAD.size + g]).decode("ascii")
    except UnicodeDecodeError:
        raise CorruptFrameError("SEND_BACK group is not ASCII") from None
    offsets = np.frombuffer(payload, "<i8", n, p).astype(np.int64)
    sizes = np.frombuffer(payload, "<i4", n, p + 8 * n).astype(np.int64)
    levels = np.frombuffer(payload, "<i4", n, p + 12 * n).astype(np.int64)
    if levels.min() < TO_DLQ:
        raise CorruptFrameError("SEND_BACK delay level below -1")
    return SendBack(req_id, enq, group, max_times, offsets, sizes, levels)
