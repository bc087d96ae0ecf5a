"""Compiled ``flush_queues`` (the consume-queue flush round) against the reference: the same
queues flushed (same flushed positions after the round) for any written and flushed positions,
least-pages rule on or off, and queues of other types handed their own ``flush``."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.store import consume_queue as C
from shmq.store.consume_queue import ConsumeQueue
from shmq.store.mapped_file import PAGE_SIZE
from tests.speedups.conftest import compiled_or_skip

FILE_SIZE = 4 * PAGE_SIZE


@pytest.fixture(scope="module")
def pair():
    return compiled_or_skip("_queues", "flush_queues"), _speedups.reference("_queues", "flush_queues")


def test_the_store_uses_the_compiled_function_unless_disabled() -> None:
    fn = compiled_or_skip("_queues", "flush_queues")
    assert (C.flush_queues is fn) != _speedups.DISABLED


def _round(fn, layout: list[list[tuple[int, int]]], least_pages) -> list:
    """Queues whose files have the (wrote, flushed) positions given, one flush round, their positions after."""
    with tempfile.TemporaryDirectory() as root:
        queues = []
        for k, files in enumerate(layout):
            cq = ConsumeQueue(root, "T", k, FILE_SIZE)
            for i, (wrote, flushed) in enumerate(files):
                mf = cq.queue.last_file(i * FILE_SIZE) if i == 0 else cq.queue._new_file(i * FILE_SIZE)
                if i:
                    cq.queue.files.append(mf)
                mf.wrote_position, mf.flushed_position = wrote, flushed
            queues.append(cq)
        try:
            fn(queues, least_pages)
            return [[(mf.wrote_position, mf.flushed_position) for mf in cq.queue.files] for cq in queues]
        finally:
            for cq in queues:
                cq.close()


POSITION = st.integers(0, FILE_SIZE)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.lists(st.tuples(POSITION, POSITION), max_size=3), min_size=1, max_size=6), st.sampled_from([0, 1, 2, 3])
)
def test_compiled_flush_queues_matches_the_reference(pair, layout, least_pages) -> None:
    compiled, reference = pair
    assert _round(compiled, layout, least_pages) == _round(reference, layout, least_pages)


def test_other_queue_types_get_their_own_flush(pair) -> None:
    compiled, _ = pair
    calls = []

    class Odd:
        def flush(self, least_pages: int) -> bool:
            calls.append(least_pages)
            return True

    compiled([Odd(), Odd()], 2)
    compiled([Odd()], 0)
    assert calls == [2, 2, 0]
