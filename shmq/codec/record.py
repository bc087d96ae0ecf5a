"""Byte layouts of everything shmq stores (docs/FORMAT.md is the prose twin of this module).

This is the only module that knows where a field sits in a commitlog record, a consume-queue
entry or an index file; the store, the replica and the Spark job all go through it. Pure code:
no I/O, so every layout can be tested on plain byte buffers.
"""

from __future__ import annotations

import functools
import re
import struct
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from shmq import _speedups
from shmq.codec.buffers import ReadBuffer, WriteBuffer
from shmq.codec.ids import offset_msg_id
from shmq.errors import BadPropertiesError, BadTopicError, MessageTooLargeError
from shmq.errors import CorruptRecordError as CorruptRecordError  # re-exported: what the decoders raise

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

# --------------------------------------------------------------------------- commitlog record

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194

# Field offsets inside a record (big-endian, packed, RocketMQ's order).
OFF_TOTALSIZE = 0
OFF_MAGIC = 4
OFF_BODYCRC = 8
OFF_QUEUEID = 12
OFF_FLAG = 16
OFF_QUEUEOFFSET = 20
OFF_PHYSICALOFFSET = 28
OFF_SYSFLAG = 36
OFF_BORNTIMESTAMP = 40
OFF_BORNHOST = 48
OFF_STORETIMESTAMP = 56
OFF_STOREHOST = 64
OFF_RECONSUMETIMES = 72
OFF_PREPAREDTXOFFSET = 76
OFF_BODYLEN = 84
OFF_BODY = 88

HEADER = struct.Struct(">iIiiiqqiqqqqiqi")
assert HEADER.size == OFF_BODY
FIXED_OVERHEAD = OFF_BODY + 1 + 2  # header + topic length byte + properties length short = 91
BLANK = struct.Struct(">iI")  # end-of-segment filler: remaining size, BLANK_MAGIC
MIN_BLANK = BLANK.size

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")

# SYSFLAG bits
FLAG_COMPRESSED = 0x1
FLAG_MULTI_TAGS = 0x2
TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC

# Limits
MAX_MESSAGE_SIZE = 4 * 1024 * 1024  # body, like RocketMQ's maxMessageSize
MAX_TOPIC_LENGTH = 127
MAX_PROPERTIES_LENGTH = 32767
MAX_RECORD_SIZE = FIXED_OVERHEAD + MAX_MESSAGE_SIZE + MAX_TOPIC_LENGTH + MAX_PROPERTIES_LENGTH
TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")

# Property keys the broker reads (RocketMQ's names).
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_PGROUP = "PGROUP"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"  # absolute delivery time, epoch ms (RocketMQ 5)
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"  # delivery this many ms after the broker receives it
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"  # due time (epoch ms) of a parked delayed or timer message
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "


def record_size(body_len: int, topic_len: int, props_len: int) -> int:
    """Total size of a record with these variable parts."""
    return FIXED_OVERHEAD + body_len + topic_len + props_len


