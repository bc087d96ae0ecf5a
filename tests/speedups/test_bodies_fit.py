"""Compiled ``bodies_fit`` (the batch encoder's check that every body is stored as it is)
against the reference, on bodies of every accepted type, other types and lengths around the limit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq import MessageBatch, _speedups
from shmq.client.producer import encoder as E
from tests.speedups.conftest import compiled_or_skip


@pytest.fixture(scope="module")
def fits():
    return compiled_or_skip("_producer", "bodies_fit"), _speedups.reference("_producer", "bodies_fit")


def test_the_encoder_uses_the_compiled_check_unless_disabled() -> None:
    assert (E.bodies_fit is compiled_or_skip("_producer", "bodies_fit")) != _speedups.DISABLED


class _Bytes(bytes):
    pass


_body = st.one_of(
    st.binary(max_size=40),
    st.binary(max_size=40).map(bytearray),
    st.binary(max_size=40).map(memoryview),
    st.binary(min_size=8, max_size=40).map(
        lambda b: memoryview(b).cast("Q", (len(b) // 8,)) if len(b) % 8 == 0 else memoryview(b)
    ),
    st.binary(max_size=40).map(_Bytes),
    st.text(max_size=10),
    st.integers(),
    st.none(),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_body, max_size=12), st.integers(0, 45), st.sampled_from([list, tuple]))
def test_same_answer(fits, bodies, limit, kind) -> None:
    compiled, reference = fits
    assert compiled(kind(bodies), limit) == reference(kind(bodies), limit)


def test_a_numpy_array_of_bodies(fits) -> None:
    compiled, reference = fits
    for arr in (np.array([b"ab", b"c"], dtype=object), np.array([b"ab", b"c"])):
        assert compiled(arr, 5) == reference(arr, 5)


@pytest.mark.parametrize("bodies", [[b"x", "text"], [b"x", 5], [b"x", _Bytes(b"y")], [b"x" * 5000]])
def test_the_encoder_refuses_or_compresses_the_same(bodies, monkeypatch) -> None:
    """Through MessageEncoder._bodies: the reference path decides whenever the check says no."""
    enc = E.MessageEncoder(max_message_size=4096, compress_over=1000)
    outcomes = []
    for fit in (compiled_or_skip("_producer", "bodies_fit"), _speedups.reference("_producer", "bodies_fit")):
        monkeypatch.setattr(E, "bodies_fit", fit)
        try:
            out, flags = enc._bodies(bodies)
            outcomes.append(("ok", [bytes(b) for b in out], None if flags is None else flags.tolist()))
        except Exception as e:  # noqa: BLE001 - compared
            outcomes.append((type(e), str(e)))
    assert outcomes[0] == outcomes[1]


def test_a_usual_batch_passes_unchanged() -> None:
    batch = MessageBatch("T", [b"x" * 100] * 10)
    out, flags = E.MessageEncoder()._bodies(batch.bodies)
    assert out is batch.bodies and flags is None
