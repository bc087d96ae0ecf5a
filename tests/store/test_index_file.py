"""IndexFile / IndexService against a pure-Python model: a list of (hash, phys, ts) records."""

from __future__ import annotations

import os
import struct
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmq.codec.record import (
    INDEX_ENTRY_SIZE,
    INDEX_HEADER,
    INDEX_HEADER_SIZE,
    INDEX_SLOT_SIZE,
    index_file_size,
    index_key_hash,
)
from shmq.store.index_file import IndexFile, IndexService
from shmq.store.write.dispatch import DispatchRequest, IndexDispatcher

T0 = 1_700_000_000_000
FAR = 2**62
HYPO = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def expected(records, key_hash, begin_ts=0, end_ts=FAR, max_num=1 << 30):
    """What a query must return: matching phys offsets, newest first."""
    hits = [p for h, p, t in reversed(records) if h == key_hash and begin_ts <= t <= end_ts]
    return hits[:max_num]


def arrays(records):
    h, p, t = zip(*records)
    return np.array(h, np.int64), np.array(p, np.int64), np.array(t, np.int64)


def make_records(hash_choices, n, start_phys=0, start_ts=T0, rng=None):
    """n records with phys and store timestamps (whole seconds) rising like a commitlog."""
    rng = rng or np.random.default_rng(0)
    hashes = rng.choice(hash_choices, n)
    phys = start_phys + np.cumsum(rng.integers(91, 300, n))
    ts = start_ts + 1000 * np.cumsum(rng.integers(0, 3, n))
    return [(int(a), int(b), int(c)) for a, b, c in zip(hashes, phys, ts)]


# --------------------------------------------------------------------------- IndexFile


def test_put_and_put_batch_round_trip(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 100, 50)
    assert f.index_count == 0 and f.query(7, 0, FAR, 10) == []
    assert f.put(7, 1000, T0 + 1500)
    assert f.put_batch(*arrays([(8, 2000, T0 + 2000), (7, 3000, T0 + 3999)])) == 2
    assert f.query(7, 0, FAR, 10) == [3000, 1000]
    assert f.query(8, 0, FAR, 10) == [2000]
    assert f.query(107, 0, FAR, 10) == []  # same slot as 7, other hash
    assert (f.index_count, f.begin_timestamp, f.end_timestamp) == (3, T0 + 1500, T0 + 3999)
    assert (f.begin_phys_offset, f.end_phys_offset) == (1000, 3000)
    f.close()
    raw = Path(tmp_path / "idx").read_bytes()
    assert len(raw) == index_file_size(100, 50)
    assert INDEX_HEADER.unpack_from(raw, 0) == (T0 + 1500, T0 + 3999, 1000, 3000, 2, 3)


@HYPO
@given(
    slot_num=st.integers(1, 4),
    batches=st.lists(
        st.tuples(st.lists(st.integers(0, 9), min_size=1, max_size=12), st.booleans()), min_size=1, max_size=8
    ),
)
def test_colliding_chains_match_model(slot_num, batches):
    """Tiny slot tables: keys share slots within one batch and across batches, scalar and vector."""
    with tempfile.TemporaryDirectory() as d:
        f = IndexFile(os.path.join(d, "idx"), slot_num, 200)
        records = []
        for keys, scalar in batches:
            new = [(k, 100 * (len(records) + i), T0 + 1000 * (len(records) + i)) for i, k in enumerate(keys)]
            if scalar:
                assert all(f.put(*r) for r in new)
            else:
                assert f.put_batch(*arrays(new)) == len(new)
            records += new
        for k in range(10):
            assert f.query(k, 0, FAR, 1000) == expected(records, k)
        assert f.index_count == len(records)
        f.close()


@pytest.mark.parametrize("scalar", [False, True])
def test_time_range_has_second_precision(tmp_path, scalar):
    f = IndexFile(str(tmp_path / "idx"), 10, 50)
    stamps = [T0 + 10, T0 + 1500, T0 + 2999, T0 + 3000, T0 + 7200, T0 + 86_400_999]
    if scalar:
        assert all(f.put(3, 100 * i, t) for i, t in enumerate(stamps))
    else:
        f.put_batch(np.full(6, 3), np.arange(6) * 100, np.array(stamps))
    # Stored times are begin + whole seconds: T0+10, T0+1010, T0+2010, T0+2010, T0+7010, T0+86400010.
    assert f.query(3, T0 + 1000, T0 + 2999, 10) == [300, 200, 100]
    assert f.query(3, T0 + 2011, T0 + 86_400_009, 10) == [400]
    assert f.query(3, T0 + 86_400_010, T0 + 86_400_010, 10) == [500]
    assert f.query(3, 0, T0 + 9, 10) == []
    assert f.query(3, 0, T0 + 10, 10) == [0]