def body_crc(body: ReadBuffer) -> int:
    """BODYCRC as RocketMQ stores it: crc32 of the body with the sign bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


def crc32_of_variants(first_crc: int, suffixes: np.ndarray) -> np.ndarray:
    """zlib.crc32 of strings that differ only in their last k bytes, given the first one's crc.

    ``suffixes`` is an (n, k) uint8 array of those last bytes (row 0 belongs to ``first_crc``).
    CRC-32 is affine over GF(2): for equal lengths, crc(a) ^ crc(b) depends only on a ^ b, and
    for a difference confined to the last k bytes it is a XOR of one table entry per byte. So a
    batch's UNIQ_KEY index hashes cost a numpy gather instead of one zlib call per message.
    """
    k = suffixes.shape[1]
    table = _crc32_byte_table(k).reshape(-1)
    diff = suffixes ^ suffixes[0]
    cols = np.flatnonzero(diff.any(axis=0))  # bytes equal in all strings (a key's prefix) add nothing
    lanes = diff[:, cols].astype(np.intp)
    lanes += cols * 256  # one flat gather: half the time of table[arange, diff]
    answer: np.ndarray = np.bitwise_xor.reduce(table[lanes], axis=1).astype(np.int64) ^ first_crc
    return answer


@functools.lru_cache(maxsize=8)
def _crc32_byte_table(k: int) -> np.ndarray:
    """(k, 256) uint32: what byte value v at position j of the last k bytes contributes to the crc."""
    zero = zlib.crc32(bytes(k))
    table = np.zeros((k, 256), np.uint32)
    for j in range(k):
        for v in range(256):
            b = bytearray(k)
            b[j] = v
            table[j, v] = zlib.crc32(bytes(b)) ^ zero
    return table


def crc32_rows(rows: np.ndarray) -> np.ndarray:
    """zlib.crc32 of each row of an (n, k) uint8 array, as int64, without a Python step per row.

    Slicing-by-8 run across the rows at once: each step folds 8 bytes of every row into its
    crc with eight table gathers. About twice as fast as a zlib call per row for 100-byte rows
    (the call, not the bytes, is what costs there); for rows that differ in a few bytes only,
    ``crc32_of_variants`` is cheaper still.
    """
    n, k = rows.shape
    tables = _slicing_tables()
    words = np.ascontiguousarray(rows)[:, : k - k % 8].view("<u4").T.copy()  # (2 * k // 8, n): rows as columns
    crc = np.full(n, 0xFFFFFFFF, np.uint32)
    lane = np.empty(n, np.uint32)
    acc = np.empty(n, np.uint32)
    for j in range(0, len(words), 2):
        crc ^= words[j]
        np.bitwise_and(crc, 0xFF, out=lane)
        np.take(tables[7], lane, out=acc)
        for t, (word, shift) in enumerate(
            (
                (crc, 8),
                (crc, 16),
                (crc, 24),
                (words[j + 1], 0),
                (words[j + 1], 8),
                (words[j + 1], 16),
                (words[j + 1], 24),
            )
        ):
            np.right_shift(word, shift, out=lane)
            lane &= 0xFF
            acc ^= tables[6 - t][lane]
        crc, acc = acc, crc
    for j in range(k - k % 8, k):  # the last bytes one at a time
        crc = tables[0][(crc ^ rows[:, j]) & 0xFF] ^ (crc >> 8)
    return (crc ^ 0xFFFFFFFF).astype(np.int64)


@functools.lru_cache(maxsize=1)
def _slicing_tables() -> np.ndarray:
    """(8, 256) uint32: table t maps a byte to its crc contribution t bytes before the end of an 8-byte step."""
    first = np.array([zlib.crc32(bytes([v])) ^ zlib.crc32(b"\0") for v in range(256)], np.uint32)
    tables = np.empty((8, 256), np.uint32)
    tables[0] = first
    for t in range(1, 8):
        tables[t] = (tables[t - 1] >> 8) ^ first[tables[t - 1] & 0xFF]
    return tables


def enters_consume_queue(sysflag: int) -> bool:
    """Prepared and rolled-back transaction records are never visible to consumers."""
    t = sysflag & TRANSACTION_MASK
    return t in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT)


# --------------------------------------------------------------------------- validation


@functools.lru_cache(maxsize=4096)
def check_topic(topic: str) -> bytes:
    """Validate a topic name as RocketMQ does and return its bytes (cached: called per message)."""
    if not isinstance(topic, str) or not topic:
        raise BadTopicError(f"topic must be a non-empty string, got {topic!r}")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise BadTopicError(f"topic {topic[:20]!r}... is {len(topic)} chars; at most {MAX_TOPIC_LENGTH}")
    if not TOPIC_PATTERN.match(topic):
        raise BadTopicError(f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]")
    return topic.encode("ascii")


def encode_properties(props: Mapping[str, str] | None) -> bytes:
    """`key\x01value\x02` repeated; keys and values may not contain the two separators."""
    if not props:
        return b""
    parts = []
    for k, v in props.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise BadPropertiesError(f"property {k!r}={v!r}: keys and values must be str")
        if not k:
            raise BadPropertiesError("property key must not be empty")
        for s in (k, v):
            if NAME_VALUE_SEPARATOR in s or PROPERTY_SEPARATOR in s:
                raise BadPropertiesError(f"property {k!r}: \\x01 and \\x02 are reserved separators")
        parts.append(f"{k}\x01{v}\x02")
    raw = "".join(parts).encode("utf-8")
    if len(raw) > MAX_PROPERTIES_LENGTH:
        raise BadPropertiesError(f"properties are {len(raw)} bytes encoded; at most {MAX_PROPERTIES_LENGTH}")
    return raw


def decompress_body(raw: ReadBuffer, phys: int) -> bytes:
    """The body of a record whose SYSFLAG says compressed (zlib), as consumers see it.
    CorruptRecordError naming the record when it does not decompress: SYSFLAG is not covered
    by a check, so a damaged flag shows only here, and callers treat it as any damaged record."""
    try:
        return zlib.decompress(raw)
    except zlib.error as e:
        raise CorruptRecordError(
            f"commitlog record at offset {phys}: its body is flagged compressed but does not "
            f"decompress ({e}); damaged, `shmq admin store verify` checks the store"
        ) from None


def decode_properties(raw: bytes | memoryview) -> dict[str, str]:
    """Inverse of encode_properties; bytes that are not UTF-8 are replaced, never an error."""
    if not raw:
        return {}
    text = bytes(raw).decode("utf-8", "replace")
    out: dict[str, str] = {}
    for item in text.split("\x02"):
        if item:
            k, _, v = item.partition("\x01")
            out[k] = v
    return out


# --------------------------------------------------------------------------- encode / decode


def encode_message(
    topic: str,
    body: bytes,
    *,
    queue_id: int = 0,
    flag: int = 0,
    properties: Mapping[str, str] | None = None,
    sysflag: int = 0,
    born_timestamp: int | None = None,
    born_host: int = 0,
    reconsume_times: int = 0,
    prepared_tx_offset: int = 0,
    crc: int | None = None,
) -> bytes:
    """Encode a record as a client hands it to the store: broker-owned fields left zero.

    The store fills QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP and STOREHOST when it appends.
    """
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise TypeError(f"message body must be bytes, got {type(body).__name__}")
    topic_b = check_topic(topic)
    if len(body) > MAX_MESSAGE_SIZE:
        raise MessageTooLargeError(f"message body is {len(body)} bytes; at most {MAX_MESSAGE_SIZE}")
    props_b = encode_properties(properties)
    buf = bytearray(record_size(len(body), len(topic_b), len(props_b)))
    pack_message_into(
        buf,
        0,
        topic_b,
        body,
        props_b,
        body_crc(body) if crc is None else crc,
        flag=flag,
        sysflag=sysflag,
        queue_id=queue_id,
        born_timestamp=int(time.time() * 1000) if born_timestamp is None else born_timestamp,
        born_host=born_host,
        reconsume_times=reconsume_times,
        prepared_tx_offset=prepared_tx_offset,
    )
    return bytes(buf)


def pack_message_into(
    buf: WriteBuffer,
    pos: int,
    topic_b: bytes,
    body: ReadBuffer,
    props_b: bytes,
    crc: int,
    *,
    flag: int = 0,
    sysflag: int = 0,
    queue_id: int = 0,
    born_timestamp: int = 0,
    born_host: int = 0,
    reconsume_times: int = 0,
    prepared_tx_offset: int = 0,
) -> int:
    """Write a record at `pos` of a writable buffer (a ring slot: no intermediate copy); returns its size.

    Arguments are already checked and encoded (see encode_message); store-owned fields are left zero.
    """
    body_len = len(body)
    size = FIXED_OVERHEAD + body_len + len(topic_b) + len(props_b)
    HEADER.pack_into(
        buf,
        pos,
        size,
        MESSAGE_MAGIC,
        crc,
        queue_id,
        flag,
        0,
        0,
        sysflag,
        born_timestamp,
        born_host,
        0,
        0,
        reconsume_times,
        prepared_tx_offset,
        body_len,
    )
    p = pos + OFF_BODY
    buf[p : p + body_len] = body
    p += body_len
    buf[p] = len(topic_b)
    buf[p + 1 : p + 1 + len(topic_b)] = topic_b
    p += 1 + len(topic_b)
    _U16.pack_into(buf, p, len(props_b))
    buf[p + 2 : p + 2 + len(props_b)] = props_b
    return size


HEADER_DTYPE = np.dtype(
    {
        "names": [
            "total_size",
            "magic",
            "body_crc",
            "queue_id",
            "flag",
            "queue_offset",
            "physical_offset",
            "sysflag",
            "born_timestamp",
            "born_host",
            "store_timestamp",
            "store_host",
            "reconsume_times",
            "prepared_tx_offset",
            "body_len",
        ],
        "formats": [
            ">i4",
            ">u4",
            ">i4",
            ">i4",
            ">i4",
            ">i8",
            ">i8",
            ">i4",
            ">i8",
            ">i8",
            ">i8",
            ">i8",
            ">i4",
            ">i8",
            ">i4",
        ],
        "offsets": [
            OFF_TOTALSIZE,
            OFF_MAGIC,
            OFF_BODYCRC,
            OFF_QUEUEID,
            OFF_FLAG,
            OFF_QUEUEOFFSET,
            OFF_PHYSICALOFFSET,
            OFF_SYSFLAG,
            OFF_BORNTIMESTAMP,
            OFF_BORNHOST,
            OFF_STORETIMESTAMP,
            OFF_STOREHOST,
            OFF_RECONSUMETIMES,
            OFF_PREPAREDTXOFFSET,
            OFF_BODYLEN,
        ],
        "itemsize": OFF_BODY,
    }
)


def pack_records(
    topic_b: bytes,
    bodies: Sequence[ReadBuffer],
    props: list[bytes],
    crcs: ArrayLike,
    flags: ArrayLike | None = None,
    sysflags: ArrayLike | None = None,
    born_timestamp: int = 0,
    born_host: int = 0,
) -> tuple[bytes, np.ndarray]:
    """Records of one topic back to back (a batch); arguments are already checked and encoded.

    Returns the buffer and each record's start.
    """
    topic_part = bytes([len(topic_b)]) + topic_b
    tails = [topic_part + len(p).to_bytes(2, "big") + p for p in props]
    return pack_records_with_tails(bodies, tails, crcs, flags, sysflags, born_timestamp, born_host)


def pack_records_with_tails(
    bodies: Sequence[ReadBuffer],
    tails: Sequence[bytes] | np.ndarray,
    crcs: ArrayLike,
    flags: ArrayLike | None = None,
    sysflags: ArrayLike | None = None,
    born_timestamp: int = 0,
    born_host: int = 0,
) -> tuple[bytes, np.ndarray]:
    """Records from bodies and tails (what follows a body: topic length, topic, properties length, properties).

    ``tails`` is a list of bytes, or a 2-D uint8 array when all tails have one length. The
    headers are built as one numpy array. Equal-length bodies with array tails (a batch of
    fixed-size messages with like metadata) are laid out as one 2-D array; anything else comes
    out of one ``bytes.join`` instead of a pack_into and four slice copies per record.
    """
    n = len(bodies)
    body_lens = np.fromiter(map(len, bodies), np.int64, n)
    tail_lens = (
        np.full(n, tails.shape[1], np.int64)
        if isinstance(tails, np.ndarray)
        else np.fromiter(map(len, tails), np.int64, n)
    )
    sizes = OFF_BODY + body_lens + tail_lens
    h = np.zeros(n, HEADER_DTYPE)
    h["total_size"] = sizes
    h["magic"] = MESSAGE_MAGIC
    h["body_crc"] = crcs
    if flags is not None:
        h["flag"] = flags
    if sysflags is not None:
        h["sysflag"] = sysflags
    h["born_timestamp"] = born_timestamp
    h["born_host"] = born_host
    h["body_len"] = body_lens
    starts = np.zeros(n, np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    body_len = int(body_lens[0])
    if isinstance(tails, np.ndarray) and (body_lens == body_len).all():
        rows = np.empty((n, int(sizes[0])), np.uint8)
        rows[:, :OFF_BODY] = h.view(np.uint8).reshape(n, OFF_BODY)
        rows[:, OFF_BODY : OFF_BODY + body_len] = np.frombuffer(b"".join(bodies), np.uint8).reshape(n, body_len)
        rows[:, OFF_BODY + body_len :] = tails
        return rows.tobytes(), starts
    if isinstance(tails, np.ndarray):
        tails = tails.view(f"V{tails.shape[1]}").ravel().tolist()
    parts: list[ReadBuffer] = [b""] * (3 * n)  # every slot is set below
    parts[0::3] = h.view(f"V{OFF_BODY}").tolist()
    parts[1::3] = bodies
    parts[2::3] = tails
    return b"".join(parts), starts


@dataclass(slots=True)
class StoredRecord:
    """A decoded commitlog record. `body` is a view into the buffer it came from."""

    total_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sysflag: int
    born_timestamp: int
    born_host: int
    store_timestamp: int
    store_host: int
    reconsume_times: int
    prepared_tx_offset: int
    body: memoryview
    topic: str
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return split_keys(self.properties.get(PROPERTY_KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.physical_offset)


def split_keys(keys: str | None) -> list[str]:
    return [k for k in keys.split(KEY_SEPARATOR) if k] if keys else []


def decode_record(buf: ReadBuffer, pos: int = 0) -> StoredRecord:
    """Decode the record at `pos`; raises CorruptRecordError if it is not a well-formed record.

    Every length is checked against the buffer and TOTALSIZE before it is used: callers hand
    this bytes that may be damaged (a consume-queue entry's target, a file on disk), and the
    documented error is their one way to tell (never struct.error or IndexError)."""
    mv = memoryview(buf)
    end = mv.nbytes
    if pos < 0 or end - pos < OFF_BODY:
        raise CorruptRecordError(f"record at {pos}: {max(end - pos, 0)} bytes, shorter than a record header")
    (
        size,
        magic,
        crc,
        qid,
        flag,
        qoff,
        phys,
        sysflag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prep,
        body_len,
    ) = HEADER.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        raise CorruptRecordError(f"bad magic {magic:#x} at {pos}")
    if size < FIXED_OVERHEAD or size > end - pos:
        raise CorruptRecordError(f"record at {pos}: TOTALSIZE {size} does not fit the {end - pos} bytes there")
    if body_len < 0 or OFF_BODY + body_len + 3 > size:
        raise CorruptRecordError(f"record at {pos}: BODYLEN {body_len} does not fit TOTALSIZE {size}")
    p = pos + OFF_BODY
    body = mv[p : p + body_len]
    p += body_len
    topic_len = mv[p]
    if p + 1 + topic_len + 2 > pos + size:
        raise CorruptRecordError(f"record at {pos}: topic length {topic_len} does not fit TOTALSIZE {size}")
    topic = bytes(mv[p + 1 : p + 1 + topic_len]).decode("ascii", "replace")
    p += 1 + topic_len
    (props_len,) = _U16.unpack_from(buf, p)
    if record_size(body_len, topic_len, props_len) != size:
        raise CorruptRecordError(f"record at {pos}: sizes do not add up to TOTALSIZE {size}")
    props = decode_properties(mv[p + 2 : p + 2 + props_len])
    return StoredRecord(
        size,
        crc,
        qid,
        flag,
        qoff,
        phys,
        sysflag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prep,
        body,
        topic,
        props,
    )


@dataclass(slots=True)
class EncodedBatch:
    """Records of one topic packed back to back, with what the client computes for dispatch.

    Producers do the per-message work (encoding, tag hash, key hashes) so the broker only
    copies and patches; `key_records[i]` is the record that `key_hashes[i]` belongs to.
    """

    buf: bytes | memoryview  # a view of a private copy when decoded from a frame
    starts: np.ndarray
    tags_codes: np.ndarray
    key_hashes: np.ndarray
    key_records: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)


def message_properties(
    tags: str | None = None, keys: str | None = None, uniq_key: str | None = None, user: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Properties in shmq's order: TAGS first (readers check tags at a fixed place), then the rest."""
    props: dict[str, str] = {}
    if tags:
        props[PROPERTY_TAGS] = tags
    if keys:
        props[PROPERTY_KEYS] = keys
    if uniq_key:
        props[PROPERTY_UNIQ_KEY] = uniq_key
    if user:
        props.update(user)
    return props


def encode_batch(
    topic: str, bodies: list[bytes], properties: list[Mapping[str, str] | None] | None = None, born_host: int = 0
) -> EncodedBatch:
    """Encode records for one topic and precompute their tag hashes and index key hashes."""
    topic_b = check_topic(topic)
    props_list = properties if properties is not None else [None] * len(bodies)
    for body in bodies:
        if len(body) > MAX_MESSAGE_SIZE:
            raise MessageTooLargeError(f"message body is {len(body)} bytes; at most {MAX_MESSAGE_SIZE}")
    tags, key_hashes, key_records = [], [], []
    for i, props in enumerate(props_list):
        props = props or {}
        tags.append(tags_code(props.get(PROPERTY_TAGS)))
        hashes = record_key_hashes(topic, props.get(PROPERTY_UNIQ_KEY), props.get(PROPERTY_KEYS))
        key_hashes += hashes
        key_records += [i] * len(hashes)
    buf, starts = pack_records(
        topic_b,
        bodies,
        [encode_properties(p) for p in props_list],
        [body_crc(b) for b in bodies],
        born_timestamp=int(time.time() * 1000),
        born_host=born_host,
    )
    return EncodedBatch(
        buf, starts, np.array(tags, np.int64), np.array(key_hashes, np.int64), np.array(key_records, np.int64)
    )


def concat_batches(batches: Sequence[EncodedBatch]) -> EncodedBatch:
    """Batches (of any topics) packed back to back as one, for ``MessageStore.put``."""
    sizes = [len(b.buf) for b in batches]
    base = np.cumsum([0, *sizes[:-1]]).astype(np.int64)
    firsts = np.cumsum([0] + [len(b) for b in batches[:-1]]).astype(np.int64)
    return EncodedBatch(
        b"".join(bytes(b.buf) for b in batches),
        np.concatenate([b.starts + o for b, o in zip(batches, base)]),
        np.concatenate([b.tags_codes for b in batches]),
        np.concatenate([b.key_hashes for b in batches]),
        np.concatenate([b.key_records + f for b, f in zip(batches, firsts)]),
    )


def select_records(batch: EncodedBatch, rows: np.ndarray) -> EncodedBatch:
    """The records ``rows`` (ascending) of a batch, packed anew with their dispatch data."""
    buf = memoryview(batch.buf)
    ends = np.append(batch.starts[1:], len(buf))
    pieces = [buf[s:e] for s, e in zip(batch.starts[rows].tolist(), ends[rows].tolist())]
    sizes = np.fromiter(map(len, pieces), np.int64, len(pieces))
    new_number = np.full(len(batch), -1, np.int64)
    new_number[rows] = np.arange(len(rows))
    keys = new_number[batch.key_records] >= 0
    return EncodedBatch(
        b"".join(pieces),
        np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64),
        batch.tags_codes[rows],
        batch.key_hashes[keys],
        new_number[batch.key_records[keys]],
    )


