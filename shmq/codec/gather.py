"""Copy many byte spans out of one buffer with a few numpy operations instead of a Python step
per span (pure: no I/O).

Readers that turn stored records into columns (the replica's scan, the Spark source) need the
same field of thousands of records, or every body, as one array. A Python slice per record
costs ~0.3 us; these gathers cost a few nanoseconds per byte.
"""

from __future__ import annotations

import numpy as np

_EMPTY_BYTES = np.empty(0, np.uint8)
# a padded row gather wastes (rows x widest - total) bytes; beyond this factor of the total, an
# index per byte is cheaper
_PAD_FACTOR = 3


def byte_rows(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """A new (len(at), width) array whose row i is ``buf[at[i]:at[i] + width]`` (the last byte
    repeated past the end): one row gather from a sliding-window view, six times cheaper than
    gathering through a 2-D index array."""
    n = len(buf)
    if len(at) and int(at.max()) + width > n:
        return buf[np.minimum(at[:, None] + np.arange(width, dtype=np.int64), n - 1)]
    step = buf.strides[0]
    answer: np.ndarray = np.lib.stride_tricks.as_strided(
        buf, (max(0, n - width + 1), width), (step, step), writeable=False
    )[at]
    return answer


def span_offsets(lengths: np.ndarray) -> np.ndarray:
    """Arrow-style offsets (n + 1, int64) of spans of these lengths laid end to end."""
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def gather_spans(buf: np.ndarray, lo: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The spans ``buf[lo[i]:lo[i] + lengths[i]]`` laid end to end (uint8). Spans of one length
    (a producer's batch) are one row gather; spans of similar lengths a padded row gather and a
    mask; anything else one index per byte."""
    n = len(lo)
    if not n:
        return _EMPTY_BYTES
    width = int(lengths.max())
    total = int(lengths.sum())
    if total == 0:
        return _EMPTY_BYTES
    if total == n * width:
        return byte_rows(buf, lo, width).reshape(-1)
    if n * width <= _PAD_FACTOR * total:
        return byte_rows(buf, lo, width)[np.arange(width) < lengths[:, None]]
    starts = span_offsets(lengths)[:-1]
    answer: np.ndarray = buf[np.arange(total, dtype=np.int64) + np.repeat(lo - starts, lengths)]
    return answer
