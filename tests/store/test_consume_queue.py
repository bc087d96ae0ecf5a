import numpy as np

from shmq.codec import record as fmt
from shmq.store.consume_queue import BLANK_SIZE, ConsumeQueue


def _cq(tmp_path, entries_per_file=10):
    return ConsumeQueue(str(tmp_path), "T", 0, entries_per_file * fmt.CQ_ENTRY_SIZE)


def test_put_and_range_across_files(tmp_path):
    cq = _cq(tmp_path)
    n = 35
    phys = np.arange(n, dtype=np.int64) * 100
    cq.put_batch(phys[:20], np.full(20, 100), np.arange(20), 0)
    for i in range(20, n):
        assert cq.put(int(phys[i]), 100, i, i)
    assert (cq.min_offset, cq.max_offset, cq.max_phys_end) == (0, n, 3500)
    assert len(cq.queue.files) == 4
    got = []
    off = 0
    while off < n:
        r = cq.get_range(off, 7)
        got += r["offset"].tolist()
        off += len(r)
    assert got == phys.tolist()
    assert cq.get_range(n, 5).size == 0 and cq.entry(n) is None
    assert int(cq.entry(13)["tags_code"]) == 13


def test_put_is_idempotent(tmp_path):
    cq = _cq(tmp_path)
    cq.put_batch(np.arange(5) * 10, np.full(5, 10), np.zeros(5), 0)
    assert cq.put_batch(np.arange(8) * 10, np.full(8, 10), np.zeros(8), 0) == 3
    assert not cq.put(0, 10, 0, 2)
    assert cq.max_offset == 8


def test_recover_finds_end_and_reopen(tmp_path):
    cq = _cq(tmp_path)
    cq.put_batch(np.arange(23) * 10, np.full(23, 10), np.arange(23), 0)
    cq.close()
    cq = _cq(tmp_path)
    cq.load()
    cq.recover()
    assert (cq.min_offset, cq.max_offset, cq.max_phys_end) == (0, 23, 230)


def test_truncate_dirty(tmp_path):
    cq = _cq(tmp_path)
    cq.put_batch(np.arange(30) * 10, np.full(30, 10), np.zeros(30), 0)
    cq.truncate_dirty(125)  # the entry at 120 ends at 130: past the commitlog end, so dropped too
    assert cq.max_offset == 12 and cq.max_phys_end == 120
    assert len(cq.queue.files) == 2
    cq.put(120, 10, 0, 12)
    got = cq.get_range(0, 100)["offset"].tolist() + cq.get_range(10, 100)["offset"].tolist()
    assert got == [i * 10 for i in range(13)]
    cq.truncate_dirty(0)
    assert (cq.min_offset, cq.max_offset) == (0, 0)


def test_start_past_zero_fills_blanks(tmp_path):
    cq = _cq(tmp_path)
    cq.put_batch(np.array([5000, 5010]), np.array([10, 10]), np.zeros(2), 25)
    assert (cq.min_offset, cq.max_offset) == (25, 27)
    assert cq.queue.files[0].file_from_offset == 20 * fmt.CQ_ENTRY_SIZE
    assert int(cq.entry(22)["size"]) == BLANK_SIZE
    assert cq.get_range(0, 10)["offset"].tolist() == [5000, 5010]


def test_offset_for_timestamp(tmp_path):
    cq = _cq(tmp_path)
    ts = {i * 10: 1000 + (i // 3) * 10 for i in range(40)}  # phys -> store ts, three per tick
    cq.put_batch(np.arange(40) * 10, np.full(40, 10), np.zeros(40), 0)
    at = ts.__getitem__
    assert cq.offset_for_timestamp(0, at) == 0
    assert cq.offset_for_timestamp(1000, at) == 0
    assert cq.offset_for_timestamp(1001, at) == 3
    assert cq.offset_for_timestamp(1050, at) == 15
    assert cq.offset_for_timestamp(10**9, at) == 40


def test_delete_expired(tmp_path):
    cq = _cq(tmp_path)
    cq.put_batch(np.arange(35) * 100, np.full(35, 100), np.zeros(35), 0)
    assert cq.delete_expired(2050) == 2  # files with entries 0-9, 10-19 point below 2050
    assert cq.min_offset == 21  # entry 20 (phys 2000) is below too
    assert len(cq.queue.files) == 2