def test_max_num_keeps_the_newest(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 1, 50)
    f.put_batch(np.array([1, 2] * 10), np.arange(20) * 10, np.full(20, T0))
    assert f.query(1, 0, FAR, 3) == [180, 160, 140]
    assert f.query(2, 0, FAR, 0) == []


def test_full_file_refuses_the_rest(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 4, 6)  # entry 0 unused: 5 entries fit
    assert f.put_batch(np.arange(3), np.arange(3), np.full(3, T0)) == 3
    assert f.put_batch(np.arange(4), np.arange(3, 7), np.full(4, T0)) == 2
    assert f.is_full and not f.put(1, 99, T0) and f.put_batch(np.arange(1), np.arange(1), np.full(1, T0)) == 0
    assert f.query(1, 0, FAR, 10) == [4, 1]


@HYPO
@given(n=st.integers(1, 60), cut=st.integers(0, 120), slot_num=st.integers(1, 3), more=st.integers(0, 20))
def test_truncate_matches_model_and_chains_stay_usable(n, cut, slot_num, more):
    with tempfile.TemporaryDirectory() as d:
        f = IndexFile(os.path.join(d, "idx"), slot_num, 100)
        records = [(i % 5, 2 * i, T0 + 1000 * i) for i in range(n)]
        f.put_batch(*arrays(records))
        f.truncate(cut)
        records = [r for r in records if r[1] < cut]
        assert f.index_count == len(records)
        assert f.end_phys_offset == (records[-1][1] if records else 0)
        for k in range(5):
            assert f.query(k, 0, FAR, 1000) == expected(records, k)
        later = [(i % 5, 1000 + i, T0 + 1000 * (n + i)) for i in range(more)]
        for r in later:
            f.put(*r)
        for k in range(5):
            assert f.query(k, 0, FAR, 1000) == expected(records + later, k)
        f.close()


def _write_by_hand(path, slot_num, num, key_hash, phys, diff, count=None, end_phys=None):
    """Emulate a crash: write an entry and its slot, and only the header fields asked for."""
    with open(path, "r+b") as fh:
        buf = bytearray(fh.read())
        slot_pos = INDEX_HEADER_SIZE + (key_hash % slot_num) * INDEX_SLOT_SIZE
        (old,) = struct.unpack_from(">i", buf, slot_pos)
        entry_pos = INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE + num * INDEX_ENTRY_SIZE
        struct.pack_into(">iqii", buf, entry_pos, key_hash, phys, diff, old)
        struct.pack_into(">i", buf, slot_pos, num)
        if count is not None:
            struct.pack_into(">i", buf, 36, count)
        if end_phys is not None:
            struct.pack_into(">q", buf, 24, end_phys)
        fh.seek(0)
        fh.write(buf)


def test_truncate_sanitises_slot_past_index_count(tmp_path):
    path = str(tmp_path / "idx")
    f = IndexFile(path, 2, 20)
    f.put_batch(np.array([0, 2, 1]), np.array([10, 20, 30]), np.full(3, T0))
    f.close()
    _write_by_hand(path, 2, 4, key_hash=0, phys=40, diff=0)  # count stays 3
    _write_by_hand(path, 2, 5, key_hash=4, phys=50, diff=0)
    f = IndexFile(path, 2, 20)
    assert f.index_count == 3
    assert f.query(0, 0, FAR, 10) == []  # the slot points past the count: chain unreachable
    f.truncate(FAR)
    assert f.query(0, 0, FAR, 10) == [10] and f.query(2, 0, FAR, 10) == [20]
    assert f.query(1, 0, FAR, 10) == [30] and f.index_count == 3
    assert f.put(4, 60, T0) and f.query(4, 0, FAR, 10) == [60]
    assert f.query(0, 0, FAR, 10) == [10]


def test_truncate_drops_entries_past_committed_end(tmp_path):
    """Crash after count and slot, before end phys: the record is undone, re-dispatch adds it once."""
    path = str(tmp_path / "idx")
    f = IndexFile(path, 2, 20)
    f.put_batch(np.array([0, 1]), np.array([10, 20]), np.full(2, T0))
    f.close()
    _write_by_hand(path, 2, 3, key_hash=0, phys=30, diff=0, count=3)
    f = IndexFile(path, 2, 20)
    assert f.query(0, 0, FAR, 10) == [30, 10] and f.end_phys_offset == 20
    f.truncate(FAR)
    assert f.index_count == 2 and f.query(0, 0, FAR, 10) == [10]
    f.put(0, 30, T0)
    assert f.query(0, 0, FAR, 10) == [30, 10]


