"""Producer-side body compression: zlib above a size threshold, only where it pays (pure, no I/O).

RocketMQ compresses every body over ``compressMsgBodyOverHowmuch`` (4 KiB) with zlib level 5
and sets SYSFLAG 0x1; consumers inflate it. A body that does not shrink (random, encrypted,
already compressed: images, gzip, Parquet) then costs a full level-5 pass for nothing: 200
sync sends of 64 KiB random bytes took 11x as long as without. So a body over the threshold
is first probed: its first ``PROBE_BYTES`` at level 1 (a few microseconds). A prefix that does
not shrink to ``PROBE_RATIO`` of its size says the rest will not either, and the body is
stored as it is; otherwise the whole body is compressed at ``LEVEL`` and kept if smaller.
"""

from __future__ import annotations

import zlib

from shmq.codec import record as fmt
from shmq.codec.buffers import ReadBuffer
from shmq.errors import BadArgumentError

LEVEL = 5  # RocketMQ's compressLevel default
PROBE_BYTES = 4096
PROBE_RATIO = 0.9  # a prefix that keeps 90 % of its size or more: not worth compressing the whole


def compress_threshold(over: int | None) -> int | None:
    """``compress_msg_body_over_howmuch`` checked: None or 0 turn compression off (returns None)."""
    if over is None or over == 0:
        return None
    if not isinstance(over, int) or isinstance(over, bool) or over < 0:
        raise BadArgumentError(f"compress_msg_body_over_howmuch must be a byte count >= 0 or None, got {over!r}")
    return over


def worth_compressing(body: ReadBuffer) -> bool:
    """Whether a level-1 pass over the body's first ``PROBE_BYTES`` shrinks it enough."""
    prefix = body[:PROBE_BYTES]
    return len(zlib.compress(prefix, 1)) < len(prefix) * PROBE_RATIO


def compress_body(body: ReadBuffer, over: int | None) -> tuple[ReadBuffer, int]:
    """The body as stored and its SYSFLAG bits: compressed when longer than ``over`` (None: never),
    the probe says it shrinks, and the result is smaller."""
    if over is None or len(body) <= over or not worth_compressing(body):
        return body, 0
    packed = zlib.compress(body, LEVEL)
    if len(packed) < len(body):
        return packed, fmt.FLAG_COMPRESSED
    return body, 0
