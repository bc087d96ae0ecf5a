"""POP frames: the broker hands messages out (RocketMQ 5's POP, RIP-19) and the consumer settles
them by receipt. Pure codec: decoders raise only ``CorruptFrameError``.

A POP asks for up to ``max_nums`` messages of the member's subscriptions (the topics and
filters it joined the group with) and of the group's retry topic; each message handed out is
invisible to the rest of the group for ``invisible_ms``. The answer, POP_RESULT, does not carry
the messages: it names each one by where it is stored (commitlog offset and size, read by the
consumer from its read-only mapping as every shmq consumer does) and by its receipt: (topic,
queue id, queue offset, token). The token is the broker's number of that delivery, unique
across restarts; a receipt whose token is not the message's current delivery is stale.

ACK settles receipts; CHANGE_INVISIBLE gives them a new invisible time and answers with a new
token per receipt (the old receipt is stale from then on). Both are answered by RECEIPT_RESULT:
a status per receipt, the new tokens, and the first refusal's reason as text.

Layouts (little-endian; ``pad8`` = zero padding to a multiple of 8; a topic table is
``([len u8][name]) * n_topics pad8``)::

    POP             req_id u64, enqueue_ns i64, invisible_ms i64, await_ms u32, max_nums u16,
                    flags u16, max_attempts u16, group_len u16, pad u32 | group pad8
    POP_RESULT      req_id u64, pop_time_ms i64, invisible_ms i64, count u32, n_topics u16,
                    pad u16 | topic table | topic_idx i64 * count | queue_id i64 * count |
                    queue_offset i64 * count | commitlog_offset i64 * count | size i64 * count |
                    attempt i64 * count | token i64 * count
    ACK             req_id u64, enqueue_ns i64, count u32, n_topics u16, group_len u16 |
                    group pad8 | topic table | topic_idx i64 * count | queue_id i64 * count |
                    queue_offset i64 * count | token i64 * count
    CHANGE_INVISIBLE  the ACK layout, then invisible_ms i64 * count
    RECEIPT_RESULT  req_id u64, count u32, msg_len u32 | status i64 * count |
                    token i64 * count | UTF-8 message

``attempt`` is the delivery attempt (1 for the first delivery). ``flags`` FLAG_FIFO: the group
is a FIFO group (a message group's next message only after the previous one is settled).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from shmq.codec.buffers import ReadBuffer
from shmq.errors import CorruptFrameError

# frame kinds (requests 25-27, answers 38-39; see shmq.codec.frames for the others)
POP = 25
ACK = 26
CHANGE_INVISIBLE = 27
POP_RESULT = 38
RECEIPT_RESULT = 39

FLAG_FIFO = 0x1

MAX_POP_NUMS = 1024  # messages one POP may ask for
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # RocketMQ 5's cap on an invisible duration (12 hours)
MAX_AWAIT_MS = 60_000  # longest long poll of one POP
MAX_ATTEMPTS = 1000  # max_delivery_attempts
MAX_RECEIPTS = 4096  # receipts in one ACK or CHANGE_INVISIBLE frame (the client splits longer lists)
MAX_GROUP_BYTES = 120  # "%RETRY%" + group must be a legal topic name (127 characters)
MAX_TOPIC_BYTES = 127
MAX_MESSAGE = 1024

# RECEIPT_RESULT statuses
RECEIPT_OK = 0
RECEIPT_UNKNOWN = 1  # no such message in flight for the group: never handed out, or settled already
RECEIPT_STALE = 2  # the message was handed out again since: this receipt is an earlier delivery's
RECEIPT_ILLEGAL = 3  # the receipt or its invisible time is malformed (topic of another group, out of range)

_POP = struct.Struct("<QqqIHHHH4x")
_POP_RESULT = struct.Struct("<QqqIH2x")
_RECEIPTS = struct.Struct("<QqIHH")
_RECEIPT_RESULT = struct.Struct("<QII")


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def _ascii(raw: ReadBuffer, what: str) -> str:
    try:
        return bytes(raw).decode("ascii")
    except UnicodeDecodeError:
        raise CorruptFrameError(f"{what} is not ASCII") from None


def _encode_table(names: Sequence[str]) -> bytes:
    out = bytearray()
    for name in names:
        b = name.encode("ascii")
        if not 0 < len(b) <= MAX_TOPIC_BYTES:
            raise ValueError(f"topic name of {len(b)} bytes in a POP frame (1..{MAX_TOPIC_BYTES})")
        out.append(len(b))
        out += b
    out += bytes(_pad8(len(out)) - len(out))
    return bytes(out)


def _decode_table(payload: ReadBuffer, p: int, n: int, what: str) -> tuple[list[str], int]:
    """The ``n`` names of a topic table at ``p``; returns them and where the table ends (padded)."""
    names, start = [], p
    for _ in range(n):
        if p >= len(payload):
            raise CorruptFrameError(f"{what} topic table runs past the frame")
        k = payload[p]
        if not 0 < k <= MAX_TOPIC_BYTES or p + 1 + k > len(payload):
            raise CorruptFrameError(f"{what} topic name of {k} bytes")
        names.append(_ascii(payload[p + 1 : p + 1 + k], f"{what} topic"))
        p += 1 + k
    return names, start + _pad8(p - start)


def _arrays(payload: ReadBuffer, p: int, count: int, k: int, what: str) -> list[np.ndarray]:
    """``k`` i64 arrays of ``count`` values each at ``p``, filling the frame to its end exactly."""
    if len(payload) != p + 8 * count * k:
        raise CorruptFrameError(f"{what} frame is {len(payload)} bytes, its fields say {p + 8 * count * k}")
    block = np.frombuffer(payload, "<i8", count * k, p).astype(np.int64).reshape(k, count)  # one copy
    return list(block)


def _group(payload: ReadBuffer, p: int, g: int, what: str) -> str:
    if not 0 < g <= MAX_GROUP_BYTES:
        raise CorruptFrameError(f"{what} group length {g} (1..{MAX_GROUP_BYTES})")
    if p + g > len(payload):
        raise CorruptFrameError(f"{what} group runs past the frame")
    return _ascii(payload[p : p + g], f"{what} group")


def _i64(values: Sequence[int] | np.ndarray) -> bytes:
    return np.asarray(values, "<i8").tobytes()


# --------------------------------------------------------------------------- POP


class Pop(NamedTuple):
    req_id: int
    enqueue_ns: int
    group: str
    invisible_ms: int
    await_ms: int  # 0: answer at once, with what there is
    max_nums: int
    flags: int
    max_attempts: int  # deliveries before a message goes to %DLQ%<group>


def encode_pop(
    req_id: int,
    enqueue_ns: int,
    group: str,
    invisible_ms: int,
    await_ms: int,
    max_nums: int,
    flags: int = 0,
    max_attempts: int = 16,
) -> bytes:
    g = group.encode("ascii")
    head = _POP.pack(req_id, enqueue_ns, invisible_ms, await_ms, max_nums, flags, max_attempts, len(g))
    return head + g + bytes(_pad8(len(g)) - len(g))


def decode_pop(payload: ReadBuffer) -> Pop:
    try:
        req_id, enq, invisible, await_ms, n, flags, attempts, g = _POP.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("POP frame shorter than its header") from None
    group = _group(payload, _POP.size, g, "POP")
    if len(payload) != _POP.size + _pad8(g):
        raise CorruptFrameError(f"POP frame is {len(payload)} bytes, its fields say {_POP.size + _pad8(g)}")
    if not 0 < n <= MAX_POP_NUMS:
        raise CorruptFrameError(f"POP asks for {n} messages (1..{MAX_POP_NUMS})")
    if not 0 < invisible <= MAX_INVISIBLE_MS:
        raise CorruptFrameError(f"POP invisible time {invisible} ms (1..{MAX_INVISIBLE_MS})")
    if await_ms > MAX_AWAIT_MS:
        raise CorruptFrameError(f"POP await time {await_ms} ms (0..{MAX_AWAIT_MS})")
    if not 0 < attempts <= MAX_ATTEMPTS:
        raise CorruptFrameError(f"POP max delivery attempts {attempts} (1..{MAX_ATTEMPTS})")
    if flags & ~FLAG_FIFO:
        raise CorruptFrameError(f"POP flags {flags:#x} has unknown bits")
    return Pop(req_id, enq, group, invisible, await_ms, n, flags, attempts)


class PopResult(NamedTuple):
    """The messages one POP handed out; arrays are parallel, one row per message."""

    req_id: int
    pop_time_ms: int
    invisible_ms: int
    topics: list[str]
    topic_idx: np.ndarray
    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    commitlog_offsets: np.ndarray
    sizes: np.ndarray
    attempts: np.ndarray
    tokens: np.ndarray


def encode_pop_result(r: PopResult) -> bytes:
    n = len(r.tokens)
    cols = (r.topic_idx, r.queue_ids, r.queue_offsets, r.commitlog_offsets, r.sizes, r.attempts, r.tokens)
    if any(len(c) != n for c in cols):
        raise ValueError("POP_RESULT columns differ in length")
    head = _POP_RESULT.pack(r.req_id, r.pop_time_ms, r.invisible_ms, n, len(r.topics))
    return b"".join((head, _encode_table(r.topics), *(_i64(c) for c in cols)))


def encode_pop_result_rows(
    req_id: int, pop_time_ms: int, invisible_ms: int, topics: list[str], table: np.ndarray
) -> bytes:
    """The bytes ``encode_pop_result`` writes, from the rows as one (n, 7) i64 table whose
    columns are the frame's (topic index, queue id, queue offset, commitlog offset, size,
    attempt, token): the broker's way, one copy for the whole answer instead of one per column."""
    if table.ndim != 2 or table.shape[1] != 7:
        raise ValueError(f"POP_RESULT table of shape {table.shape}, not (n, 7)")
    head = _POP_RESULT.pack(req_id, pop_time_ms, invisible_ms, len(table), len(topics))
    return b"".join((head, _encode_table(topics), np.asarray(table, "<i8").T.tobytes()))


