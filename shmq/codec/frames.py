"""Frames on a channel's rings: request and response codecs (pure, no I/O).

Every payload is little-endian and starts with a u64 request id. Requests (client -> broker)
carry a monotonic enqueue time (CLOCK_MONOTONIC is system-wide, so the broker can measure how
long a frame waited in the ring: waitTimeMillsInSendQueue). SEND, SEND_BATCH (one topic and
queue) and SEND_MULTI (records of several topics and queues, auto_batch's small groups) carry
commitlog records already in the store's layout; encoders write them straight into a slot
reserved in the ring (``*_size`` tells how much to reserve). Decoders raise only
``CorruptFrameError``: a frame a buggy or hostile client wrote must never crash the broker.

Layouts (payload of the ring frame; ``pad8`` = zero padding to a multiple of 8)::

    SEND        req_id u64, enqueue_ns i64, queue_id i32, flags u32, tags_code i64,
                topic_len u16, n_keys u16, record_len u32 | topic pad8 | key_hash i64 * n | record
    SEND_BATCH  req_id u64, enqueue_ns i64, queue_id i32, flags u32, topic_len u16, pad u16,
                count u32, n_keys u32, buf_len u32 | topic pad8 | starts i64 * count |
                tags_codes i64 * count | key_hashes i64 * n | key_records i64 * n | records
    SEND_MULTI  req_id u64, enqueue_ns i64, flags u32, count u32, n_topics u32, table_len u32,
                n_keys u32, buf_len u32 | topic table ([len u8][name]) * n_topics pad8 |
                starts i64 * count | tags_codes i64 * count | topic_idx i64 * count |
                queue_ids i64 * count (-1: broker picks) | key_hashes i64 * n | key_records i64 * n | records
    COMMIT_OFFSET  req_id u64, offset i64, queue_id i32, group_len u16, topic_len u16 | group | topic
    PULL_WAIT   req_id u64, offset i64, queue_id i32, timeout_ms u32, topic_len u16 | topic
    HEARTBEAT   req_id u64
    SEND_RESULT req_id u64, status u16, pad u16, queue_id i32, queue_offset i64, phys_offset i64,
                store_timestamp i64, store_host i64, count u32, pad u32 | phys i64 * count if count > 1
    SEND_MULTI_RESULT  req_id u64, count u32, msg_len u32, store_timestamp i64, store_host i64 |
                status i64 * count (send status, or minus an ERROR code) | queue_id i64 * count |
                queue_offset i64 * count | phys_offset i64 * count (-1: not stored) | UTF-8 message
    ERROR       req_id u64, code u16, msg_len u16 | UTF-8 message
    WAKE        req_id u64, max_offset i64, timed_out u32, pad u32
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

import numpy as np

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.codec.buffers import ReadBuffer, WriteBuffer
from shmq.errors import CorruptFrameError

# frame kinds (ring kinds start at 16)
SEND = 16
SEND_BATCH = 17
COMMIT_OFFSET = 18
PULL_WAIT = 19
HEARTBEAT = 20
SEND_MULTI = 21
SEND_RESULT = 32
ERROR = 33
WAKE = 34
SEND_MULTI_RESULT = 35
# kinds of the message-semantics frames, whose codecs live in their own modules
SEND_BACK = 22  # consumer -> broker: messages to redeliver later (retry topic) or to the DLQ
END_TRANSACTION = 23  # producer -> broker: commit or roll back a half message
CHECK_TRANSACTION = 36  # broker -> producer: what became of this half message?
RESET_OFFSET = 37  # broker -> consumer: an operator reset the group's offsets of a topic
RESET_OFFSET_ACK = 24  # consumer -> broker: that reset is applied (commits of the reset queues count again)
REQUEST_KINDS = frozenset((SEND, SEND_BATCH, COMMIT_OFFSET, PULL_WAIT, HEARTBEAT, SEND_MULTI))
RESPONSE_KINDS = frozenset((SEND_RESULT, ERROR, WAKE, SEND_MULTI_RESULT))

FLAG_ONEWAY = 0x1
# SEND: the record carries delivery rules (DELAY, TIMER_*) or is a transaction half; the broker's
# put hooks read its properties (records without it are stored without being looked into)
FLAG_INSPECT = 0x2
# SEND: a resend of a request that got no answer (a timeout, a broker that died): the broker
# stores it only if its UNIQ_KEY is not stored yet, else answers the first copy's result
FLAG_RESEND = 0x4

# SEND_RESULT statuses (SendStatus on the client)
SEND_OK = 0
FLUSH_DISK_TIMEOUT = 1
FLUSH_SLAVE_TIMEOUT = 2
SLAVE_NOT_AVAILABLE = 3

# ERROR codes: RocketMQ's ResponseCode numbers
SYSTEM_ERROR = 1
SYSTEM_BUSY = 2
REQUEST_CODE_NOT_SUPPORTED = 3
MESSAGE_ILLEGAL = 13
SERVICE_NOT_AVAILABLE = 14
NO_PERMISSION = 16
TOPIC_NOT_EXIST = 17

_SEND = struct.Struct("<QqiIqHHI")
_BATCH = struct.Struct("<QqiIHHIII")
_MULTI = struct.Struct("<QqIIIIII")  # req id, enqueue ns, flags, count, topics, topic bytes, keys, records bytes
_MULTI_RESULT = struct.Struct("<QIIqq")  # req id, count, pad, store timestamp, store host
_COMMIT = struct.Struct("<QqiHH")
_PULL = struct.Struct("<QqiIH")
_HEARTBEAT = struct.Struct("<Q")
_RESULT = struct.Struct("<QHHiqqqqI4x")
_ERROR = struct.Struct("<QHH")
_WAKE = struct.Struct("<QqI4x")
_REQ_ID = struct.Struct("<Q")
MAX_ERROR_MESSAGE = 1024


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def _text(raw: ReadBuffer, what: str) -> str:
    try:
        return bytes(raw).decode("ascii")
    except UnicodeDecodeError:
        raise CorruptFrameError(f"{what} is not ASCII") from None


def _check_len(actual: int, expected: int, what: str) -> None:
    if actual != expected:
        raise CorruptFrameError(f"{what} frame is {actual} bytes, its fields say {expected}")


def request_id(kind: int, payload: ReadBuffer) -> int:
    """The request id every frame starts with (to answer even a frame that fails to decode)."""
    if len(payload) < 8:
        raise CorruptFrameError(f"frame of kind {kind} is too short for a request id")
    answer: int = _REQ_ID.unpack_from(payload)[0]
    return answer


# --------------------------------------------------------------------------- SEND


class Send(NamedTuple):
    """One record to append; ``record`` is a view into the ring (copy before trusting it)."""

    req_id: int
    enqueue_ns: int
    queue_id: int
    flags: int
    tags_code: int
    topic: str
    key_hashes: list[int]
    record: ReadBuffer


def send_size(topic_len: int, n_keys: int, record_len: int) -> int:
    """Payload bytes of a SEND frame."""
    return _SEND.size + _pad8(topic_len) + 8 * n_keys + record_len


def encode_send_header(
    buf: WriteBuffer,
    req_id: int,
    enqueue_ns: int,
    queue_id: int,
    flags: int,
    tags_code: int,
    topic_b: bytes,
    key_hashes: Sequence[int],
    record_len: int,
) -> int:
    """Write everything but the record into ``buf``; returns where the record goes."""
    n = len(key_hashes)
    _SEND.pack_into(buf, 0, req_id, enqueue_ns, queue_id, flags, tags_code, len(topic_b), n, record_len)
    p = _SEND.size
    t = len(topic_b)
    buf[p : p + t] = topic_b
    p += _pad8(t)
    if n:
        struct.pack_into(f"<{n}q", buf, p, *key_hashes)
        p += 8 * n
    return p


SEND_HEADER_BYTES = _SEND.size  # the SEND payload's fixed part (the compiled ``pack_send`` checks it)


def pack_send(
    buf: WriteBuffer,
    req_id: int,
    enqueue_ns: int,
    queue_id: int,
    flags: int,
    tags_code: int,
    topic_b: bytes,
    key_hashes: Sequence[int],
    body: ReadBuffer,
    props_b: bytes,
    crc: int,
    flag: int,
    sysflag: int,
    born_timestamp: int,
    born_host: int,
) -> None:
    """A whole SEND payload into ``buf`` (a reserved ring slot of ``send_size`` bytes): the frame's
    header and the record (``fmt.pack_message_into``). A sync send writes one per message; the
    compiled twin (``shmq._speedups._producer``) is one call instead of five Python-level ones,
    which a sync send pays cold after each wake-up."""
    record_len = fmt.record_size(len(body), len(topic_b), len(props_b))
    p = encode_send_header(buf, req_id, enqueue_ns, queue_id, flags, tags_code, topic_b, key_hashes, record_len)
    fmt.pack_message_into(
        buf,
        p,
        topic_b,
        body,
        props_b,
        crc,
        flag=flag,
        sysflag=sysflag,
        born_timestamp=born_timestamp,
        born_host=born_host,
    )


pack_send = _speedups.pick("_producer", "pack_send", pack_send)


def encode_send(
    req_id: int,
    enqueue_ns: int,
    queue_id: int,
    flags: int,
    tags_code: int,
    topic: str,
    key_hashes: Sequence[int],
    record: bytes,
) -> bytes:
    """A SEND payload as bytes (tests and tools; clients encode into the ring)."""
    topic_b = topic.encode("ascii")
    buf = bytearray(send_size(len(topic_b), len(key_hashes), len(record)))
    p = encode_send_header(buf, req_id, enqueue_ns, queue_id, flags, tags_code, topic_b, key_hashes, len(record))
    buf[p:] = record
    return bytes(buf)


def decode_send(payload: ReadBuffer) -> Send:
    try:
        req_id, enq, qid, flags, tags, t, n, rlen = _SEND.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("SEND frame shorter than its header") from None
    if t == 0 or t > fmt.MAX_TOPIC_LENGTH:
        raise CorruptFrameError(f"SEND topic length {t}")
    p = _SEND.size
    _check_len(len(payload), p + _pad8(t) + 8 * n + rlen, "SEND")
    topic = _text(payload[p : p + t], "SEND topic")
    p += _pad8(t)
    keys = list(struct.unpack_from(f"<{n}q", payload, p)) if n else []
    p += 8 * n
    return Send(req_id, enq, qid, flags, tags, topic, keys, payload[p : p + rlen])


_KEYS = [struct.Struct(f"<{n}q") for n in range(9)]
_SEND_SIZE = _SEND.size
_unpack_send = _SEND.unpack_from


def send_fields(payload: memoryview) -> tuple[int, int, int, int, int, bytes, tuple[int, ...], memoryview]:
    """The broker's hot-path SEND decoder: what ``decode_send`` checks, without the allocations.

    Returns (req_id, enqueue_ns, queue_id, flags, tags_code, topic bytes, key hashes, record
    view); the topic is left undecoded so the caller can compare it with the previous frame's
    (``decode_topic`` turns it into a checked ``str``).
    """
    try:
        req_id, enq, qid, flags, tags, t, n, rlen = _unpack_send(payload)
    except struct.error:
        raise CorruptFrameError("SEND frame shorter than its header") from None
    if t == 0 or t > fmt.MAX_TOPIC_LENGTH:
        raise CorruptFrameError(f"SEND topic length {t}")
    p = _SEND_SIZE + ((t + 7) & ~7)
    k = p + 8 * n
    if len(payload) != k + rlen:
        raise CorruptFrameError(f"SEND frame is {len(payload)} bytes, its fields say {k + rlen}")
    keys = (_KEYS[n] if n < 9 else struct.Struct(f"<{n}q")).unpack_from(payload, p) if n else ()
    return req_id, enq, qid, flags, tags, bytes(payload[_SEND_SIZE : _SEND_SIZE + t]), keys, payload[k:]


def decode_topic(raw: bytes) -> str:
    """A SEND topic from ``send_fields`` as ``str``; ``CorruptFrameError`` if not ASCII."""
    return _text(raw, "SEND topic")


# --------------------------------------------------------------------------- SEND_BATCH


class SendBatch(NamedTuple):
    """Records of one topic for one queue; ``batch`` is a private copy, safe to hand to the store."""

    req_id: int
    enqueue_ns: int
    queue_id: int
    flags: int
    topic: str
    batch: fmt.EncodedBatch


def send_batch_size(topic_len: int, count: int, n_keys: int, buf_len: int) -> int:
    """Payload bytes of a SEND_BATCH frame."""
    return _BATCH.size + _pad8(topic_len) + 16 * count + 16 * n_keys + buf_len


def encode_send_batch_header(
    buf: WriteBuffer,
    req_id: int,
    enqueue_ns: int,
    queue_id: int,
    flags: int,
    topic_b: bytes,
    starts: Sequence[int] | np.ndarray,
    tags_codes: Sequence[int] | np.ndarray,
    key_hashes: Sequence[int] | np.ndarray,
    key_records: Sequence[int] | np.ndarray,
    buf_len: int,
) -> int:
    """Write everything but the records into ``buf``; returns where the records go."""
    count, n = len(starts), len(key_hashes)
    _BATCH.pack_into(buf, 0, req_id, enqueue_ns, queue_id, flags, len(topic_b), 0, count, n, buf_len)
    p = _BATCH.size
    buf[p : p + len(topic_b)] = topic_b
    return _put_i64_columns(buf, p + _pad8(len(topic_b)), (starts, tags_codes, key_hashes, key_records))


def _put_i64_columns(buf: WriteBuffer, p: int, columns: Sequence[Sequence[int] | np.ndarray]) -> int:
    """Write int columns back to back as little-endian i64 at ``p``; returns the end."""
    for arr in columns:
        k = len(arr)
        if k:
            np.frombuffer(buf, "<i8", k, p)[:] = arr
            p += 8 * k
    return p


def encode_send_batch(
    req_id: int, enqueue_ns: int, queue_id: int, flags: int, topic: str, batch: fmt.EncodedBatch
) -> bytes:
    """A SEND_BATCH payload as bytes (tests and tools)."""
    topic_b = topic.encode("ascii")
    buf = bytearray(send_batch_size(len(topic_b), len(batch), len(batch.key_hashes), len(batch.buf)))
    p = encode_send_batch_header(
        buf,
        req_id,
        enqueue_ns,
        queue_id,
        flags,
        topic_b,
        batch.starts,
        batch.tags_codes,
        batch.key_hashes,
        batch.key_records,
        len(batch.buf),
    )
    buf[p:] = batch.buf
    return bytes(buf)


def send_batch_head(payload: ReadBuffer) -> tuple[int, int, int, int, str, int, int, int] | None:
    """(req id, enqueue ns, queue id, flags, topic, count, key count, records bytes) of a
    SEND_BATCH frame whose header ``decode_send_batch`` would pass, without touching its arrays
    or records; None for any other frame (``decode_send_batch`` then says what is wrong)."""
    try:
        req_id, enq, qid, flags, t, _, count, n, blen = _BATCH.unpack_from(payload)
    except struct.error:
        return None
    p = _BATCH.size
    if t == 0 or t > fmt.MAX_TOPIC_LENGTH or count == 0 or len(payload) != p + _pad8(t) + 16 * (count + n) + blen:
        return None
    try:
        topic = bytes(payload[p : p + t]).decode("ascii")
    except UnicodeDecodeError:
        return None
    return req_id, enq, qid, flags, topic, count, n, blen


def send_batch_arrays(payload: ReadBuffer, topic_len: int, count: int, n: int) -> np.ndarray | None:
    """The record starts, tags codes, key hashes and key record numbers of a SEND_BATCH frame
    whose header ``send_batch_head`` passed (``topic_len``, ``count`` records, ``n`` keys), as
    one private int64 array in that order, when ``decode_send_batch`` would accept them; None
    when it would not (it then says why). Read before anything else of the frame is acted on."""
    p = _BATCH.size + _pad8(topic_len)
    if len(payload) < p + 16 * (count + n) + 1:
        return None
    a = np.frombuffer(bytes(payload[p : p + 16 * (count + n)]), "<i8").astype(np.int64)
    starts, key_records = a[:count], a[2 * count + n :]
    blen = len(payload) - p - 16 * (count + n)
    if n and (key_records.min() < 0 or key_records.max() >= count):
        return None
    if count == 0 or starts[0] != 0 or (np.diff(starts) <= 0).any() or starts[-1] >= blen:
        return None
    return a


send_batch_arrays = _speedups.pick("_put", "send_batch_arrays", send_batch_arrays)


def decode_send_batch(payload: ReadBuffer) -> SendBatch:
    try:
        req_id, enq, qid, flags, t, _, count, n, blen = _BATCH.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("SEND_BATCH frame shorter than its header") from None
    if t == 0 or t > fmt.MAX_TOPIC_LENGTH or count == 0:
        raise CorruptFrameError(f"SEND_BATCH topic length {t}, count {count}")
    p = _BATCH.size
    _check_len(len(payload), p + _pad8(t) + 16 * count + 16 * n + blen, "SEND_BATCH")
    topic = _text(payload[p : p + t], "SEND_BATCH topic")
    p += _pad8(t)
    data = bytes(payload[p:])
    arrays = np.frombuffer(data, "<i8", 2 * count + 2 * n).astype(np.int64)
    starts, tags_codes = arrays[:count], arrays[count : 2 * count]
    key_hashes, key_records = arrays[2 * count : 2 * count + n], arrays[2 * count + n :]
    if n and (key_records.min() < 0 or key_records.max() >= count):
        raise CorruptFrameError("SEND_BATCH key record numbers out of range")
    if starts[0] != 0 or (np.diff(starts) <= 0).any() or starts[-1] >= blen:
        raise CorruptFrameError("SEND_BATCH record starts do not fit the records")
    body = memoryview(data)[16 * (count + n) :]  # a view of the private copy: no second copy of the records
    return SendBatch(
        req_id, enq, qid, flags, topic, fmt.EncodedBatch(body, starts, tags_codes, key_hashes, key_records)
    )


decode_send_batch = _speedups.pick("_put", "decode_send_batch", decode_send_batch)


# --------------------------------------------------------------------------- SEND_MULTI


class SendMulti(NamedTuple):
    """Records of several topics and queues in one frame: record i goes to
    ``topics[topic_idx[i]]``, queue ``queue_ids[i]`` (-1: the broker picks)."""

    req_id: int
    enqueue_ns: int
    flags: int
    topics: list[str]
    topic_idx: np.ndarray
    queue_ids: np.ndarray
    batch: fmt.EncodedBatch


def _topic_table(topics_b: Sequence[bytes]) -> bytes:
    return b"".join(bytes([len(t)]) + t for t in topics_b)


def send_multi_size(topics_b: Sequence[bytes], count: int, n_keys: int, buf_len: int) -> int:
    """Payload bytes of a SEND_MULTI frame."""
    return _MULTI.size + _pad8(sum(map(len, topics_b)) + len(topics_b)) + 32 * count + 16 * n_keys + buf_len


def encode_send_multi_header(
    buf: WriteBuffer,
    req_id: int,
    enqueue_ns: int,
    flags: int,
    topics_b: Sequence[bytes],
    topic_idx: Sequence[int] | np.ndarray,
    queue_ids: Sequence[int] | np.ndarray,
    batch: fmt.EncodedBatch,
) -> int:
    """Write everything but the records into ``buf``; returns where the records go."""
    count, n = len(batch), len(batch.key_hashes)
    table = _topic_table(topics_b)
    _MULTI.pack_into(buf, 0, req_id, enqueue_ns, flags, count, len(topics_b), len(table), n, len(batch.buf))
    p = _MULTI.size
    buf[p : p + len(table)] = table
    return _put_i64_columns(
        buf,
        p + _pad8(len(table)),
        (batch.starts, batch.tags_codes, topic_idx, queue_ids, batch.key_hashes, batch.key_records),
    )


def encode_send_multi(
    req_id: int,
    enqueue_ns: int,
    flags: int,
    topics: Sequence[str],
    topic_idx: Sequence[int] | np.ndarray,
    queue_ids: Sequence[int] | np.ndarray,
    batch: fmt.EncodedBatch,
) -> bytes:
    """A SEND_MULTI payload as bytes (tests and tools)."""
    topics_b = [t.encode("ascii") for t in topics]
    buf = bytearray(send_multi_size(topics_b, len(batch), len(batch.key_hashes), len(batch.buf)))
    p = encode_send_multi_header(buf, req_id, enqueue_ns, flags, topics_b, topic_idx, queue_ids, batch)
    buf[p:] = batch.buf
    return bytes(buf)


def decode_send_multi(payload: ReadBuffer) -> SendMulti:
    try:
        req_id, enq, flags, count, n_topics, table_len, n, blen = _MULTI.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("SEND_MULTI frame shorter than its header") from None
    if count == 0 or n_topics == 0 or n_topics > count:
        raise CorruptFrameError(f"SEND_MULTI with {count} records of {n_topics} topics")
    p = _MULTI.size
    _check_len(len(payload), p + _pad8(table_len) + 32 * count + 16 * n + blen, "SEND_MULTI")
    table = bytes(payload[p : p + table_len])
    topics, q = [], 0
    while q < table_len:
        t = table[q]
        if t == 0 or t > fmt.MAX_TOPIC_LENGTH or q + 1 + t > table_len:
            raise CorruptFrameError("SEND_MULTI topic table is malformed")
        topics.append(_text(table[q + 1 : q + 1 + t], "SEND_MULTI topic"))
        q += 1 + t
    if len(topics) != n_topics:
        raise CorruptFrameError(f"SEND_MULTI topic table holds {len(topics)} names, not {n_topics}")
    p += _pad8(table_len)
    data = bytes(payload[p:])
    arrays = np.frombuffer(data, "<i8", 4 * count + 2 * n).astype(np.int64)
    starts, tags_codes, topic_idx, queue_ids = (arrays[k * count : (k + 1) * count] for k in range(4))
    key_hashes, key_records = arrays[4 * count : 4 * count + n], arrays[4 * count + n :]
    if topic_idx.min() < 0 or topic_idx.max() >= n_topics:
        raise CorruptFrameError("SEND_MULTI topic numbers out of range")
    if queue_ids.min() < -1 or queue_ids.max() > 0xFFFF:
        raise CorruptFrameError("SEND_MULTI queue ids out of range")
    if n and (key_records.min() < 0 or key_records.max() >= count):
        raise CorruptFrameError("SEND_MULTI key record numbers out of range")
    if starts[0] != 0 or (np.diff(starts) <= 0).any() or starts[-1] >= blen:
        raise CorruptFrameError("SEND_MULTI record starts do not fit the records")
    body = memoryview(data)[32 * count + 16 * n :]  # a view of the private copy
    return SendMulti(
        req_id,
        enq,
        flags,
        topics,
        topic_idx,
        queue_ids,
        fmt.EncodedBatch(body, starts, tags_codes, key_hashes, key_records),
    )


@dataclass(slots=True)
class SendMultiResultFrame:
    """Where each record of a SEND_MULTI went: per record a status (SEND_OK, FLUSH_DISK_TIMEOUT,
    ..., or minus an ERROR code, the reason in ``message``), queue id, queue offset and physical
    offset (-1 for a record not stored)."""

    req_id: int
    store_timestamp: int
    store_host: int
    statuses: np.ndarray
    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    phys_offsets: np.ndarray
    message: str = ""  # why records with an error status were refused


def encode_send_multi_result(r: SendMultiResultFrame) -> bytes:
    m = r.message.encode("utf-8")[:MAX_ERROR_MESSAGE]
    head = _MULTI_RESULT.pack(r.req_id, len(r.statuses), len(m), r.store_timestamp, r.store_host)
    cols = np.stack([r.statuses, r.queue_ids, r.queue_offsets, r.phys_offsets]).astype("<i8")
    return head + cols.tobytes() + m


def decode_send_multi_result(payload: ReadBuffer) -> SendMultiResultFrame:
    try:
        req_id, count, mlen, ts, host = _MULTI_RESULT.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("SEND_MULTI_RESULT frame shorter than its header") from None
    _check_len(len(payload), _MULTI_RESULT.size + 32 * count + mlen, "SEND_MULTI_RESULT")
    cols = np.frombuffer(payload, "<i8", 4 * count, _MULTI_RESULT.size).astype(np.int64).reshape(4, count)
    message = bytes(payload[_MULTI_RESULT.size + 32 * count :]).decode("utf-8", "replace")
    return SendMultiResultFrame(req_id, ts, host, cols[0], cols[1], cols[2], cols[3], message)


# --------------------------------------------------------------------------- COMMIT_OFFSET, PULL_WAIT, HEARTBEAT


class CommitOffset(NamedTuple):
    req_id: int
    group: str
    topic: str
    queue_id: int
    offset: int


def encode_commit_offset(req_id: int, group: str, topic: str, queue_id: int, offset: int) -> bytes:
    g, t = group.encode("ascii"), topic.encode("ascii")
    return _COMMIT.pack(req_id, offset, queue_id, len(g), len(t)) + g + t


def decode_commit_offset(payload: ReadBuffer) -> CommitOffset:
    try:
        req_id, offset, qid, g, t = _COMMIT.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("COMMIT_OFFSET frame shorter than its header") from None
    p = _COMMIT.size
    _check_len(len(payload), p + g + t, "COMMIT_OFFSET")
    if not 0 <= qid <= 0xFFFF:
        raise CorruptFrameError(f"COMMIT_OFFSET queue id {qid} is outside 0..65535")
    return CommitOffset(
        req_id, _text(payload[p : p + g], "group"), _text(payload[p + g : p + g + t], "topic"), qid, offset
    )


class PullWait(NamedTuple):
    """Wake me (WAKE frame + doorbell) when queue ``topic``/``queue_id`` grows past ``offset``."""

    req_id: int
    topic: str
    queue_id: int
    offset: int
    timeout_ms: int


def encode_pull_wait(req_id: int, topic: str, queue_id: int, offset: int, timeout_ms: int) -> bytes:
    t = topic.encode("ascii")
    return _PULL.pack(req_id, offset, queue_id, timeout_ms, len(t)) + t


def decode_pull_wait(payload: ReadBuffer) -> PullWait:
    try:
        req_id, offset, qid, timeout_ms, t = _PULL.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("PULL_WAIT frame shorter than its header") from None
    _check_len(len(payload), _PULL.size + t, "PULL_WAIT")
    return PullWait(req_id, _text(payload[_PULL.size :], "topic"), qid, offset, timeout_ms)


def encode_heartbeat(req_id: int) -> bytes:
    return _HEARTBEAT.pack(req_id)


def decode_heartbeat(payload: ReadBuffer) -> int:
    _check_len(len(payload), _HEARTBEAT.size, "HEARTBEAT")
    answer: int = _HEARTBEAT.unpack_from(payload)[0]
    return answer


# --------------------------------------------------------------------------- responses


@dataclass(slots=True)
class SendResultFrame:
    """Where the broker stored a SEND (count 1) or SEND_BATCH (count n, one phys offset each)."""

    req_id: int
    status: int
    queue_id: int
    queue_offset: int
    phys_offset: int
    store_timestamp: int
    store_host: int
    count: int = 1
    phys_offsets: list[int] | None = None


def encode_send_result(r: SendResultFrame) -> bytes:
    head = _RESULT.pack(
        r.req_id, r.status, 0, r.queue_id, r.queue_offset, r.phys_offset, r.store_timestamp, r.store_host, r.count
    )
    if r.count > 1:
        assert r.phys_offsets is not None, "a batch's SEND_RESULT carries each record's phys offset"
        return head + struct.pack(f"<{r.count}q", *r.phys_offsets)
    return head


def batch_result_buffer(count: int) -> tuple[bytearray, np.ndarray]:
    """A SEND_RESULT payload for a batch of ``count`` records, to be filled in place: the buffer
    and its phys offsets as an int64 array over it (where the put writes them)."""
    buf = bytearray(_RESULT.size + 8 * count)
    return buf, np.frombuffer(buf, "<i8", count, _RESULT.size)


def fill_batch_result(
    buf: bytearray,
    req_id: int,
    queue_id: int,
    queue_offset: int,
    phys_offset: int,
    store_timestamp: int,
    store_host: int,
    count: int,
) -> None:
    """The header of a ``batch_result_buffer`` (status SEND_OK): the same payload as
    ``encode_send_result`` of that batch's ``SendResultFrame``."""
    _RESULT.pack_into(
        buf, 0, req_id, SEND_OK, 0, queue_id, queue_offset, phys_offset, store_timestamp, store_host, count
    )


