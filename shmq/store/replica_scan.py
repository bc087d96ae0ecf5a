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

import functools
import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

from shmq.codec import record as fmt
from shmq.codec.gather import byte_rows as _rows
from shmq.store.consume_queue import MAX_QUEUE_ID

_MAGIC = np.frombuffer(struct.pack(">I", fmt.MESSAGE_MAGIC), np.uint8)
_BLANK = np.frombuffer(struct.pack(">I", fmt.BLANK_MAGIC), np.uint8)
_EMPTY = np.empty(0, np.int64)
_TAGS, _KEYS, _UNIQ = (k.encode() + b"\x01" for k in (fmt.PROPERTY_TAGS, fmt.PROPERTY_KEYS, fmt.PROPERTY_UNIQ_KEY))
_NAME_LANES = np.arange(16, dtype=np.int64)  # a property's first 16 bytes: two words to compare names in
_VARIANT_GROUPS = 8  # more distinct value lengths than this: one zlib call per value instead
_VARIANT_MIN_ROWS = 16  # fewer values of one length: zlib per value (a new length builds a CRC table)


@dataclass(slots=True)
class Fields:
    """Header fields of records (int64 arrays, one value per record)."""

    total_size: np.ndarray
    body_crc: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    physical_offset: np.ndarray
    sysflag: np.ndarray
    store_timestamp: np.ndarray
    body_len: np.ndarray

    def take(self, rows: slice) -> Fields:
        return Fields(*(getattr(self, f)[rows] for f in _FIELDS))


_FIELDS = list(Fields.__dataclass_fields__)


@dataclass(slots=True)
class Scan:
    """The good records at the start of a byte run, what follows them, and their dispatch data.

    ``end``: where the good records end (relative); after a complete BLANK filler, the segment's
    end (which may lie past the run). ``pending``: bytes from ``end`` start a record that may
    still be whole once the rest arrives. ``error``: why the bytes at ``end`` were refused."""

    starts: np.ndarray
    fields: Fields
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
    hits = np.flatnonzero(buf[lo : len(buf) - m + 1] == pat[0]) + lo
    for j in range(1, m):
        hits = hits[buf[hits + j] == pat[j]]
    return hits


def scan(buf: np.ndarray, base: int, seg_left: int) -> Scan:
    """Check the records of ``buf`` (uint8; its byte 0 at log offset ``base``, a record start;
    ``seg_left`` bytes from there to the segment's end, ``len(buf) <= seg_left``)."""
    n = len(buf)
    starts = find_pattern(buf, _MAGIC, 4) - 4
    starts = starts[starts + fmt.OFF_BODY <= n]
    i32, i64 = _unaligned(buf, ">i4"), _unaligned(buf, ">i8")
    starts = starts[i64[starts + fmt.OFF_PHYSICALOFFSET] == starts + base]
    sizes = i32[starts].astype(np.int64)
    chain = _chain(starts, sizes)
    if chain is not None:
        starts, sizes = starts[chain], sizes[chain]
    whole = starts + sizes <= n
    if not whole.all():  # only the chain's last record can be cut off by the run's end
        k = int(np.argmin(whole))
        starts, sizes = starts[:k], sizes[:k]
    f = Fields(
        sizes,
        *(
            v[starts + off].astype(np.int64)
            for v, off in (
                (i32, fmt.OFF_BODYCRC),
                (i32, fmt.OFF_QUEUEID),
                (i64, fmt.OFF_QUEUEOFFSET),
                (i64, fmt.OFF_PHYSICALOFFSET),
                (i32, fmt.OFF_SYSFLAG),
                (i64, fmt.OFF_STORETIMESTAMP),
                (i32, fmt.OFF_BODYLEN),
            )
        ),
    )
    bad, reason, names, topic_ids = _first_bad(buf, starts, f, seg_left)
    out = Scan(starts[:bad], f.take(slice(0, bad)), int(starts[bad - 1] + sizes[bad - 1]) if bad else 0)
    out.topic_ids = topic_ids[:bad]
    out.topics = [name or "" for name in names]  # a bad name is only ever a record's at or after ``bad``
    if bad < len(starts):
        out.error = f"record at offset {base + int(starts[bad])}: {reason}"
    elif out.end < n:
        out.blank, out.error = _classify_tail(buf, out.end, base, seg_left)
    if out.blank:
        out.end = seg_left
    if len(out):
        _dispatch_data(buf, out)
    return out


