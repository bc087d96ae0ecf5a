"""Compiled ``put_entries`` (the index inserts of a batch) against the reference: same file bytes,
same slots-used growth, same errors for bounds that do not fit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.codec.record import INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, INDEX_SLOT_SIZE
from shmq.store import index_file
from tests.speedups.conftest import compiled_or_skip


@pytest.fixture(scope="module")
def pair():
    return compiled_or_skip("_store", "put_entries"), _speedups.reference("_store", "put_entries")


def test_layout_constants_match_the_reference() -> None:
    compiled_or_skip("_store", "put_entries")
    import shmq._speedups._store as c

    for name, value in c.LAYOUT.items():
        assert getattr(index_file, name) == value, name


def test_the_index_uses_the_compiled_function_unless_disabled() -> None:
    fn = compiled_or_skip("_store", "put_entries")
    assert (index_file.put_entries is fn) != _speedups.DISABLED


def _run(fn, buf: bytearray, *args):
    try:
        return fn(buf, *args), bytes(buf)
    except Exception as e:  # noqa: BLE001 - the type and message are what is compared
        return (type(e), str(e)), bytes(buf)


batches = st.integers(1, 300).flatmap(
    lambda n: st.tuples(
        st.lists(st.one_of(st.integers(0, 2**31 - 1), st.integers(-(2**40), 2**40)), min_size=n, max_size=n),
        st.lists(st.integers(0, 2**50), min_size=n, max_size=n),
        st.lists(st.integers(-(10**7), 10**13), min_size=n, max_size=n),
    )
)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 64),
    st.integers(1, 40),
    batches,
    st.integers(-(10**7), 10**13),
    st.binary(max_size=64),
    st.integers(0, 2**31 - 1),
)
def test_batches_write_the_same_bytes(pair, slot_num, first, batch, begin_ts, noise, seed) -> None:
    compiled, reference = pair
    hashes, phys, ts = (np.array(x, np.int64) for x in batch)
    entry_base = INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE
    size = entry_base + (first + len(hashes) + 3) * INDEX_ENTRY_SIZE
    rng = np.random.default_rng(seed)  # slots already in use (old heads), some empty
    start = bytearray(size)
    heads = rng.integers(-5, first, slot_num, dtype=np.int32) * rng.integers(0, 2, slot_num, dtype=np.int32)
    start[INDEX_HEADER_SIZE:entry_base] = heads.astype(">i4").tobytes()
    start[size - len(noise) :] = noise
    a, b = bytearray(start), bytearray(start)
    assert _run(compiled, a, slot_num, entry_base, first, begin_ts, hashes, phys, ts) == _run(
        reference, b, slot_num, entry_base, first, begin_ts, hashes, phys, ts
    )


@settings(max_examples=300, deadline=None)
@given(
    st.integers(-3, 2**62),
    st.integers(-3, 2**62),
    st.integers(-3, 2**62),
    st.integers(0, 400),
    st.integers(0, 5),
    st.integers(0, 5),
)
def test_bounds_refused_the_same(pair, slot_num, entry_base, first, size, n, n_other) -> None:
    compiled, reference = pair
    hashes, other = np.arange(n, dtype=np.int64), np.arange(n_other, dtype=np.int64)
    for args in ((hashes, hashes, hashes), (hashes, other, hashes), (hashes, hashes, other)):
        a, b = bytearray(size), bytearray(size)
        assert _run(compiled, a, slot_num, entry_base, first, 0, *args) == _run(
            reference, b, slot_num, entry_base, first, 0, *args
        )


def test_strided_and_readonly_inputs(pair) -> None:
    compiled, reference = pair
    base = np.arange(40, dtype=np.int64)
    base.flags.writeable = False
    hashes, phys, ts = base[::2], base[1::2], np.broadcast_to(np.int64(5000), (20,))
    a, b = bytearray(2000), bytearray(2000)
    assert compiled(a, 8, 72, 1, 0, hashes, phys, ts) == reference(b, 8, 72, 1, 0, hashes, phys, ts)
    assert a == b


def test_an_index_file_written_both_ways_reads_the_same(tmp_path, pair, monkeypatch) -> None:
    """Through IndexFile.put_batch: several batches, then queries along the chains."""
    compiled, reference = pair
    rng = np.random.default_rng(7)
    batches = [
        (rng.integers(0, 2**31, n), np.arange(n) * 100 + i * 10**6, np.full(n, 10**12 + i * 1500))
        for i, n in enumerate((1, 5, 300, 2048, 17))
    ]
    files = []
    for fn, name in ((compiled, "c"), (reference, "r")):
        monkeypatch.setattr(index_file, "put_entries", fn)
        f = index_file.IndexFile(str(tmp_path / name), 97, 4000)
        for h, p, t in batches:
            f.put_batch(h, p, t)
        files.append(f)
    c, r = files
    assert bytes(c._mm) == bytes(r._mm)
    for h in batches[3][0][:50]:
        assert c.query(int(h), 0, 2**62, 100) == r.query(int(h), 0, 2**62, 100)
    c.close()
    r.close()
