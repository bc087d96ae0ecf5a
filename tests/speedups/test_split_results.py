"""Compiled ``split_results`` against the Python reference: the same SendResults (fields, lazy
ids, equality) for the messages of an answered batch, and the reference path for a subclass."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shmq.model import message as M
from shmq.model.message import MessageQueue, SendResult, SendStatus
from tests.speedups.conftest import compiled_or_skip


def _seen(results: list) -> list:
    return [
        (
            type(r),
            r.status,
            r.msg_id,
            r.offset_msg_id,
            r.queue,
            r.queue_offset,
            r.store_timestamp,
            r.count,
            r.phys_offsets,
            r.store_host,
        )
        for r in results
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.text(max_size=40), st.integers(0, 2**62)), max_size=40),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.integers(0, 2**63 - 1),
    st.sampled_from(list(SendStatus)),
)
def test_same_as_reference(items: list, first: int, ts: int, host: int, status: SendStatus) -> None:
    compiled = compiled_or_skip("_message", "split_results")
    uniqs, phys = [u for u, _ in items], [p for _, p in items]
    mq = MessageQueue("T", "b", 3)
    ref = M._split_results(SendResult, status, uniqs, mq, first, ts, phys, host)
    got = compiled(SendResult, status, uniqs, mq, first, ts, phys, host)
    assert got == ref
    assert _seen(got) == _seen(ref)


class Sub(SendResult):
    __slots__ = ("extra",)

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.extra = 1


def test_subclass_and_odd_ids_take_the_reference() -> None:
    compiled = compiled_or_skip("_message", "split_results")
    mq = MessageQueue("T", "b", 0)
    got = compiled(Sub, SendStatus.SEND_OK, ["a", "b"], mq, 5, 1, [10, 20], 2)
    assert [type(r) for r in got] == [Sub, Sub] and all(r.extra == 1 for r in got)
    odd = [lambda: "made", "s"]  # a function id is made on first use, as SendResult.__init__ does
    ref = M._split_results(SendResult, SendStatus.SEND_OK, odd, mq, 5, 1, [10, 20], 2)
    assert _seen(compiled(SendResult, SendStatus.SEND_OK, odd, mq, 5, 1, [10, 20], 2)) == _seen(ref)