def test_uncommitted_first_put_is_dropped(tmp_path):
    path = str(tmp_path / "idx")
    IndexFile(path, 2, 20).close()
    _write_by_hand(path, 2, 1, key_hash=0, phys=0, diff=0, count=1, end_phys=0)  # end ts still 0
    f = IndexFile(path, 2, 20)
    f.truncate(FAR)
    assert f.index_count == 0 and f.query(0, 0, FAR, 10) == []
    with open(path, "rb") as fh:
        assert fh.read(INDEX_HEADER_SIZE + 2 * INDEX_SLOT_SIZE) == bytes(INDEX_HEADER_SIZE + 2 * INDEX_SLOT_SIZE)


def test_reopen_preserves_everything(tmp_path):
    path = str(tmp_path / "idx")
    records = make_records(np.arange(20), 300)
    f = IndexFile(path, 7, 400)
    f.put_batch(*arrays(records))
    f.flush()
    header = (f.index_count, f.begin_timestamp, f.end_timestamp, f.begin_phys_offset, f.end_phys_offset)
    f.close()
    f.close()  # idempotent
    g = IndexFile(path, 7, 400)
    assert (g.index_count, g.begin_timestamp, g.end_timestamp, g.begin_phys_offset, g.end_phys_offset) == header
    for k in range(20):
        assert g.query(k, 0, FAR, 1000) == expected(records, k)
    g.close()


def test_open_with_other_sizes_is_refused(tmp_path):
    path = str(tmp_path / "idx")
    IndexFile(path, 8, 16).close()
    with pytest.raises(ValueError, match="expected"):
        IndexFile(path, 8, 17)


def test_destroy_removes_the_file(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 8, 16)
    f.put(1, 1, T0)
    f.destroy()
    assert not os.path.exists(tmp_path / "idx")


# --------------------------------------------------------------------------- IndexService

KEYS = [f"k{i}" for i in range(12)]


def service_records(n, start_phys=0, start_ts=T0, seed=0):
    rng = np.random.default_rng(seed)
    keys = rng.choice(len(KEYS), n)
    recs = make_records([0], n, start_phys, start_ts, rng)
    return [(index_key_hash("T", KEYS[k]), p, t) for k, (_, p, t) in zip(keys, recs)], keys


def test_service_rolls_and_queries_across_files(tmp_path):
    d = str(tmp_path / "index")
    svc = IndexService(d, 3, 11)  # 10 entries a file
    records, _ = service_records(95)
    for i in range(0, 95, 7):
        svc.put_batch(*arrays(records[i : i + 7]))
    assert len(svc.files) == 10 and sorted(os.listdir(d)) == [os.path.basename(f.path) for f in svc.files]
    assert all(len(n) == 17 and n.isdigit() for n in os.listdir(d))
    for key in KEYS:
        h = index_key_hash("T", key)
        assert svc.query("T", key, 1000, 0, FAR) == expected(records, h)
        assert svc.query("T", key, 3, 0, FAR) == expected(records, h, max_num=3)
        mid_lo, mid_hi = records[30][2], records[60][2]
        assert svc.query("T", key, 1000, mid_lo, mid_hi) == expected(records, h, mid_lo, mid_hi)
    assert svc.end_phys_offset == records[-1][1]
    assert svc.last_store_timestamp == records[-1][2]
    svc.close()


@HYPO
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("put"), st.integers(1, 25)),
            st.tuples(st.just("truncate"), st.integers(0, 100)),  # percent of the log kept
            st.tuples(st.just("reopen"), st.just(0)),
        ),
        min_size=1,
        max_size=10,
    ),
)
def test_service_matches_model_through_truncate_and_reopen(ops):
    with tempfile.TemporaryDirectory() as d:
        svc = IndexService(d, 2, 6)
        records = []
        phys, ts = 0, T0
        for op, arg in ops:
            if op == "put":
                new, _ = service_records(arg, phys, ts, seed=len(records))
                svc.put_batch(*arrays(new))
                records += new
                phys, ts = new[-1][1], new[-1][2]
            elif op == "truncate":
                cut = phys * arg // 100
                svc.truncate(cut)
                records = [r for r in records if r[1] < cut]
            else:
                svc.close()
                svc = IndexService(d, 2, 6)
            assert svc.end_phys_offset == (records[-1][1] if records else -1)
            for key in KEYS[:6]:
                assert svc.query("T", key, 1000, 0, FAR) == expected(records, index_key_hash("T", key))
        svc.close()


