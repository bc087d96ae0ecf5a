"""The pop log's byte layout (``<store>/pop/pop.log``): the broker's POP state as an append-only
list of CRC'd records. Pure: bytes in, records out; decoding stops at the first record that is
not whole and sound (a torn tail) and says where.

File: the magic ``SHMQPOP1`` (8 bytes), then records, each a multiple of 8 bytes::

    size u32 (the whole record), crc u32 (CRC32 of the record after this field), kind u8,
    group_len u8, topic_len u8, pad u8, queue_id u32, value i64, count u32, pad u32 |
    group, topic, pad8 | rows: count * ROW (56 bytes each)
    ROW = queue_offset i64, token i64, deadline_ms i64, commitlog_offset i64, client i64,
          size i32, attempt i32, max_attempts i32, flags i32 (FLAG_FIFO)

Kinds: CHECKPOINT (``value`` = the queue's cursor when written, so the last one is current;
``rows`` are put in flight, or replace the row at their offset: a FIFO redelivery, a new
invisible time), SETTLE (the rows at
these offsets are done: acked or revived; only ``queue_offset`` is read) and TOKEN (``value``
= the next token; no group or queue: written first by a compaction, so a token is never
reused even when nothing is in flight).
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

import numpy as np

MAGIC = b"SHMQPOP1"
CHECKPOINT = 1
SETTLE = 2
TOKEN = 3
KINDS = (CHECKPOINT, SETTLE, TOKEN)
ROW_FIFO = 0x1

_HEAD = struct.Struct("<IIBBBxIqI4x")
ROW = np.dtype(
    [
        ("queue_offset", "<i8"),
        ("token", "<i8"),
        ("deadline_ms", "<i8"),
        ("commitlog_offset", "<i8"),
        ("client", "<i8"),
        ("size", "<i4"),
        ("attempt", "<i4"),
        ("max_attempts", "<i4"),
        ("flags", "<i4"),
    ]
)
assert ROW.itemsize == 56
MAX_ROWS = 1 << 20  # rows of one record (a compaction writes a queue's rows in records of at most this many)


class PopLogRecord(NamedTuple):
    kind: int
    group: str
    topic: str
    queue_id: int
    value: int  # CHECKPOINT: the cursor; TOKEN: the next token; SETTLE: 0
    rows: np.ndarray  # of ROW


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def encode(kind: int, group: str, topic: str, queue_id: int, value: int, rows: np.ndarray | None = None) -> bytes:
    """One record; ``rows`` of ROW (None: no rows)."""
    if rows is None:
        rows = np.zeros(0, ROW)
    g, t = group.encode("ascii"), topic.encode("ascii")
    names = g + t
    body = names + bytes(_pad8(len(names)) - len(names)) + rows.astype(ROW, copy=False).tobytes()
    size = _HEAD.size + len(body)
    tail = _HEAD.pack(size, 0, kind, len(g), len(t), queue_id, value, len(rows))[8:] + body
    return struct.pack("<II", size, zlib.crc32(tail)) + tail


def settle_rows(offsets: list[int]) -> np.ndarray:
    """The rows of a SETTLE record: only their queue offsets count."""
    out = np.zeros(len(offsets), ROW)
    out["queue_offset"] = offsets
    return out


class Decoded(NamedTuple):
    records: list[PopLogRecord]
    end: int  # bytes of the file that are whole, sound records (with the magic)
    problem: str | None  # why decoding stopped before the end (None: it read to the end)


def decode(data: bytes | memoryview) -> Decoded:
    """The records of a pop log file's bytes, up to the first one that is not sound."""
    view = memoryview(data)
    if len(view) < len(MAGIC):
        return Decoded([], 0, f"file of {len(view)} bytes has no header" if len(view) else None)
    if bytes(view[: len(MAGIC)]) != MAGIC:
        return Decoded([], 0, "file does not start with the pop log's magic")
    records: list[PopLogRecord] = []
    p = len(MAGIC)
    while p < len(view):
        rec, problem = _record(view, p)
        if rec is None:
            return Decoded(records, p, f"record at byte {p}: {problem}")
        records.append(rec)
        p += _HEAD.unpack_from(view, p)[0]
    return Decoded(records, p, None)


def _record(view: memoryview, p: int) -> tuple[PopLogRecord | None, str]:
    if p + _HEAD.size > len(view):
        return None, f"{len(view) - p} bytes, shorter than a record header"
    size, crc, kind, g, t, qid, value, n = _HEAD.unpack_from(view, p)
    want = _HEAD.size + _pad8(g + t) + n * ROW.itemsize
    if size != want or p + size > len(view):
        return None, f"size {size} does not match its fields ({want}) or runs past the file"
    if zlib.crc32(view[p + 8 : p + size]) != crc:
        return None, "CRC mismatch"
    if kind not in KINDS:
        return None, f"unknown kind {kind}"
    q = p + _HEAD.size
    try:
        group = bytes(view[q : q + g]).decode("ascii")
        topic = bytes(view[q + g : q + g + t]).decode("ascii")
    except UnicodeDecodeError:
        return None, "a name is not ASCII"
    rows = np.frombuffer(view, ROW, n, q + _pad8(g + t)).copy()
    return PopLogRecord(kind, group, topic, qid, value, rows), ""