# --------------------------------------------------------------------------- recovery check

RECORD_OK = 0
RECORD_BLANK = 1  # end-of-segment filler: continue in the next segment
RECORD_END = 2  # no record here: the log ends at this position unless a valid record follows (resync)
RECORD_BAD_CRC = 3  # a whole record, written by the store, whose body does not match BODYCRC
RECORD_DAMAGED = 4  # (scan_segment only) bytes that are no record, with a valid record after them


def check_record(
    buf: ReadBuffer, pos: int, limit: int, expected_offset: int, verify_crc: bool = True
) -> tuple[int, int]:
    """Classify the bytes at `pos` (no further than `limit`) during a recovery scan.

    Returns (status, size). A record is OK only if its magic, sizes, PHYSICALOFFSET (which the
    store writes last) and, when asked, body CRC all agree. A record that is whole but fails
    only the CRC is RECORD_BAD_CRC (the caller decides by what follows it); anything else is
    RECORD_END: no record here (``scan_segment`` decides whether that is the log's torn tail
    or damage with valid records after it).
    """
    if limit - pos < MIN_BLANK:
        return RECORD_END, 0
    size, magic = BLANK.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return (RECORD_BLANK, size) if size == limit - pos else (RECORD_END, 0)
    if magic != MESSAGE_MAGIC or size < FIXED_OVERHEAD or size > limit - pos:
        return RECORD_END, 0
    (_, _, crc, _, _, _, phys, _, _, _, store_ts, _, _, _, body_len) = HEADER.unpack_from(buf, pos)
    if phys != expected_offset or store_ts <= 0 or body_len < 0 or OFF_BODY + body_len + 3 > size:
        return RECORD_END, 0
    p = pos + OFF_BODY + body_len
    topic_len = buf[p]
    if p + 1 + topic_len + 2 > pos + size:
        return RECORD_END, 0
    (props_len,) = _U16.unpack_from(buf, p + 1 + topic_len)
    if record_size(body_len, topic_len, props_len) != size:
        return RECORD_END, 0
    # BODYCRC does not cover topic and properties: a tail torn inside them (zeroed by a crash)
    # shows as a NUL last topic byte or properties not ending in their separator (0x02).
    if topic_len == 0 or buf[p + topic_len] == 0 or (props_len and buf[pos + size - 1] != 0x02):
        return RECORD_END, 0
    if verify_crc and body_crc(memoryview(buf)[pos + OFF_BODY : p]) != crc:
        return RECORD_BAD_CRC, size
    return RECORD_OK, size


