"""Span gathers and row CRCs: each path against the plain Python slice or zlib call."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from shmq.codec import record as fmt
from shmq.codec.gather import gather_spans, span_offsets


@pytest.mark.parametrize(
    "lengths",
    [
        [0, 0, 0],  # nothing
        [5] * 40,  # one length: a row gather
        [3, 4, 5, 6, 0, 4] * 10,  # similar lengths: padded rows and a mask
        [1, 900, 0, 2, 3],  # one long span: an index per byte
    ],
)
def test_gather_spans_equal_slices(lengths: list[int]) -> None:
    rng = np.random.default_rng(len(lengths))
    buf = rng.integers(0, 256, 4096, dtype=np.uint8)
    length = np.array(lengths, np.int64)
    lo = rng.integers(0, len(buf) - length.max() - 1, len(length)) if length.max() else np.zeros(len(length), np.int64)
    lo[-1] = len(buf) - length[-1]  # a span that ends at the buffer's end
    got = gather_spans(buf, lo, length)
    assert got.tobytes() == b"".join(buf[a : a + k].tobytes() for a, k in zip(lo.tolist(), lengths))
    assert span_offsets(length).tolist() == [0, *np.cumsum(length).tolist()]


@pytest.mark.parametrize("shape", [(3, 0), (9, 1), (50, 8), (33, 13), (700, 100), (2, 300)])
def test_crc32_rows_equal_zlib(shape: tuple[int, int]) -> None:
    rows = np.random.default_rng(shape[1]).integers(0, 256, shape, dtype=np.uint8)
    assert fmt.crc32_rows(rows).tolist() == [zlib.crc32(r.tobytes()) for r in rows]
