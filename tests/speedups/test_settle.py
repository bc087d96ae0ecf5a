"""Compiled ``settle_shared`` against the Python reference: the same futures finished (results,
exceptions, the error for all, futures not RUNNING left alone), waiters told, the same futures
returned for their callbacks, and None with nothing done when the Conditions differ."""

from __future__ import annotations

import concurrent.futures as cf
import threading
from concurrent.futures._base import RUNNING

from hypothesis import given, settings
from hypothesis import strategies as st

from shmq.client.producer import accumulator as A
from tests.speedups.conftest import compiled_or_skip


class _Batch:
    def __init__(self, cond: threading.Condition) -> None:
        self.condition = cond


def _futures(kinds: list[str], cond: threading.Condition) -> list:
    """None (oneway), or a PendingSend RUNNING / left PENDING / with a waiter / with a callback."""
    out: list = []
    for k in kinds:
        if k == "oneway":
            out.append(None)
            continue
        f = A.PendingSend(_Batch(cond))  # type: ignore[arg-type]
        if k != "pending":
            f._state = RUNNING
        if k == "waiter":
            f._waiters.append(cf._base._AllCompletedWaiter(1, stop_on_exception=False))
        if k == "callback":
            f._done_callbacks.append(lambda _f: None)
        out.append(f)
    return out


def _seen(futures: list, finished: list | None) -> tuple:
    state = [
        None
        if f is None
        else (
            f._state,
            f._result,
            repr(f._exception),
            [(len(w.finished_futures)) for w in f.__dict__.get("_waiters", ())],
        )
        for f in futures
    ]
    return state, None if finished is None else [futures.index(f) for f in finished]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["oneway", "pending", "running", "waiter", "callback"]), max_size=12),
    st.booleans(),
    st.booleans(),
    st.integers(0, 11),
)
def test_same_as_reference(kinds: list[str], fail_all: bool, two_conditions: bool, bad: int) -> None:
    compiled = compiled_or_skip("_accumulator", "settle_shared")
    results: list = [f"r{i}" for i in range(len(kinds))]
    if results:
        results[bad % len(results)] = ValueError("this one failed")
    error = RuntimeError("all failed") if fail_all else None
    outcomes = []
    for fn in (A._settle_shared, compiled):
        cond = threading.Condition(threading.RLock())
        futures = _futures(kinds, cond)
        if two_conditions and len([f for f in futures if f is not None]) > 1:
            last = max(i for i, f in enumerate(futures) if f is not None)
            futures[last]._condition = threading.Condition(threading.RLock())
        outcomes.append(_seen(futures, fn(futures, results, error)))
    assert outcomes[0] == outcomes[1]