check_record = _speedups.pick("_record", "check_record", check_record)


def scan_segment(
    buf: ReadBuffer, pos: int, limit: int, base_offset: int, verify_crc: bool = False
) -> Iterator[tuple[int, int, int]]:
    """Yield (status, position, size) of the records of one segment from `pos`.

    Ends after RECORD_BLANK (go on in the next segment) or RECORD_END. A record failing only
    its CRC is yielded as RECORD_BAD_CRC when a good record, the segment's blank or a damaged
    range with a good record after it follows (the store wrote past it, so it is not a torn
    tail: a client sent a wrong CRC or the disk corrupted it later). Bytes that are no record
    but have a valid record after them (``resync``) are yielded as one RECORD_DAMAGED range:
    damage in the middle of the log, skipped, never a reason to cut what follows. Only when
    nothing valid follows is it the log's end (a torn tail).
    """
    while True:
        status, size = check_record(buf, pos, limit, base_offset + pos, verify_crc)
        if status == RECORD_BAD_CRC:
            nxt, _ = check_record(buf, pos + size, limit, base_offset + pos + size, verify_crc)
            if nxt not in (RECORD_OK, RECORD_BLANK) and resync(buf, pos + size, limit, base_offset) < 0:
                status = RECORD_END
        if status == RECORD_END:
            at = resync(buf, pos, limit, base_offset)
            if at < 0:
                yield status, pos, 0
                return
            status, size = RECORD_DAMAGED, at - pos
        yield status, pos, size
        if status == RECORD_BLANK:
            return
        pos += size