def empty_pop_result(req_id: int, pop_time_ms: int, invisible_ms: int) -> PopResult:
    """The answer of a POP that found nothing (its long poll timed out, or ``await_ms`` was 0)."""
    z = np.zeros(0, np.int64)
    return PopResult(req_id, pop_time_ms, invisible_ms, [], z, z, z, z, z, z, z)


def decode_pop_result(payload: ReadBuffer) -> PopResult:
    try:
        req_id, pop_time, invisible, n, n_topics = _POP_RESULT.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("POP_RESULT frame shorter than its header") from None
    if n > MAX_POP_NUMS:
        raise CorruptFrameError(f"POP_RESULT with {n} messages (0..{MAX_POP_NUMS})")
    topics, p = _decode_table(payload, _POP_RESULT.size, n_topics, "POP_RESULT")
    cols = _arrays(payload, p, n, 7, "POP_RESULT")
    if n and (cols[0].min() < 0 or cols[0].max() >= len(topics)):
        raise CorruptFrameError("POP_RESULT topic index outside its topic table")
    return PopResult(req_id, pop_time, invisible, topics, *cols)


# --------------------------------------------------------------------------- ACK, CHANGE_INVISIBLE


class Receipts(NamedTuple):
    """Receipts to settle (ACK) or to give a new invisible time (CHANGE_INVISIBLE: ``invisible_ms``
    per receipt; None for an ACK)."""

    req_id: int
    enqueue_ns: int
    group: str
    topics: list[str]
    topic_idx: np.ndarray
    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    tokens: np.ndarray
    invisible_ms: np.ndarray | None


