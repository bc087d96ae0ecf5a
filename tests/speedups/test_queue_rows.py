"""Compiled ``put_rows`` (consume-queue entries of a put over many queues) against the reference:
same file bytes, same queue and file state, same errors, across file ends, gaps and re-dispatch."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.store.consume_queue import ConsumeQueue
from shmq.store.write import dispatch
from tests.speedups.conftest import compiled_or_skip

FILE_SIZE = fmt.CQ_ENTRY_SIZE * 8  # small files: puts cross file ends often


@pytest.fixture(scope="module")
def pair():
    return compiled_or_skip("_queues", "put_rows"), _speedups.reference("_queues", "put_rows")


def test_layout_constants_match_the_reference() -> None:
    compiled_or_skip("_queues", "put_rows")
    import shmq._speedups._queues as c

    assert c.LAYOUT == {"CQ_ENTRY_SIZE": fmt.CQ_ENTRY_SIZE}


def test_the_dispatcher_uses_the_compiled_function_unless_disabled() -> None:
    fn = compiled_or_skip("_queues", "put_rows")
    assert (dispatch.put_rows is fn) != _speedups.DISABLED


def _state(root: str, queues: list[ConsumeQueue]) -> list:
    out = []
    for q in queues:
        files = [(mf.file_from_offset, mf.wrote_position, bytes(mf.view)) for mf in q.queue.files]
        out.append((q.min_offset, q.max_offset, q.max_phys_end, files))
    return out


def _run(fn, puts: list, nq: int, as_list: bool) -> tuple:
    with tempfile.TemporaryDirectory() as root:
        queues = [ConsumeQueue(root, "T", k, FILE_SIZE) for k in range(nq)]
        results = []
        try:
            for rows, shifts, phys, sizes, tags in puts:
                firsts = [queues[k].max_offset + shifts[k] for k in range(nq)]
                cols = [np.array(c, np.int64) for c in (phys, sizes, tags)]
                if as_list:
                    cols = [c.tolist() for c in cols]
                try:
                    fn(queues, [np.array(r, np.int64) for r in rows], firsts, *cols)
                    results.append(None)
                except Exception as e:  # noqa: BLE001 - the type and message are what is compared
                    results.append((type(e), str(e)))
            return results, _state(root, queues)
        finally:
            for q in queues:
                q.close()


def _puts(nq: int):
    record = st.tuples(st.integers(0, 2**40), st.integers(1, 5000), st.integers(-(2**63), 2**63 - 1))
    one = st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(st.integers(-2, n + 1), max_size=4), min_size=nq, max_size=nq),
            st.lists(st.sampled_from([0, 0, 0, 0, 1, 3, -1]), min_size=nq, max_size=nq),
            st.lists(record, min_size=n, max_size=n),
        )
    )
    return st.lists(
        one.map(lambda t: (t[0], t[1], [r[0] for r in t[2]], [r[1] for r in t[2]], [r[2] for r in t[2]])),
        min_size=1,
        max_size=12,
    )


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 4).flatmap(lambda nq: st.tuples(st.just(nq), _puts(nq))), st.booleans())
def test_same_entries_state_and_errors(pair, case, as_list) -> None:
    compiled, reference = pair
    nq, puts = case
    assert _run(compiled, puts, nq, as_list) == _run(reference, puts, nq, as_list)


def test_one_record_per_queue_is_written_in_place(pair) -> None:
    compiled, reference = pair
    n = 40
    puts = [([[k] for k in range(n)], [0] * n, list(range(0, 100 * n, 100)), [100] * n, list(range(n)))] * 20
    assert _run(compiled, puts, n, False) == _run(reference, puts, n, False)
    assert os.environ.get("SHMQ_NO_EXTENSIONS") or compiled is not reference


@pytest.fixture(scope="module")
def reserve_pair():
    return compiled_or_skip("_queues", "reserve_each"), _speedups.reference("_queues", "reserve_each")


def test_the_store_reserves_with_the_compiled_function_unless_disabled() -> None:
    from shmq.store import consume_queue

    fn = compiled_or_skip("_queues", "reserve_each")
    assert (consume_queue.reserve_each is fn) != _speedups.DISABLED


def _reserve_run(fn, steps: list, nq: int) -> tuple:
    """Reserve then write as a put does; the state after each step (files made, reserved room)."""
    with tempfile.TemporaryDirectory() as root:
        queues = [ConsumeQueue(root, "T", k, FILE_SIZE) for k in range(nq)]
        out = []
        try:
            for counts in steps:
                try:
                    fn([(queues[k], c) for k, c in enumerate(counts)])
                    out.append(None)
                except Exception as e:  # noqa: BLE001 - the type and message are what is compared
                    out.append((type(e), str(e)))
                for q, c in zip(queues, counts):
                    if isinstance(c, int) and c > 0:
                        q.put_batch(
                            np.arange(c, dtype=np.int64), np.full(c, 10, np.int64), np.zeros(c, np.int64), q.max_offset
                        )
                out.append(
                    [
                        (
                            q.max_offset,
                            [
                                (mf.file_from_offset, mf.reserved_position, mf.wrote_position)
                                for mf in q.queue.files + q.queue.spares
                            ],
                        )
                        for q in queues
                    ]
                )
            return out, _state(root, queues)
        finally:
            for q in queues:
                q.close()


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda nq: st.tuples(
            st.just(nq),
            st.lists(
                st.lists(st.one_of(st.integers(0, 20), st.just(-1)), min_size=nq, max_size=nq), min_size=1, max_size=10
            ),
        )
    )
)
def test_reserve_each_matches_the_reference(reserve_pair, case) -> None:
    compiled, reference = reserve_pair
    nq, steps = case
    assert _reserve_run(compiled, steps, nq) == _reserve_run(reference, steps, nq)