_MAGIC_BYTES = _U32.pack(MESSAGE_MAGIC)
_BLANK_MAGIC_BYTES = _U32.pack(BLANK_MAGIC)
RESYNC_CHUNK = 1 << 20  # bytes searched at a time for the next record (one copy of that size)


def resync(buf: ReadBuffer, pos: int, limit: int, base_offset: int) -> int:
    """Where the next valid record (or the segment's blank) starts after bad bytes at `pos`;
    -1 if none does before `limit`.

    A search forward for the record magic: a candidate counts only if its magic, sizes,
    PHYSICALOFFSET (its own position) and body CRC all check. A record is tied to its place in
    the log, so stray bytes inside a body never pass for one, and the first candidate is the
    record that really follows. (The bad record's own TOTALSIZE is not trusted: a changed one
    can point exactly at a later record and swallow whole records in between.)
    """
    at = pos + 1
    data = np.frombuffer(buf, np.uint8)
    while at + MIN_BLANK <= limit:
        stop = min(limit, at + RESYNC_CHUNK)
        chunk = data[at : min(limit, stop + MIN_BLANK)]
        if not chunk.any():  # a log's zero tail (never written, or warmed ahead): nothing to find
            at = stop
            continue
        window = chunk.tobytes()
        hits = sorted(h for magic in (_MAGIC_BYTES, _BLANK_MAGIC_BYTES) for h in _find_all(window, magic))
        for h in hits:
            cand = at + h - OFF_MAGIC
            if cand >= at and cand < stop and _resumes(buf, cand, limit, base_offset):
                return cand
        at = stop
    return -1


