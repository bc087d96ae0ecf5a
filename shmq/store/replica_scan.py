"""Validate and decode raw commitlog bytes a replica received, vectorised (pure: no I/O).

A replica appends its master's commitlog bytes verbatim and dispatches them itself, so it must
find the records in a byte run, check each one as recovery would (magic, sizes, PHYSICALOFFSET,
body CRC, topic name) and read what dispatch needs (queue, queue offset, tag hash, index key
hashes) at well over 200 MB/s of 100-byte messages: a Python step per record costs too much.

Record starts are found by searching the run for the magic code and keeping the hits whose
PHYSICALOFFSET equals their position; they form a chain (each start = previous start + size)
for any honest log. A body that happens to contain a record-like pattern breaks the chain and
the scan walks it record by record instead (slower, same result). Properties are searched the
same way for ``TAGS``, ``KEYS`` and ``UNIQ_KEY``; hashes of equal-length values come from one
CRC table gather (``record.crc32_of_variants``). Anything unusual (non-ASCII properties, a
key given twice) takes the per-record decode, which is what recovery runs.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

from shmq.codec import record as fmt
from shmq.store.dispatch import MAX_QUEUE_ID

_MAGIC = np.frombuffer(struct.pack(">I", fmt.MESSAGE_MAGIC), np.uint8)
_BLANK = np.frombuffer(struct.pack(">I", fmt.BLANK_MAGIC), np.uint8)
_HEADER_LANES = np.arange(fmt.OFF_BODY, dtype=np.int64)
_EMPTY = np.empty(0, np.int64)
_TAGS, _KEYS, _UNIQ = (k.encode() + b"\x01" for k in (fmt.PROPERTY_TAGS, fmt.PROPERTY_KEYS, fmt.PROPERTY_UNIQ_KEY))
_VARIANT_GROUPS = 8  # more distinct value lengths than this: one zlib call per value instead
_VARIANT_MIN_ROWS = 16  # fewer values of one length: zlib per value (a new length builds a CRC table)


@dataclass(slots=True)
class Scan:
    """The good records at the start of a byte run, what follows them, and their dispatch data.

    ``end``: where the good records end (relative); after a complete BLANK filler, the segment's
    end (which may lie past the run). ``pending``: bytes from ``end`` start a record that may
    still be whole once the rest arrives. ``error``: why the bytes at ``end`` were refused."""

    starts: np.ndarray
    header: np.ndarray  # HEADER_DTYPE per record
    end: int
    blank: bool = False
    error: str | None = None
    topics: list[str] = field(default_factory=list)
    topic_ids: np.ndarray = field(default_factory=lambda: _EMPTY)
    tags_codes: np.ndarray = field(default_factory=lambda: _EMPTY)
    key_hashes: np.ndarray = field(default_factory=lambda: _EMPTY)
    key_records: np.ndarray = field(default_factory=lambda: _EMPTY)

    def __len__(self) -> int:
        return len(self.starts)


def find_pattern(buf: np.ndarray, pattern: bytes | np.ndarray, lo: int = 0) -> np.ndarray:
    """Every position >= ``lo`` where ``pattern`` starts in ``buf`` (one full compare, then gathers)."""
    pat = np.frombuffer(pattern, np.uint8) if isinstance(pattern, bytes) else pattern
    m = len(pat)
    if len(buf) - lo < m:
        return _EMPTY
    hits = np.flatnonzero(buf[lo:len(buf) - m + 1] == pat[0]) + lo
    for j in range(1, m):
        hits = hits[buf[hits + j] == pat[j]]
    return hits


def scan(buf: np.ndarray, base: int, seg_left: int) -> Scan:
    """Check the records of ``buf`` (uint8; its byte 0 at log offset ``base``, a record start;
    ``seg_left`` bytes from there to the segment's end, ``len(buf) <= seg_left``)."""
    n = len(buf)
    starts = find_pattern(buf, _MAGIC, 4) - 4
    starts = starts[starts + fmt.OFF_BODY <= n]
    header = _headers(buf, starts)
    mine = header["physical_offset"] == starts + base
    starts, header = starts[mine], header[mine]
    chain = _chain(starts, header["total_size"].astype(np.int64))
    if chain is not None:
        starts, header = starts[chain], header[chain]
    sizes = header["total_size"].astype(np.int64)
    whole = starts + sizes <= n
    if not whole.all():  # only the chain's last record can be cut off by the run's end
        k = int(np.argmin(whole))
        starts, header, sizes = starts[:k], header[:k], sizes[:k]
    bad, reason = _first_bad(buf, starts, header, sizes, seg_left)
    out = Scan(starts[:bad], header[:bad], int(starts[bad - 1] + sizes[bad - 1]) if bad else 0)
    if bad < len(starts):
        out.error = f"record at offset {base + int(starts[bad])}: {reason}"
    elif out.end < n:
        out.blank, out.error = _classify_tail(buf, out.end, base, seg_left)
    if out.blank:
        out.end = seg_left
    if len(out):
        _dispatch_data(buf, out)
    return out


def _headers(buf: np.ndarray, starts: np.ndarray) -> np.ndarray:
    if not len(starts):
        return np.empty(0, fmt.HEADER_DTYPE)
    rows = np.ascontiguousarray(buf[starts[:, None] + _HEADER_LANES])
    return rows.view(fmt.HEADER_DTYPE).reshape(-1)


def _chain(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray | None:
    """Indexes of the candidates reachable from position 0 by sizes (None: all of them)."""
    if len(starts) and starts[0] == 0 and np.array_equal(starts[1:], starts[:-1] + sizes[:-1]):
        return None
    at = {int(s): i for i, s in enumerate(starts.tolist())}  # a body mimics a record: walk
    out, pos = [], 0
    while pos in at:
        i = at[pos]
        out.append(i)
        if sizes[i] < fmt.FIXED_OVERHEAD:
            break
        pos += int(sizes[i])
    return np.array(out, np.int64)


def _first_bad(buf: np.ndarray, starts: np.ndarray, h: np.ndarray, sizes: np.ndarray,
               seg_left: int) -> tuple[int, str]:
    """(index of the first record failing a check, why); (len, "") if none does."""
    n = len(buf)
    if not len(starts):
        return 0, ""
    body_len = h["body_len"].astype(np.int64)
    top = n - 1
    topic_at = np.minimum(starts + fmt.OFF_BODY + np.maximum(body_len, 0), top)
    topic_len = buf[topic_at].astype(np.int64)
    props_at = np.minimum(topic_at + 1 + topic_len, top - 1)
    props_len = buf[props_at].astype(np.int64) << 8 | buf[props_at + 1]
    ends = starts + sizes
    checks = [
        (sizes > fmt.MAX_RECORD_SIZE, "TOTALSIZE over the largest record"),
        (ends > seg_left - fmt.MIN_BLANK, "record does not leave room for the segment's end filler"),
        (h["store_timestamp"] <= 0, "no STORETIMESTAMP"),
        ((body_len < 0) | (fmt.OFF_BODY + body_len + 3 > sizes), "BODYLEN does not fit TOTALSIZE"),
        (topic_len == 0, "empty topic"),
        (fmt.FIXED_OVERHEAD + body_len + topic_len + props_len != sizes, "sizes do not add up to TOTALSIZE"),
        ((props_len > 0) & (buf[np.maximum(ends - 1, 0).clip(max=top)] != 2), "properties not terminated"),
        ((h["queue_id"] < 0) | (h["queue_id"] > MAX_QUEUE_ID), "QUEUEID out of range"),
    ]
    first, reason = len(starts), ""
    for failed, why in checks:
        hit = np.flatnonzero(failed)
        if len(hit) and hit[0] < first:
            first, reason = int(hit[0]), why
    ok_topics = _topic_check(buf, topic_at[:first], topic_len[:first])
    if ok_topics < first:
        first, reason = ok_topics, "topic name not valid"
    crcs = h["body_crc"][:first].tolist()
    view = memoryview(buf)
    for i, (s, b) in enumerate(zip((starts[:first] + fmt.OFF_BODY).tolist(), body_len[:first].tolist())):
        if zlib.crc32(view[s:s + b]) & 0x7FFFFFFF != crcs[i]:
            return i, "body CRC mismatch"
    return first, reason


def _topic_check(buf: np.ndarray, topic_at: np.ndarray, topic_len: np.ndarray) -> int:
    """Index of the first record whose topic name is not valid (len if all are)."""
    _, names, inverse = _topic_names(buf, topic_at, topic_len)
    for t, name in enumerate(names):
        if name is None:
            return int(np.flatnonzero(inverse == t)[0])
    return len(topic_at)


def _topic_names(buf: np.ndarray, topic_at: np.ndarray, topic_len: np.ndarray
                 ) -> tuple[np.ndarray, list[str | None], np.ndarray]:
    """Distinct topic fields (length byte + name, zero padded), their names (None: not a valid
    topic), and each record's number among them."""
    if not len(topic_at):
        return np.empty((0, 1), np.uint8), [], _EMPTY
    width = int(topic_len.max()) + 1
    lanes = np.arange(width, dtype=np.int64)
    rows = buf[np.minimum(topic_at[:, None] + lanes, len(buf) - 1)]
    rows[lanes > topic_len[:, None]] = 0
    rows = np.ascontiguousarray(rows)
    uniq, inverse = np.unique(rows.view(f"V{width}").reshape(-1), return_inverse=True)
    names: list[str | None] = []
    for u in uniq.tolist():
        raw = u[1:1 + u[0]]
        try:
            name = raw.decode("ascii")
        except UnicodeDecodeError:
            name = None
        names.append(name if name and len(name) <= fmt.MAX_TOPIC_LENGTH and fmt.TOPIC_PATTERN.match(name) else None)
    return uniq, names, inverse.reshape(-1)


def _classify_tail(buf: np.ndarray, pos: int, base: int, seg_left: int) -> tuple[bool, str | None]:
    """What starts at ``pos`` after the last whole record: (a whole BLANK filler?, error or None).
    A prefix that can still become a record or a filler is pending (False, None)."""
    left = len(buf) - pos
    size = int.from_bytes(buf[pos:pos + 4].tobytes(), "big", signed=True) if left >= 4 else None
    magic = buf[pos + 4:pos + 8]
    where = f"bytes at offset {base + pos}"
    if len(magic) == 4 and np.array_equal(magic, _BLANK):
        if size != seg_left - pos:
            return False, f"{where}: end-of-segment filler of {size} bytes, {seg_left - pos} are left"
        return True, None
    could_blank = np.array_equal(magic, _BLANK[:len(magic)]) and (size is None or size == seg_left - pos)
    could_record = np.array_equal(magic, _MAGIC[:len(magic)]) and \
        (size is None or fmt.FIXED_OVERHEAD <= size <= min(fmt.MAX_RECORD_SIZE, seg_left - pos - fmt.MIN_BLANK))
    if (not could_blank and not could_record) or (could_record and size is not None and size <= left):
        return False, f"{where}: not a record of this log (magic, TOTALSIZE or PHYSICALOFFSET wrong)"
    if could_record and left >= fmt.OFF_PHYSICALOFFSET + 8:
        phys = int.from_bytes(buf[pos + fmt.OFF_PHYSICALOFFSET:pos + fmt.OFF_PHYSICALOFFSET + 8].tobytes(), "big")
        if phys != base + pos:
            return False, f"{where}: PHYSICALOFFSET {phys} is not the record's position"
    return False, None


# ---------------------------------------------------------------------- dispatch data


def _dispatch_data(buf: np.ndarray, out: Scan) -> None:
    starts, h = out.starts, out.header
    sizes = h["total_size"].astype(np.int64)
    topic_at = starts + fmt.OFF_BODY + h["body_len"].astype(np.int64)
    topic_len = buf[topic_at].astype(np.int64)
    _, names, out.topic_ids = _topic_names(buf, topic_at, topic_len)
    out.topics = [t for t in names if t is not None]
    assert len(out.topics) == len(names)  # checked by _first_bad
    p_lo = topic_at + 3 + topic_len
    p_hi = starts + sizes
    if not _fast_properties(buf, out, p_lo, p_hi):
        _slow_properties(buf, out)


def _record_of(starts: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return np.searchsorted(starts, pos, side="right") - 1


def _property(buf: np.ndarray, starts: np.ndarray, p_lo: np.ndarray, p_hi: np.ndarray, seps: np.ndarray,
              key: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(record, value start, value end) of each record's ``key`` property; None if a record has
    it twice (the per-record decode then decides, as ``decode_properties`` does)."""
    hits = find_pattern(buf, key, int(p_lo[0]))
    rec = _record_of(starts, hits)
    inside = (hits >= p_lo[rec]) & (hits < p_hi[rec])
    hits, rec = hits[inside], rec[inside]
    at_item = (hits == p_lo[rec]) | (buf[hits - 1] == 2)
    hits, rec = hits[at_item], rec[at_item]
    if len(rec) > 1 and (rec[1:] == rec[:-1]).any():
        return None
    v_lo = hits + len(key)
    v_hi = seps[np.searchsorted(seps, v_lo)]  # every record's properties end with a separator
    return rec, v_lo, v_hi


def _fast_properties(buf: np.ndarray, out: Scan, p_lo: np.ndarray, p_hi: np.ndarray) -> bool:
    n = len(out)
    starts = out.starts
    region = np.zeros(len(buf) + 1, np.int8)
    np.add.at(region, p_lo, 1)
    np.add.at(region, p_hi, -1)
    in_props = np.cumsum(region[:-1]) > 0
    if (buf[in_props] >= 0x80).any():  # not ASCII: decode_properties replaces bad UTF-8
        return False
    seps = np.flatnonzero((buf == 2) & in_props)
    found = [_property(buf, starts, p_lo, p_hi, seps, k) for k in (_TAGS, _UNIQ, _KEYS)]
    if any(f is None for f in found):
        return False
    tags, uniq, keys = found
    assert tags is not None and uniq is not None and keys is not None
    out.tags_codes = np.zeros(n, np.int64)
    has = tags[2] > tags[1]
    out.tags_codes[tags[0][has]] = _crcs(buf, tags[1][has], tags[2][has] - tags[1][has], np.zeros(has.sum(), np.int64),
                                         [0])
    seeds = [zlib.crc32(t.encode() + b"#") for t in out.topics]
    has = uniq[2] > uniq[1]
    u_rec = uniq[0][has]
    u_hash = _crcs(buf, uniq[1][has], uniq[2][has] - uniq[1][has], out.topic_ids[u_rec], seeds) & 0x7FFFFFFF
    k_rec: list[int] = []
    k_hash: list[int] = []
    for r, lo, hi in zip(*(a.tolist() for a in keys)):  # KEYS split on spaces: rarer, per record
        seed = seeds[out.topic_ids[r]]
        for key in bytes(buf[lo:hi]).split(b" "):
            if key:
                k_rec.append(r)
                k_hash.append(zlib.crc32(key, seed) & 0x7FFFFFFF)
    recs = np.concatenate([u_rec, np.array(k_rec, np.int64)])
    order = np.argsort(recs, kind="stable")  # per record: UNIQ_KEY first, then its KEYS (record_key_hashes)
    out.key_records = recs[order]
    out.key_hashes = np.concatenate([u_hash, np.array(k_hash, np.int64)])[order]
    return True


def _crcs(buf: np.ndarray, lo: np.ndarray, lengths: np.ndarray, group: np.ndarray, seeds: list[int]) -> np.ndarray:
    """zlib.crc32 of each span, continued from ``seeds[group[i]]``: one CRC table gather per
    (group, length) class (``crc32_of_variants``), or a zlib call per span when classes abound."""
    out = np.empty(len(lo), np.int64)
    if not len(lo):
        return out
    classes, inverse = np.unique(group * (1 << 32) + lengths, return_inverse=True)
    inverse = inverse.reshape(-1)
    view = memoryview(buf)
    for c in range(len(classes)):
        rows = np.flatnonzero(inverse == c)
        if len(classes) > _VARIANT_GROUPS or len(rows) < _VARIANT_MIN_ROWS:
            for i, a, k, g in zip(rows.tolist(), lo[rows].tolist(), lengths[rows].tolist(), group[rows].tolist()):
                out[i] = zlib.crc32(view[a:a + k], seeds[g])
            continue
        k, seed = int(lengths[rows[0]]), seeds[int(group[rows[0]])]
        values = buf[lo[rows][:, None] + np.arange(k, dtype=np.int64)]
        out[rows] = fmt.crc32_of_variants(zlib.crc32(values[0].tobytes(), seed), values)
    return out


def _slow_properties(buf: np.ndarray, out: Scan) -> None:
    """What recovery's re-dispatch computes, record by record (decode_record)."""
    data = buf.tobytes()
    tags, key_hashes, key_records = [], [], []
    for i, s in enumerate(out.starts.tolist()):
        rec = fmt.decode_record(data, s)
        tags.append(fmt.tags_code(rec.tags))
        hashes = fmt.record_key_hashes(rec.topic, rec.uniq_key, rec.properties.get(fmt.PROPERTY_KEYS))
        key_hashes += hashes
        key_records += [i] * len(hashes)
    out.tags_codes = np.array(tags, np.int64)
    out.key_hashes = np.array(key_hashes, np.int64)
    out.key_records = np.array(key_records, np.int64)