# A run of single-message SEND_RESULTs encoded at once, as whole ring frames ([u32 length][u32
# kind] + payload): the broker answers a batch of SENDs with one numpy fill and one copy into the
# response ring (``Ring.write_packed``) instead of one Python encode and write per message.
RESULT_FRAME = np.dtype(
    [
        ("length", "<u4"),
        ("kind", "<u4"),
        ("req_id", "<u8"),
        ("status", "<u2"),
        ("pad", "<u2"),
        ("queue_id", "<i4"),
        ("queue_offset", "<i8"),
        ("phys_offset", "<i8"),
        ("store_timestamp", "<i8"),
        ("store_host", "<i8"),
        ("count", "<u4"),
        ("pad2", "<u4"),
    ]
)
assert RESULT_FRAME.itemsize == 8 + _RESULT.size and RESULT_FRAME.itemsize % 8 == 0


def pack_send_results(
    req_ids: Sequence[int],
    flags: Sequence[int],
    queue_id: int | np.ndarray,
    first_queue_offset: int | np.ndarray,
    phys_offsets: Sequence[int] | np.ndarray,
    store_timestamp: int,
    store_host: int,
) -> np.ndarray | None:
    """Framed SEND_RESULTs (``RESULT_FRAME`` rows) for the non-oneway ones of SENDs stored together.

    Message ``i`` got queue offset ``first_queue_offset + i`` and physical offset
    ``phys_offsets[i]``, or, for SENDs to several queues, ``queue_id[i]`` and
    ``first_queue_offset[i]`` (arrays); None when every one was oneway. Set ``status`` on the
    rows before ``tobytes()`` if the flush failed.
    """
    n = len(req_ids)
    keep = (np.fromiter(flags, np.uint32, n) & FLAG_ONEWAY) == 0
    if not keep.any():
        return None
    a = np.zeros(n, RESULT_FRAME)
    a["length"] = _RESULT.size
    a["kind"] = SEND_RESULT
    a["req_id"] = req_ids
    a["queue_id"] = queue_id
    a["queue_offset"] = (
        first_queue_offset
        if isinstance(first_queue_offset, np.ndarray)
        else np.arange(first_queue_offset, first_queue_offset + n, dtype=np.int64)
    )
    a["phys_offset"] = phys_offsets
    a["store_timestamp"] = store_timestamp
    a["store_host"] = store_host
    a["count"] = 1
    a["status"] = SEND_OK
    return a if keep.all() else a[keep]