def _find_all(window: bytes, needle: bytes) -> Iterator[int]:
    i = window.find(needle)
    while i >= 0:
        yield i
        i = window.find(needle, i + 1)


def _resumes(buf: ReadBuffer, pos: int, limit: int, base_offset: int) -> bool:
    """A record with a matching body CRC, or the segment's blank, starts at `pos`."""
    if pos >= limit:
        return False
    return check_record(buf, pos, limit, base_offset + pos, True)[0] in (RECORD_OK, RECORD_BLANK)


# --------------------------------------------------------------------------- batch patching


def walk_batch(buf: ReadBuffer, count: int | None = None) -> np.ndarray:
    """Start positions of the records packed back to back in `buf` (by their TOTALSIZE)."""
    starts: list[int] = []
    pos, end = 0, len(buf)
    while pos < end and (count is None or len(starts) < count):
        (size,) = _I32.unpack_from(buf, pos)
        if size < FIXED_OVERHEAD or pos + size > end:
            raise CorruptRecordError(f"batch record at {pos} has TOTALSIZE {size}, buffer is {end}")
        starts.append(pos)
        pos += size
    return np.asarray(starts, dtype=np.int64)


_BYTE_LANES8 = np.arange(8, dtype=np.int64)
# Bytes of the header fields a batch is validated by: TOTALSIZE, MAGICCODE, BODYCRC, SYSFLAG, BODYLEN.
CHECK_LANES = np.concatenate(
    [np.arange(o, o + 4) for o in (OFF_TOTALSIZE, OFF_MAGIC, OFF_BODYCRC, OFF_SYSFLAG, OFF_BODYLEN)]
).astype(np.int64)
# Bytes the store owns: QUEUEID, STORETIMESTAMP + STOREHOST (the same for a whole batch), then
# QUEUEOFFSET + PHYSICALOFFSET, written last so a record whose PHYSICALOFFSET is set is whole.
CONST_PATCH_LANES = np.concatenate(
    [np.arange(OFF_QUEUEID, OFF_QUEUEID + 4), np.arange(OFF_STORETIMESTAMP, OFF_STOREHOST + 8)]
).astype(np.int64)
OFFSET_PATCH_LANES = np.arange(OFF_QUEUEOFFSET, OFF_PHYSICALOFFSET + 8, dtype=np.int64)
_CONST_PATCH = struct.Struct(">iqq")
QUEUEID_LANES = np.arange(OFF_QUEUEID, OFF_QUEUEID + 4, dtype=np.int64)
STAMP_HOST_LANES = np.arange(OFF_STORETIMESTAMP, OFF_STOREHOST + 8, dtype=np.int64)
_STAMP_HOST = struct.Struct(">qq")