def _unaligned(buf: np.ndarray, dtype: str) -> np.ndarray:
    """A view of ``buf`` where element i is the big-endian integer starting at byte i: a field
    of every record is then one 1-D gather (a 2-D gather of whole headers cost ~20x more)."""
    width = np.dtype(dtype).itemsize
    return np.ndarray((max(0, len(buf) - width + 1),), dtype, buf, 0, (1,))


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


def _first_bad(
    buf: np.ndarray, starts: np.ndarray, f: Fields, seg_left: int
) -> tuple[int, str, list[str | None], np.ndarray]:
    """(index of the first record failing a check, why; the topics and each record's number
    among them); (len, "", ...) if none fails."""
    n = len(buf)
    if not len(starts):
        return 0, "", [], _EMPTY
    sizes, body_len = f.total_size, f.body_len
    top = n - 1
    topic_at = np.minimum(starts + fmt.OFF_BODY + np.maximum(body_len, 0), top)
    topic_len = buf[topic_at].astype(np.int64)
    props_at = np.minimum(topic_at + 1 + topic_len, top - 1)
    props_len = buf[props_at].astype(np.int64) << 8 | buf[props_at + 1]
    ends = starts + sizes
    checks = [
        (sizes > fmt.MAX_RECORD_SIZE, "TOTALSIZE over the largest record"),
        (ends > seg_left - fmt.MIN_BLANK, "record does not leave room for the segment's end filler"),
        (f.store_timestamp <= 0, "no STORETIMESTAMP"),
        ((body_len < 0) | (fmt.OFF_BODY + body_len + 3 > sizes), "BODYLEN does not fit TOTALSIZE"),
        (topic_len == 0, "empty topic"),
        (fmt.FIXED_OVERHEAD + body_len + topic_len + props_len != sizes, "sizes do not add up to TOTALSIZE"),
        ((props_len > 0) & (buf[np.clip(ends - 1, 0, top)] != 2), "properties not terminated"),
        ((f.queue_id < 0) | (f.queue_id > MAX_QUEUE_ID), "QUEUEID out of range"),
    ]
    first, reason = len(starts), ""
    for failed, why in checks:
        hit = np.flatnonzero(failed)
        if len(hit) and hit[0] < first:
            first, reason = int(hit[0]), why
    names, topic_ids = _topic_names(buf, topic_at[:first], topic_len[:first])
    for t, name in enumerate(names):
        if name is None:
            first, reason = int(np.flatnonzero(topic_ids == t)[0]), "topic name not valid"
            break
    lo = starts[:first] + fmt.OFF_BODY
    bodies = map(buf.data.__getitem__, map(slice, lo.tolist(), (lo + body_len[:first]).tolist()))
    crcs = np.fromiter(map(zlib.crc32, bodies), np.int64, first) & 0x7FFFFFFF  # the one step per record
    wrong = np.flatnonzero(crcs != f.body_crc[:first])
    if len(wrong):
        first, reason = int(wrong[0]), "body CRC mismatch"
    return first, reason, names, topic_ids[:first]


def _topic_names(buf: np.ndarray, topic_at: np.ndarray, topic_len: np.ndarray) -> tuple[list[str | None], np.ndarray]:
    """The distinct topics (None: not a valid name) and each record's number among them. Records
    come in runs of one topic (batches): rows are compared with their predecessor, and only the
    first row of each run is looked at in Python."""
    if not len(topic_at):
        return [], _EMPTY
    width = int(topic_len.max()) + 1
    lanes = np.arange(width, dtype=np.int64)
    rows = _rows(buf, topic_at, width)
    rows[lanes > topic_len[:, None]] = 0
    new_run = np.ones(len(rows), bool)
    new_run[1:] = (rows[1:] != rows[:-1]).any(axis=1)
    heads = np.flatnonzero(new_run)
    number: dict[bytes, int] = {}
    names: list[str | None] = []
    run_topic = np.empty(len(heads), np.int64)
    for k, h in enumerate(heads.tolist()):
        raw = rows[h, 1 : 1 + int(topic_len[h])].tobytes()
        t = number.get(raw)
        if t is None:
            t = number[raw] = len(names)
            try:
                name: str | None = raw.decode("ascii")
            except UnicodeDecodeError:
                name = None
            names.append(name if name and len(name) <= fmt.MAX_TOPIC_LENGTH and fmt.TOPIC_PATTERN.match(name) else None)
        run_topic[k] = t
    return names, run_topic[np.cumsum(new_run) - 1]


