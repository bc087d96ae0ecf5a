"""The sender's read-only commitlog reader over real segment files."""

from __future__ import annotations

import os

import pytest

from shmq.ha.log_reader import HALogReader

SEG = 4096


def _segments(store: str, count: int, first: int = 0) -> bytes:
    os.makedirs(os.path.join(store, "commitlog"), exist_ok=True)
    data = os.urandom(SEG * count)
    for i in range(count):
        with open(os.path.join(store, "commitlog", f"{(first + i) * SEG:020d}"), "wb") as f:
            f.write(data[i * SEG : (i + 1) * SEG])
    return data


def test_chunks_stop_at_the_batch_the_segment_end_and_the_published_end(tmp_path):
    store = str(tmp_path)
    data = _segments(store, 3)
    r = HALogReader(store, SEG)
    try:
        assert bytes(r.chunk(100, 3 * SEG, 1000)) == data[100:1100]
        assert bytes(r.chunk(SEG - 10, 3 * SEG, 1000)) == data[SEG - 10 : SEG]  # never across a segment
        assert bytes(r.chunk(SEG, SEG + 5, 1000)) == data[SEG : SEG + 5]  # never past master_offset
        with pytest.raises(TypeError):
            r.chunk(0, SEG, 10)[0:1] = b"x"  # read-only mapping: nothing can be written through it
    finally:
        r.close()


def test_a_segment_that_appears_later_is_found_and_a_deleted_one_is_cleaned(tmp_path):
    store = str(tmp_path)
    data = _segments(store, 1)
    r = HALogReader(store, SEG)
    try:
        more = _segments(store, 1, first=1)
        assert bytes(r.chunk(SEG + 1, 2 * SEG, 100)) == more[1:101]
        os.unlink(os.path.join(store, "commitlog", f"{0:020d}"))
        assert bytes(r.chunk(5, SEG, 10)) == data[5:15]  # not refreshed yet: still mapped, still right
        r.refresh()
        assert r.min_offset == SEG
        with pytest.raises(LookupError, match="offset 5 was cleaned"):
            r.chunk(5, 2 * SEG, 10)
    finally:
        r.close()


def test_a_segment_of_the_wrong_size_is_an_error(tmp_path):
    store = str(tmp_path)
    _segments(store, 1)
    r = HALogReader(store, 2 * SEG)
    try:
        with pytest.raises(OSError, match="mappedFileSizeCommitLog"):
            r.chunk(0, 10, 10)
    finally:
        r.close()