def test_service_delete_files_below(tmp_path):
    svc = IndexService(str(tmp_path), 3, 5)  # 4 entries a file
    records = [(index_key_hash("T", "a"), 100 * i, T0 + i) for i in range(14)]  # 4 files
    svc.put_batch(*arrays(records))
    assert [f.end_phys_offset for f in svc.files] == [300, 700, 1100, 1300]
    assert svc.delete_files_below(300) == 0
    assert svc.delete_files_below(701) == 2
    assert svc.query("T", "a", 100, 0, FAR) == [100 * i for i in range(13, 7, -1)]
    assert svc.delete_files_below(FAR) == 1  # never the newest
    assert len(svc.files) == 1 and len(os.listdir(tmp_path)) == 1
    svc.flush()
    svc.close()


def test_service_truncate_removes_whole_files(tmp_path):
    svc = IndexService(str(tmp_path), 3, 5)
    records = [(index_key_hash("T", "a"), 100 * i, T0 + i) for i in range(14)]
    svc.put_batch(*arrays(records))
    svc.truncate(450)  # drops files 3 and 4, cuts file 2 after phys 400
    assert len(os.listdir(tmp_path)) == 2 and svc.end_phys_offset == 400
    assert svc.query("T", "a", 100, 0, FAR) == [400, 300, 200, 100, 0]
    svc.truncate(0)
    assert svc.end_phys_offset == -1 and svc.last_store_timestamp == 0 and os.listdir(tmp_path) == []
    svc.put_batch(*arrays(records[:2]))
    assert svc.query("T", "a", 100, 0, FAR) == [100, 0]
    svc.close()


@pytest.mark.parametrize("split", [False, True])
def test_redispatch_completes_the_last_records_keys(tmp_path, split):
    """The index as a crash between a record's keys leaves it: R's first key in, its second
    not (split: R's first key filled the file, so its second goes to the next one). Its end
    is at R; a re-dispatch of the log (key timestamps given) adds R's missing key only."""
    svc = IndexService(str(tmp_path), 3, 4)  # 3 entries a file
    a1, a2, r1, r2 = (index_key_hash("T", k) for k in ("a1", "a2", "r1", "r2"))
    if split:
        svc.put([a1, a2], 0, T0)
    svc.put([r1], 100, T0 + 1)  # killed here: r2 never written
    assert svc.end_phys_offset == 100 and len(svc.files) == 1
    req = DispatchRequest(
        [],
        None,
        [0],
        np.array([0, 100], np.int64),
        np.array([100, 100], np.int64),
        np.zeros(2, np.int64),
        T0 + 1,
        np.array([a1, a2, r1, r2], np.int64),
        np.array([0, 0, 1, 1], np.int64),
        np.array([T0, T0, T0 + 1, T0 + 1], np.int64),
    )
    IndexDispatcher(svc).dispatch(req)
    assert svc.query("T", "r2", 10, 0, FAR) == [100]
    assert svc.query("T", "r1", 10, 0, FAR) == [100]  # not twice
    assert svc.query("T", "a1", 10, 0, FAR) == ([0] if split else [])  # a record below the end: not indexed again
    assert sum(f.index_count for f in svc.files) == (4 if split else 2)
    assert len(svc.files) == (2 if split else 1)
    IndexDispatcher(svc).dispatch(req)  # idempotent from then on
    assert sum(f.index_count for f in svc.files) == (4 if split else 2)
    svc.close()


def test_timing_printout(tmp_path, capsys):
    """Not a benchmark gate: prints put_batch / put rates on RocketMQ-sized files."""
    rng = np.random.default_rng(1)
    n = 512_000
    hashes = rng.integers(0, 2**31, n)
    phys = np.arange(n, dtype=np.int64) * 200
    ts = T0 + np.arange(n, dtype=np.int64)
    f = IndexFile(str(tmp_path / "a"), 5_000_000, 20_000_000)
    start = time.perf_counter()
    for i in range(0, n, 256):
        f.put_batch(hashes[i : i + 256], phys[i : i + 256], ts[i : i + 256])
    batch_rate = n / (time.perf_counter() - start)
    g = IndexFile(str(tmp_path / "b"), 5_000_000, 20_000_000)
    hl, pl, tl = hashes.tolist(), phys.tolist(), ts.tolist()
    put = g.put
    start = time.perf_counter()
    for i in range(n // 2):
        put(hl[i], pl[i], tl[i])
    scalar_rate = n // 2 / (time.perf_counter() - start)
    with capsys.disabled():
        print(f"\nindex put_batch(256): {batch_rate:,.0f} keys/s; put: {scalar_rate:,.0f} keys/s")
    assert f.query(int(hashes[7]), 0, FAR, 4)[-1] == 1400 and g.query(int(hashes[7]), 0, FAR, 4) == [1400]
    f.destroy()
    g.destroy()