def encode_receipts(
    req_id: int,
    enqueue_ns: int,
    group: str,
    topics: Sequence[str],
    topic_idx: Sequence[int] | np.ndarray,
    queue_ids: Sequence[int] | np.ndarray,
    queue_offsets: Sequence[int] | np.ndarray,
    tokens: Sequence[int] | np.ndarray,
    invisible_ms: Sequence[int] | np.ndarray | None = None,
) -> bytes:
    """An ACK payload, or with ``invisible_ms`` a CHANGE_INVISIBLE one (the kind goes on the ring frame)."""
    g = group.encode("ascii")
    n = len(tokens)
    cols = [topic_idx, queue_ids, queue_offsets, tokens] + ([] if invisible_ms is None else [invisible_ms])
    if not 0 < n <= MAX_RECEIPTS or any(len(c) != n for c in cols):
        raise ValueError(f"an ACK carries 1..{MAX_RECEIPTS} receipts, each with a topic, queue, offset and token")
    head = _RECEIPTS.pack(req_id, enqueue_ns, n, len(topics), len(g))
    return b"".join((head, g, bytes(_pad8(len(g)) - len(g)), _encode_table(topics), *(_i64(c) for c in cols)))


def decode_receipts(payload: ReadBuffer, change: bool) -> Receipts:
    """An ACK (``change`` False) or CHANGE_INVISIBLE (True) frame."""
    what = "CHANGE_INVISIBLE" if change else "ACK"
    try:
        req_id, enq, n, n_topics, g = _RECEIPTS.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError(f"{what} frame shorter than its header") from None
    if not 0 < n <= MAX_RECEIPTS:
        raise CorruptFrameError(f"{what} with {n} receipts (1..{MAX_RECEIPTS})")
    group = _group(payload, _RECEIPTS.size, g, what)
    topics, p = _decode_table(payload, _RECEIPTS.size + _pad8(g), n_topics, what)
    cols = _arrays(payload, p, n, 5 if change else 4, what)
    if cols[0].view(np.uint64).max() >= len(topics):  # a negative index reads as a huge one
        raise CorruptFrameError(f"{what} topic index outside its topic table")
    return Receipts(req_id, enq, group, topics, cols[0], cols[1], cols[2], cols[3], cols[4] if change else None)