def _classify_tail(buf: np.ndarray, pos: int, base: int, seg_left: int) -> tuple[bool, str | None]:
    """What starts at ``pos`` after the last whole record: (a whole BLANK filler?, error or None).
    A prefix that can still become a record or a filler is pending (False, None)."""
    left = len(buf) - pos
    size = int.from_bytes(buf[pos : pos + 4].tobytes(), "big", signed=True) if left >= 4 else None
    magic = buf[pos + 4 : pos + 8]
    where = f"bytes at offset {base + pos}"
    if len(magic) == 4 and np.array_equal(magic, _BLANK):
        if size != seg_left - pos:
            return False, f"{where}: end-of-segment filler of {size} bytes, {seg_left - pos} are left"
        return True, None
    could_blank = np.array_equal(magic, _BLANK[: len(magic)]) and (size is None or size == seg_left - pos)
    could_record = np.array_equal(magic, _MAGIC[: len(magic)]) and (
        size is None or fmt.FIXED_OVERHEAD <= size <= min(fmt.MAX_RECORD_SIZE, seg_left - pos - fmt.MIN_BLANK)
    )
    if (not could_blank and not could_record) or (could_record and size is not None and size <= left):
        return False, f"{where}: not a record of this log (magic, TOTALSIZE or PHYSICALOFFSET wrong)"
    if could_record and left >= fmt.OFF_PHYSICALOFFSET + 8:
        phys = int.from_bytes(buf[pos + fmt.OFF_PHYSICALOFFSET : pos + fmt.OFF_PHYSICALOFFSET + 8].tobytes(), "big")
        if phys != base + pos:
            return False, f"{where}: PHYSICALOFFSET {phys} is not the record's position"
    return False, None


# ---------------------------------------------------------------------- dispatch data


def _dispatch_data(buf: np.ndarray, out: Scan) -> None:
    starts, f = out.starts, out.fields
    topic_at = starts + fmt.OFF_BODY + f.body_len
    p_lo = topic_at + 3 + buf[topic_at].astype(np.int64)
    seeds = [zlib.crc32(t.encode() + b"#") for t in out.topics]
    n = len(out)
    tags = np.zeros(n, np.int64)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (record, rank in record, key hash)
    left = _by_layout(buf, p_lo, starts + f.total_size, out.topic_ids, seeds, tags, parts)
    if len(left):
        found = _searched(buf, starts[left], p_lo[left], (starts + f.total_size)[left], out.topic_ids[left], seeds)
        if found is None:
            _slow_properties(buf, out)
            return
        tags[left] = found[0]
        parts.append((left[found[1]], found[2], found[3]))
    out.tags_codes = tags
    recs = np.concatenate([p[0] for p in parts]) if parts else _EMPTY
    order = np.lexsort((np.concatenate([p[1] for p in parts]), recs)) if parts else _EMPTY
    out.key_records = recs[order]
    out.key_hashes = np.concatenate([p[2] for p in parts])[order] if parts else _EMPTY


def _layout(props: bytes) -> tuple[dict[bytes, tuple[int, int]], np.ndarray] | None:
    """Where the values of TAGS, UNIQ_KEY and KEYS sit in one record's properties (the last of a
    name given twice, as ``decode_properties`` keeps), and which bytes are not inside a value.
    None if a value is not ASCII."""
    values: dict[bytes, tuple[int, int]] = {}
    fixed = np.ones(len(props), bool)
    at = 0
    for item in props.split(b"\x02")[:-1]:
        name, sep, value = item.partition(b"\x01")
        lo = at + len(name) + len(sep)
        fixed[lo : at + len(item)] = False
        if name + sep in (_TAGS, _UNIQ, _KEYS):
            if not value.isascii():
                return None
            values[name + sep] = (lo, at + len(item))
        at += len(item) + 1
    return values, fixed


