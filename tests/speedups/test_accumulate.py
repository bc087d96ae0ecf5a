"""Compiled ``accumulate`` / ``accumulate_oneway`` / ``Batch`` against the Python reference:
the same messages taken (the rest left to the general path), the same batches, futures and
errors, on plain messages and on every kind the fast path must decline."""

from __future__ import annotations

import concurrent.futures as cf

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.client.producer import accumulator as A
from shmq.errors import ShmqError
from shmq.model.message import Message
from tests.speedups.conftest import compiled_or_skip

LIMIT = 64


class Sub(Message):
    pass


def _odd_messages() -> list[object]:
    """Messages the fast path declines (the general path checks them and raises or batches)."""
    m = Message("T", b"x")
    m.flag = 3  # taken: the flag is the encoder's to check, as in the reference
    return [
        Message("T", b"x", tags="a"),
        Message("T", b"x", keys="k"),
        Message("T", b"x", properties={"a": "b"}),
        Message("T", b"x", delay_level=2),
        Message("T", b"x", delay=1.0),
        Message("T", b"x", deliver_at=5.0),
        Message("T", bytearray(b"x")),
        Message("T", b"x" * (LIMIT + 1)),
        Message("bad topic!", b"x"),
        Message("", b"x"),
        Message(5, b"x"),
        Sub("T", b"x"),
        "not a message",
        m,
    ]  # type: ignore[arg-type]


def _accumulators(monkeypatch, compiled_batch):
    """(reference accumulator, accumulator whose batches are the compiled Batch)."""
    ref = A.ProduceAccumulator(lambda groups: None, 600.0, 1 << 20)
    monkeypatch.setattr(A, "_make_batch", compiled_batch)
    return ref, A.ProduceAccumulator(lambda groups: None, 600.0, 1 << 20)


def _snapshot(acc: A.ProduceAccumulator) -> list[tuple]:
    return [
        (key, [(m.topic, m.body) for m in b.msgs], [f is None for f in b.futures], b.size, b.sent)
        for key, b in acc._batches.items()
    ]


@pytest.fixture()
def pair(monkeypatch):
    fast = compiled_or_skip("_accumulator", "accumulate")
    fast_oneway = compiled_or_skip("_accumulator", "accumulate_oneway")
    batch = compiled_or_skip("_accumulator", "Batch")
    ref = _speedups.reference("_accumulator", "accumulate"), _speedups.reference("_accumulator", "accumulate_oneway")
    return ref, (fast, fast_oneway), batch, monkeypatch


def test_odd_messages_are_declined_alike(pair) -> None:
    (ref, ref_ow), (fast, fast_ow), batch, monkeypatch = pair
    racc, facc = _accumulators(monkeypatch, batch)
    for m in _odd_messages():
        assert (ref(racc, m, LIMIT) is None) == (fast(facc, m, LIMIT) is None), m
        assert ref_ow(racc, m, LIMIT) == fast_ow(facc, m, LIMIT), m
    assert _snapshot(racc) == _snapshot(facc)


# fresh accumulators per example
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.sampled_from(["T", "U", "V_1"]), st.binary(max_size=LIMIT + 8), st.booleans()), max_size=40),
    st.integers(200, 4000),
)
def test_batches_and_futures_are_the_same(pair, sends, max_bytes) -> None:
    (ref, ref_ow), (fast, fast_ow), batch, monkeypatch = pair
    racc, facc = _accumulators(monkeypatch, batch)
    sent: tuple[list, list] = ([], [])
    for acc, side in ((racc, 0), (facc, 1)):
        acc.max_bytes = max_bytes
        acc._flush = lambda groups, out=sent[side]: out.append(
            [(t, q, [m.body for m in msgs], [f is None for f in fs]) for t, q, msgs, fs in groups]
        )
    for topic, body, oneway in sends:
        m = Message(topic, body)
        if oneway:
            assert ref_ow(racc, m, LIMIT) == fast_ow(facc, m, LIMIT)
        else:
            rf, ff = ref(racc, m, LIMIT), fast(facc, m, LIMIT)
            assert (rf is None) == (ff is None)
            if ff is not None:
                assert isinstance(ff, cf.Future) and type(ff) is type(rf) and not ff.done() and ff._batch is not None
    assert sent[0] == sent[1] and _snapshot(racc) == _snapshot(facc)
    racc.close()
    facc.close()
    assert sent[0] == sent[1]


def test_closed_accumulator_raises_alike(pair) -> None:
    (ref, ref_ow), (fast, fast_ow), batch, monkeypatch = pair
    racc, facc = _accumulators(monkeypatch, batch)
    racc.close()
    facc.close()
    for fn, acc in ((ref, racc), (fast, facc), (ref_ow, racc), (fast_ow, facc)):
        with pytest.raises(ShmqError, match="the producer was shut down"):
            fn(acc, Message("T", b"x"), LIMIT)


def test_a_compiled_batch_future_keeps_the_future_protocol(pair) -> None:
    """Futures of compiled batches: cancel before the hand-over, wait(), callbacks, results."""
    _, (fast, _), batch, monkeypatch = pair
    _, acc = _accumulators(monkeypatch, batch)
    fs = [fast(acc, Message("T", b"%d" % i), LIMIT) for i in range(3)]
    seen: list = []
    fs[0].add_done_callback(lambda f: seen.append(f.result()))
    assert fs[1].cancel()
    got: list = []
    acc._flush = lambda groups: got.extend(groups)
    acc.flush_all()
    assert [m.body for m in got[0][2]] == [b"0", b"2"] and fs[0].running() and not fs[0].cancel()
    A.settle(got[0][3], ["r0", "r2"], None)
    done, _ = cf.wait(fs, timeout=1)
    assert done == set(fs) and seen == ["r0"] and (fs[0].result(), fs[2].result()) == ("r0", "r2")
    with pytest.raises(cf.CancelledError):
        fs[1].result(0)
    acc.close()


def test_a_topic_passed_once_does_not_pass_others(pair) -> None:
    """The compiled path checks a topic once while it stays the same object: a bad topic in
    between, or the same name as another object, is still checked."""
    (ref, ref_ow), (fast, fast_ow), batch, monkeypatch = pair
    racc, facc = _accumulators(monkeypatch, batch)
    good, other = "T", "".join(["T"])
    for topic in (good, "bad topic!", good, other, "", "x" * 300, good):
        m = Message(topic, b"x")
        assert (ref(racc, m, LIMIT) is None) == (fast(facc, m, LIMIT) is None), topic
        assert ref_ow(racc, m, LIMIT) == fast_ow(facc, m, LIMIT), topic
    assert _snapshot(racc) == _snapshot(facc)
