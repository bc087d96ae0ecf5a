"""Compiled ``gather_header_fields`` and ``patch_owned_fields`` (the put path's per-record
header work) against the reference: same values gathered, same bytes patched, same errors, on
valid records, garbage and positions outside the buffer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.codec import record as fmt
from tests.speedups.conftest import compiled_or_skip


@pytest.fixture(scope="module")
def gather():
    return compiled_or_skip("_store", "gather_header_fields"), _speedups.reference("_store", "gather_header_fields")


@pytest.fixture(scope="module")
def patch():
    return compiled_or_skip("_store", "patch_owned_fields"), _speedups.reference("_store", "patch_owned_fields")


def test_layout_constants_match_the_reference() -> None:
    compiled_or_skip("_store", "gather_header_fields")
    import shmq._speedups._store as c

    for name, value in c.RECORD_LAYOUT.items():
        assert getattr(fmt, name) == value, name


def test_the_codec_uses_the_compiled_functions_unless_disabled() -> None:
    for name in ("gather_header_fields", "patch_owned_fields"):
        assert (getattr(fmt, name) is compiled_or_skip("_store", name)) != _speedups.DISABLED


def _outcome(fn, *args):
    try:
        out = fn(*args)
    except Exception as e:  # noqa: BLE001 - the type and message are what is compared
        return type(e), str(e)
    return None if out is None else (out.dtype, out.shape, out.tolist())


positions = st.lists(st.integers(-200, 1200), max_size=40)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=1100), positions, st.sampled_from([np.int64, np.int32, np.int16]))
def test_gathered_fields_are_the_same(gather, data, at, dtype) -> None:
    compiled, reference = gather
    src, starts = np.frombuffer(data, np.uint8), np.array(at, dtype)
    assert _outcome(compiled, src, starts) == _outcome(reference, src, starts)


def test_gather_of_real_records(gather) -> None:
    compiled, reference = gather
    recs = [fmt.encode_message(f"T{i}", b"b" * i, properties={"K": str(i)}) for i in range(50)]
    buf = b"".join(recs)
    starts = np.cumsum([0] + [len(r) for r in recs[:-1]]).astype(np.int64)
    src = np.frombuffer(buf, np.uint8)
    assert np.array_equal(compiled(src, starts), reference(src, starts))
    assert np.array_equal(compiled(src, starts[::3]), reference(src, starts[::3]))  # strided


per_queue = st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**40), 2**40))


@settings(max_examples=400, deadline=None)
@given(
    st.integers(0, 1500),
    positions,
    st.booleans(),
    per_queue,
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.integers(0, 2**50),
    st.integers(0, 2**31 - 1),
)
def test_patched_bytes_are_the_same(patch, size, at, per_record, qid, ts, host, per_qoff, qoff, phys, seed) -> None:
    compiled, reference = patch
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 256, size, dtype=np.uint8)
    pos = np.array(sorted(set(at)), np.int64)
    qids = rng.integers(-(2**33), 2**33, len(pos)) if per_record else qid
    qoffs = rng.integers(0, 2**40, len(pos)) if per_qoff else qoff
    a, b = start.copy(), start.copy()
    assert _outcome(compiled, a, pos, qids, ts, host, qoffs, phys) == _outcome(
        reference, b, pos, qids, ts, host, qoffs, phys
    )
    assert np.array_equal(a, b)


def test_patch_of_a_batch_as_the_commitlog_does(patch) -> None:
    compiled, reference = patch
    recs = [fmt.encode_message("T", b"x" * (i * 7 % 100)) for i in range(300)]
    buf = np.frombuffer(b"".join(recs), np.uint8)
    at = np.cumsum([0] + [len(r) for r in recs[:-1]]).astype(np.int64)
    for args in (
        (3, 1_700_000_000_000, 0x7F000001_0000_2A00, 1000, 5 << 30),
        (np.arange(300, dtype=np.int64) % 4, 1, 2, np.arange(300, dtype=np.int64) * 3, 0),
    ):
        a, b = buf.copy(), buf.copy()
        compiled(a, at, args[0], args[1], args[2], args[3], args[4])
        reference(b, at, args[0], args[1], args[2], args[3], args[4])
        assert np.array_equal(a, b)