def decode_send_result(payload: ReadBuffer) -> SendResultFrame:
    try:
        req_id, status, _, qid, qoff, phys, ts, host, count = _RESULT.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("SEND_RESULT frame shorter than its header") from None
    if count == 0:
        raise CorruptFrameError("SEND_RESULT with count 0")
    extra = 8 * count if count > 1 else 0
    _check_len(len(payload), _RESULT.size + extra, "SEND_RESULT")
    phys_all = list(struct.unpack_from(f"<{count}q", payload, _RESULT.size)) if count > 1 else None
    return SendResultFrame(req_id, status, qid, qoff, phys, ts, host, count, phys_all)


class Error(NamedTuple):
    req_id: int
    code: int
    message: str


def encode_error(req_id: int, code: int, message: str) -> bytes:
    m = message.encode("utf-8")[:MAX_ERROR_MESSAGE]
    return _ERROR.pack(req_id, code, len(m)) + m


def decode_error(payload: ReadBuffer) -> Error:
    try:
        req_id, code, n = _ERROR.unpack_from(payload)
    except struct.error:
        raise CorruptFrameError("ERROR frame shorter than its header") from None
    _check_len(len(payload), _ERROR.size + n, "ERROR")
    return Error(req_id, code, bytes(payload[_ERROR.size :]).decode("utf-8", "replace"))