def gather_header_fields(src: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(n, 5) int64: TOTALSIZE, MAGICCODE (unsigned), BODYCRC, SYSFLAG, BODYLEN of each record; one gather."""
    fields = np.ascontiguousarray(src[starts[:, None] + CHECK_LANES]).view(">i4").astype(np.int64)
    fields[:, 1] &= 0xFFFFFFFF
    return fields


def patch_owned_fields(
    dst: np.ndarray,
    positions: np.ndarray,
    queue_id: int | np.ndarray,
    store_timestamp: int,
    store_host: int,
    first_queue_offset: int | np.ndarray,
    first_phys: int,
) -> None:
    """Write the store-owned fields of records at `positions` (segment-relative) in two scatters.

    One queue: `queue_id` and `first_queue_offset` are ints (record i gets offset first + i).
    Records of several queues (``MessageStore.put``): both are per-record arrays,
    and the queue ids take a third scatter."""
    n = len(positions)
    if isinstance(queue_id, np.ndarray):
        dst[positions[:, None] + QUEUEID_LANES] = queue_id.astype(">i4").view(np.uint8).reshape(n, 4)
        dst[positions[:, None] + STAMP_HOST_LANES] = np.frombuffer(
            _STAMP_HOST.pack(store_timestamp, store_host), np.uint8
        )
    else:
        dst[positions[:, None] + CONST_PATCH_LANES] = np.frombuffer(
            _CONST_PATCH.pack(queue_id, store_timestamp, store_host), np.uint8
        )
    offsets = np.empty((n, 2), ">i8")
    offsets[:, 0] = (
        first_queue_offset
        if isinstance(first_queue_offset, np.ndarray)
        else np.arange(first_queue_offset, first_queue_offset + n)
    )
    offsets[:, 1] = positions + (first_phys - int(positions[0]))
    dst[positions[:, None] + OFFSET_PATCH_LANES] = offsets.view(np.uint8)


gather_header_fields = _speedups.pick("_store", "gather_header_fields", gather_header_fields)
patch_owned_fields = _speedups.pick("_store", "patch_owned_fields", patch_owned_fields)


def gather_i32(src: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Big-endian 32-bit signed ints at byte `positions` of a uint8 array, as int64."""
    idx = positions[:, None] + _BYTE_LANES8[:4]
    return np.ascontiguousarray(src[idx]).view(">i4").reshape(-1).astype(np.int64)


def gather_i64(src: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Big-endian 64-bit signed ints at byte `positions` of a uint8 array."""
    idx = positions[:, None] + _BYTE_LANES8
    return np.ascontiguousarray(src[idx]).view(">i8").reshape(-1).astype(np.int64)


# --------------------------------------------------------------------------- consume queue

CQ_ENTRY_SIZE = 20
CQ_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
assert CQ_DTYPE.itemsize == CQ_ENTRY_SIZE


@functools.lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """The 8-byte tag hash a consume-queue entry carries; 0 for a message without tags.

    Cached: a producer sends few distinct tags, and this runs once per message."""
    if not tags:
        return 0
    return zlib.crc32(tags.encode("utf-8"))


# --------------------------------------------------------------------------- index file

INDEX_HEADER = struct.Struct(">qqqqii")  # begin ts, end ts, begin phys, end phys, slots used, index count
INDEX_HEADER_SIZE = INDEX_HEADER.size
assert INDEX_HEADER_SIZE == 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
INDEX_SLOT_DTYPE = np.dtype(">i4")
INDEX_ENTRY_DTYPE = np.dtype([("key_hash", ">i4"), ("phys_offset", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")])
assert INDEX_ENTRY_DTYPE.itemsize == INDEX_ENTRY_SIZE


def index_file_size(slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


def index_key_hash(topic: str, key: str) -> int:
    """Hash of `topic#key`, the string RocketMQ indexes; non-negative 31-bit."""
    return zlib.crc32(f"{topic}#{key}".encode()) & 0x7FFFFFFF


def record_key_hashes(topic: str, uniq_key: str | None, keys: str | None) -> list[int]:
    """What the index holds for a record: `topic#UNIQ_KEY`, then `topic#key` for each of its KEYS.

    The producer, the batch encoder and recovery's re-dispatch all call this, so they agree.
    """
    out = [index_key_hash(topic, uniq_key)] if uniq_key else []
    out += [index_key_hash(topic, k) for k in split_keys(keys)]
    return out


# --------------------------------------------------------------------------- checkpoint

CHECKPOINT = struct.Struct(">qqq")  # physic msg ts @0, logics msg ts @8, index msg ts @16
CHECKPOINT_FILE_SIZE = 4096

# --------------------------------------------------------------------------- file names

OFFSET_NAME_DIGITS = 20


def offset_file_name(offset: int) -> str:
    return f"{offset:020d}"


def parse_offset_file_name(name: str) -> int | None:
    return int(name) if len(name) == OFFSET_NAME_DIGITS and name.isdigit() else None
