"""The properties of many records as Arrow columns, from one split of their bytes (numpy and
pyarrow only: no files, no Spark).

A record's properties are ``name\\x01value\\x02`` repeated (record.encode_properties). With the
properties of a whole batch laid end to end, every ``\\x02`` ends a property and the first
``\\x01`` after a property's start ends its name, so one scan for each separator gives every
name and value span of the batch; the map column, TAGS, KEYS and UNIQ_KEY are then gathers of
those spans. The result equals ``record.decode_properties`` record by record. What that decode
treats specially takes it instead, for the whole batch: properties that do not end with a
separator, a name given twice in one record (the last value wins there) and bytes that are not
UTF-8 (replaced there).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from shmq.codec import record as fmt
from shmq.codec.gather import byte_rows, gather_spans, span_offsets

_PREFIX = 16  # a name's first bytes compared as two words; longer names compare equal on a prefix only
_LANES = np.arange(_PREFIX)
_MAP_TYPE = pa.map_(pa.string(), pa.string())


class PropertyColumns(NamedTuple):
    """Per record: TAGS, KEYS and UNIQ_KEY (null when absent) and every property as a map."""

    tags: pa.Array
    keys: pa.Array
    uniq_key: pa.Array
    properties: pa.Array


class _Spans(NamedTuple):
    """Every property of a batch: its record, name span and value span in the joined bytes."""

    record: np.ndarray
    name_lo: np.ndarray
    name_hi: np.ndarray
    value_lo: np.ndarray
    value_hi: np.ndarray
    fingerprint: np.ndarray  # (m, 3): name length and its first 16 bytes as two words


def property_columns(raw: np.ndarray, offsets: np.ndarray) -> PropertyColumns:
    """The columns of records whose properties are ``raw[offsets[i]:offsets[i + 1]]``."""
    n = len(offsets) - 1
    spans = _split(raw, offsets)
    if spans is not None and not _has_duplicate(spans, n):
        names = _strings(raw, len(spans.record), np.arange(len(spans.record)), spans.name_lo, spans.name_hi)
        values = _strings(raw, len(spans.record), np.arange(len(spans.record)), spans.value_lo, spans.value_hi)
        if _utf8(names) and _utf8(values):
            counts = np.bincount(spans.record, minlength=n)
            return PropertyColumns(
                _named(raw, n, spans, fmt.PROPERTY_TAGS),
                _named(raw, n, spans, fmt.PROPERTY_KEYS),
                _named(raw, n, spans, fmt.PROPERTY_UNIQ_KEY),
                pa.MapArray.from_arrays(pa.array(span_offsets(counts).astype(np.int32)), names, values),
            )
    return _decoded(raw, offsets)


def _split(raw: np.ndarray, offsets: np.ndarray) -> _Spans | None:
    """Name and value spans of every non-empty property; None when a record's properties do not
    end with the separator."""
    lengths = np.diff(offsets)
    if (raw[offsets[1:][lengths > 0] - 1] != 2).any():
        return None
    ends = np.flatnonzero(raw == 2)
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    used = ends > starts  # decode_properties skips empty items ("\x02\x02")
    starts, ends = starts[used], ends[used]
    ones = np.append(np.flatnonzero(raw == 1), len(raw))
    first_one = ones[np.searchsorted(ones, starts)]
    has_value = first_one < ends
    name_hi = np.where(has_value, first_one, ends)
    name_len = name_hi - starts
    words = byte_rows(raw, starts, _PREFIX)
    words[name_len[:, None] <= _LANES] = 0
    fingerprint = np.column_stack((name_len.astype(np.uint64), words.view("<u8")))
    return _Spans(
        np.searchsorted(offsets, starts, side="right") - 1,
        starts,
        name_hi,
        np.where(has_value, first_one + 1, ends),
        ends,
        fingerprint,
    )


def _has_duplicate(spans: _Spans, n: int) -> bool:
    """Might a record give a name twice? Exact for names of up to 16 bytes; a longer pair
    sharing its length and first 16 bytes counts as a duplicate (the per-record decode then
    decides). Records with one layout (a producer's batch) are checked on the first alone."""
    rec, fp = spans.record, spans.fingerprint
    if not len(rec):
        return False
    counts = np.bincount(rec, minlength=n)
    c = int(counts[0])
    if (counts == c).all():
        grid = fp.reshape(n, c, 3)
        if (grid == grid[0]).all():
            return len({tuple(row) for row in grid[0].tolist()}) < c
    order = np.lexsort((fp[:, 2], fp[:, 1], fp[:, 0], rec))
    keyed = np.column_stack((rec, fp.astype(np.int64)))[order]
    return bool((keyed[1:] == keyed[:-1]).all(axis=1).any())


def _named(raw: np.ndarray, n: int, spans: _Spans, name: str) -> pa.Array:
    """The value of property `name` per record, null where a record does not have it."""
    key = name.encode()
    assert len(key) <= _PREFIX
    words = np.frombuffer(key.ljust(_PREFIX, b"\0"), "<u8")
    fp = spans.fingerprint
    hit = np.flatnonzero((fp[:, 0] == len(key)) & (fp[:, 1] == words[0]) & (fp[:, 2] == words[1]))
    return _strings(raw, n, spans.record[hit], spans.value_lo[hit], spans.value_hi[hit])


def _strings(raw: np.ndarray, n: int, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> pa.Array:
    """A string column of n rows: row rows[i] (ascending) is raw[lo[i]:hi[i]], the others null.
    Not checked for UTF-8 here (``_utf8``)."""
    lengths = np.zeros(n, np.int64)
    lengths[rows] = hi - lo
    validity = None
    if len(rows) < n:
        valid = np.zeros(n, bool)
        valid[rows] = True
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.StringArray.from_buffers(
        n, pa.py_buffer(span_offsets(lengths).astype(np.int32)), pa.py_buffer(gather_spans(raw, lo, hi - lo)), validity
    )


def _utf8(arr: pa.Array) -> bool:
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _decoded(raw: np.ndarray, offsets: np.ndarray) -> PropertyColumns:
    """The columns from ``record.decode_properties`` of each record (the odd batches)."""
    view = raw.data
    props = [fmt.decode_properties(view[a:b]) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]

    def named(name: str) -> pa.Array:
        return pa.array([p.get(name) for p in props], pa.string())

    return PropertyColumns(
        named(fmt.PROPERTY_TAGS),
        named(fmt.PROPERTY_KEYS),
        named(fmt.PROPERTY_UNIQ_KEY),
        pa.array([list(p.items()) for p in props], _MAP_TYPE),
    )