def _by_layout(
    buf: np.ndarray,
    p_lo: np.ndarray,
    p_hi: np.ndarray,
    topic_ids: np.ndarray,
    seeds: list[int],
    tags: np.ndarray,
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> np.ndarray:
    """Tag codes and key hashes of the records whose properties have the layout of another of
    the same length (a producer's batch: the same names, values of the same lengths): one
    gather of their properties as a matrix, one compare of the bytes outside the values, then
    each value is a column range. Returns the records left for the search."""
    lens = p_hi - p_lo
    if len(lens) and (lens == lens[0]).all():  # one producer's batches: no sort to find the classes
        classes, inverse, counts = lens[:1], np.zeros(len(lens), np.intp), np.array([len(lens)])
    else:
        classes, inverse, counts = np.unique(lens, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
    left = [np.flatnonzero(inverse == c) for c in np.flatnonzero((counts < _VARIANT_MIN_ROWS) | (classes == 0))]
    for c in np.flatnonzero((counts >= _VARIANT_MIN_ROWS) & (classes > 0)).tolist():
        rows = np.flatnonzero(inverse == c) if len(classes) > 1 else np.arange(len(lens))
        width = int(classes[c])
        matrix = _rows(buf, p_lo[rows], width)
        layout = _layout(matrix[0].tobytes())
        if layout is None:
            left.append(rows)
            continue
        values, fixed = layout
        same = (matrix[:, fixed] == matrix[0, fixed]).all(axis=1)
        loose = matrix[:, ~fixed]
        same &= ((loose != 2) & (loose < 0x80)).all(axis=1)  # no separator, all ASCII in the values
        if not same.all():
            left.append(rows[~same])
            rows, matrix = rows[same], matrix[same]
        if not len(rows):
            continue
        group = topic_ids[rows]
        if _TAGS in values:
            a, b = values[_TAGS]
            tags[rows] = fmt.crc32_of_variants(zlib.crc32(matrix[0, a:b].tobytes()), matrix[:, a:b]) if b > a else 0
        if _UNIQ in values and values[_UNIQ][1] > values[_UNIQ][0]:
            a, b = values[_UNIQ]
            hashes = np.empty(len(rows), np.int64)
            for t in np.unique(group).tolist():  # a key's hash covers its topic
                sel = group == t
                hashes[sel] = fmt.crc32_of_variants(
                    zlib.crc32(matrix[sel][0, a:b].tobytes(), seeds[t]), matrix[sel][:, a:b]
                )
            parts.append((rows, np.zeros(len(rows), np.int64), hashes & 0x7FFFFFFF))
        if _KEYS in values:
            a, b = values[_KEYS]
            k_rec, k_rank, k_hash = [], [], []
            for r, t, value in zip(rows.tolist(), group.tolist(), map(bytes, matrix[:, a:b])):
                for i, key in enumerate(k for k in value.split(b" ") if k):
                    k_rec.append(r)
                    k_rank.append(1 + i)
                    k_hash.append(zlib.crc32(key, seeds[t]) & 0x7FFFFFFF)
            parts.append((np.array(k_rec, np.int64), np.array(k_rank, np.int64), np.array(k_hash, np.int64)))
    return np.sort(np.concatenate(left)) if left else _EMPTY


def _properties_at(
    buf: np.ndarray, starts: np.ndarray, p_lo: np.ndarray, p_hi: np.ndarray, seps: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(position, record, name window) of every property of every record: a property starts at
    its record's first properties byte or after a separator inside the properties; the window
    holds its first bytes (enough for the longest name looked for)."""
    cand = np.sort(np.concatenate([p_lo[p_hi > p_lo], seps + 1]))
    rec = np.searchsorted(starts, cand, side="right") - 1
    inside = (cand >= p_lo[rec]) & (cand < p_hi[rec])
    cand, rec = cand[inside], rec[inside]
    window = _rows(buf, cand, len(_NAME_LANES)).view("<u8")
    return cand, rec, window


@functools.lru_cache(maxsize=8)
def _name_words(key: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``key`` (<= 16 bytes) as two little-endian words and the mask of its bytes in them."""
    assert len(key) <= len(_NAME_LANES)
    pad = len(_NAME_LANES) - len(key)
    return (np.frombuffer(key + bytes(pad), "<u8"), np.frombuffer(b"\xff" * len(key) + bytes(pad), "<u8"))


def _property(
    at: np.ndarray, rec: np.ndarray, window: np.ndarray, seps: np.ndarray, key: bytes
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(record, value start, value end) of each record's ``key`` property; None if a record has
    it twice (the per-record decode then decides, as ``decode_properties`` does)."""
    pattern, mask = _name_words(key)
    match = (window[:, 0] & mask[0]) == pattern[0]
    match &= (window[:, 1] & mask[1]) == pattern[1]
    hits, rec = at[match], rec[match]
    if len(rec) > 1 and (rec[1:] == rec[:-1]).any():
        return None
    v_lo = hits + len(key)
    return rec, v_lo, seps[np.searchsorted(seps, v_lo)]  # every record's properties end with a separator


def _searched(
    buf: np.ndarray, starts: np.ndarray, p_lo: np.ndarray, p_hi: np.ndarray, topic_ids: np.ndarray, seeds: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(tag codes, key records, their rank in the record, key hashes) found by looking at the
    start of every property of these records for the three names; None when the per-record
    decode must decide (a name twice in a record, a value not ASCII, which
    ``decode_properties`` would have replaced)."""
    seps = np.flatnonzero(buf == 2)
    at, rec, window = _properties_at(buf, starts, p_lo, p_hi, seps)
    found = [_property(at, rec, window, seps, k) for k in (_TAGS, _UNIQ, _KEYS)]
    if any(x is None for x in found):
        return None
    tags, uniq, keys = found
    assert tags is not None and uniq is not None and keys is not None
    has = tags[2] > tags[1]
    t_codes = _crcs(buf, tags[1][has], tags[2][has] - tags[1][has], np.zeros(int(has.sum()), np.int64), [0])
    has_u = uniq[2] > uniq[1]
    u_rec = uniq[0][has_u]
    u_hash = _crcs(buf, uniq[1][has_u], uniq[2][has_u] - uniq[1][has_u], topic_ids[u_rec], seeds)
    if t_codes is None or u_hash is None:
        return None
    codes = np.zeros(len(starts), np.int64)
    codes[tags[0][has]] = t_codes
    k_rec: list[int] = []
    k_rank: list[int] = []
    k_hash: list[int] = []
    for r, lo, hi in zip(*(a.tolist() for a in keys)):  # KEYS split on spaces: per record
        value = buf[lo:hi].tobytes()
        if not value.isascii():
            return None
        for i, key in enumerate(k for k in value.split(b" ") if k):
            k_rec.append(r)
            k_rank.append(1 + i)
            k_hash.append(zlib.crc32(key, seeds[topic_ids[r]]) & 0x7FFFFFFF)
    return (
        codes,
        np.concatenate([u_rec, np.array(k_rec, np.int64)]),
        np.concatenate([np.zeros(len(u_rec), np.int64), np.array(k_rank, np.int64)]),
        np.concatenate([u_hash & 0x7FFFFFFF, np.array(k_hash, np.int64)]),
    )


def _crcs(
    buf: np.ndarray, lo: np.ndarray, lengths: np.ndarray, group: np.ndarray, seeds: list[int]
) -> np.ndarray | None:
    """zlib.crc32 of each span, continued from ``seeds[group[i]]``: one CRC table gather per
    (group, length) class (``crc32_of_variants``), or a zlib call per span when classes abound.
    None if a span is not ASCII."""
    out = np.empty(len(lo), np.int64)
    if not len(lo):
        return out
    classes, inverse = np.unique(group * (1 << 32) + lengths, return_inverse=True)
    inverse = inverse.reshape(-1)
    view = buf.data
    for c in range(len(classes)):
        rows = np.flatnonzero(inverse == c) if len(classes) > 1 else np.arange(len(lo))
        if len(classes) > _VARIANT_GROUPS or len(rows) < _VARIANT_MIN_ROWS:
            for i, a, k, g in zip(rows.tolist(), lo[rows].tolist(), lengths[rows].tolist(), group[rows].tolist()):
                span = view[a : a + k]
                if not span.tobytes().isascii():
                    return None
                out[i] = zlib.crc32(span, seeds[g])
            continue
        k, seed = int(lengths[rows[0]]), seeds[int(group[rows[0]])]
        values = _rows(buf, lo[rows], k)
        if (values >= 0x80).any():
            return None
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