class Wake(NamedTuple):
    """Answer to PULL_WAIT: the queue's max offset now, and whether the wait just timed out."""

    req_id: int
    max_offset: int
    timed_out: bool


def encode_wake(req_id: int, max_offset: int, timed_out: bool) -> bytes:
    return _WAKE.pack(req_id, max_offset, int(timed_out))


def decode_wake(payload: ReadBuffer) -> Wake:
    _check_len(len(payload), _WAKE.size, "WAKE")
    req_id, max_offset, timed_out = _WAKE.unpack_from(payload)
    return Wake(req_id, max_offset, bool(timed_out))


Frame: TypeAlias = (
    Send | SendBatch | SendMulti | CommitOffset | PullWait | int | SendResultFrame | SendMultiResultFrame | Error | Wake
)
"""What ``decode`` returns: a HEARTBEAT decodes to its request id, every other kind to its tuple."""

_DECODERS: dict[int, Callable[[ReadBuffer], Frame]] = {
    SEND: decode_send,
    SEND_BATCH: decode_send_batch,
    COMMIT_OFFSET: decode_commit_offset,
    PULL_WAIT: decode_pull_wait,
    HEARTBEAT: decode_heartbeat,
    SEND_RESULT: decode_send_result,
    ERROR: decode_error,
    WAKE: decode_wake,
    SEND_MULTI: decode_send_multi,
    SEND_MULTI_RESULT: decode_send_multi_result,
}


def decode(kind: int, payload: ReadBuffer) -> Frame:
    """Decode any frame by kind; ``CorruptFrameError`` for an unknown kind or malformed payload."""
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise CorruptFrameError(f"unknown frame kind {kind}")
    return decoder(payload)