class ReceiptResult(NamedTuple):
    req_id: int
    statuses: np.ndarray  # RECEIPT_OK, RECEIPT_UNKNOWN, RECEIPT_STALE or RECEIPT_ILLEGAL per receipt
    tokens: np.ndarray  # CHANGE_INVISIBLE: the new token of each receipt changed (0 otherwise)
    message: str  # why the first refused receipt was refused ("" if none was)


def encode_receipt_result(r: ReceiptResult) -> bytes:
    msg = r.message.encode("utf-8")[:MAX_MESSAGE]
    n = len(r.statuses)
    if len(r.tokens) != n:
        raise ValueError("RECEIPT_RESULT columns differ in length")
    return b"".join((_RECEIPT_RESULT.pack(r.req_id, n, len(msg)), _i64(r.statuses), _i64(r.tokens), msg))


def decode_receipt_result(payload: ReadBuffer) -> ReceiptResult:
    try:
        req_id, n, m = _RECEIPT_RESULT.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("RECEIPT_RESULT frame shorter than its header") from None
    if n > MAX_RECEIPTS or m > MAX_MESSAGE:
        raise CorruptFrameError(f"RECEIPT_RESULT with {n} receipts and a {m}-byte message")
    p = _RECEIPT_RESULT.size
    if len(payload) != p + 16 * n + m:
        raise CorruptFrameError(f"RECEIPT_RESULT frame is {len(payload)} bytes, its fields say {p + 16 * n + m}")
    statuses = np.frombuffer(payload, "<i8", n, p).astype(np.int64)
    tokens = np.frombuffer(payload, "<i8", n, p + 8 * n).astype(np.int64)
    message = bytes(payload[p + 16 * n :]).decode("utf-8", "replace")
    return ReceiptResult(req_id, statuses, tokens, message)
