"""Pure parts of hooks, trace and function filters: no broker."""

from __future__ import annotations

from concurrent.futures import CancelledError, Future

import pytest

from shmq import ConsumeResult, Message, MessageQueue, SendResult, SendStatus
from shmq.client.hooks import SYNC, ConsumeMessageContext, SendMessageContext, check_hook, hooked_call, hooked_future
from shmq.errors import ArgumentTypeError, BadExpressionError
from shmq.filter.function import FunctionFilter
from shmq.filter.tags import TagFilter, as_expression
from shmq.model.message_ext import MessageExt
from shmq.trace.dispatcher import AsyncTraceDispatcher, trace_topic
from shmq.trace.record import TraceRecord, pub_records, sub_records


class Log:
    def __init__(self) -> None:
        self.seen: list[tuple[str, SendMessageContext]] = []

    def send_message_before(self, ctx):
        self.seen.append(("before", ctx))

    def send_message_after(self, ctx):
        self.seen.append(("after", ctx))


class Raising:
    def send_message_before(self, ctx):
        raise RuntimeError("x")

    send_message_after = send_message_before


def _result(n: int = 1) -> SendResult:
    ids = ",".join(f"{i:032X}" for i in range(n))
    return SendResult(
        SendStatus.SEND_OK, ids, None, MessageQueue("T", "b", 2), 10, 1234, n, list(range(0, 100 * n, 100))
    )


def test_hooked_call_runs_hooks_around_and_survives_a_raising_hook():
    log = Log()
    r = _result()
    ctx = SendMessageContext("g", Message("T", b"x"), SYNC)
    assert hooked_call([Raising(), log], ctx, lambda: r) is r
    assert [k for k, _ in log.seen] == ["before", "after"] and ctx.result is r and ctx.queue == r.queue
    ctx2 = SendMessageContext("g", Message("T", b"x"), SYNC)
    with pytest.raises(KeyError):
        hooked_call([log], ctx2, lambda: {}["missing"])
    assert isinstance(ctx2.exception, KeyError) and not ctx2.success and ctx2.cost_ms >= 0


def test_hooked_future_calls_after_on_completion():
    log = Log()
    fut: Future = Future()
    ctx = SendMessageContext("g", Message("T", b"x"), "ASYNC")
    assert hooked_future([log], ctx, lambda: fut) is fut
    assert [k for k, _ in log.seen] == ["before"]
    fut.set_exception(TimeoutError("late"))
    assert [k for k, _ in log.seen] == ["before", "after"] and isinstance(ctx.exception, TimeoutError)


def test_hooked_future_answered_or_cancelled_reaches_after_with_its_outcome():
    log = Log()
    r = _result()
    answered: Future = Future()
    ctx = SendMessageContext("g", Message("T", b"x"), "ASYNC")
    hooked_future([log], ctx, lambda: answered)
    answered.set_result(r)
    assert ctx.result is r and ctx.queue == r.queue and ctx.exception is None and ctx.success
    cancelled: Future = Future()
    ctx2 = SendMessageContext("g", Message("T", b"x"), "ASYNC")
    hooked_future([log], ctx2, lambda: cancelled)
    assert cancelled.cancel()
    assert isinstance(ctx2.exception, CancelledError) and ctx2.result is None and not ctx2.success
    assert [k for k, _ in log.seen] == ["before", "after", "before", "after"]


def test_hooked_future_of_a_batch_answered_per_message_still_calls_after():
    """shmq.aio's batches answer one SendResult per message: a list, which has no queue for the context."""
    log = Log()
    fut: Future = Future()
    ctx = SendMessageContext("g", [Message("T", b"x"), Message("T", b"y")], "ASYNC")
    hooked_future([log], ctx, lambda: fut)
    fut.set_result([_result(), _result()])
    assert [k for k, _ in log.seen] == ["before", "after"]
    assert ctx.result is None and ctx.exception is None


def test_check_hook_refuses_objects_without_the_methods():
    with pytest.raises(ArgumentTypeError, match="send_message_after"):
        check_hook(object(), "send_message_before", "send_message_after")


def test_trace_lines_parse_back_and_garbage_is_skipped():
    m = MessageExt("T", b"xy", tags='q"\\\n\u00e9', keys="k", msg_id='M"1', offset_msg_id="O")
    ctx = ConsumeMessageContext("c\tg", MessageQueue("T", "b", 1), [m])
    msg_id, line = sub_records(ctx, "r", True)[0]
    r = TraceRecord.from_json(line)  # every string a user chose is escaped
    assert r is not None and (msg_id, r.msg_id, r.tags, r.group, r.keys) == ('M"1', 'M"1', m.tags, "c\tg", "k")
    assert r.cost_ms is None and '"cost_ms"' not in line  # fields a record has not are left out
    for bad in (
        "{}",
        "not json",
        "[1]",
        '{"type": "Pub", "nope": 1}',
        '{"type": "Other"}',
        "\udcff" + line,
        line.replace('"timestamp":', '"timestamp":"1"+'),
        line.replace('"group":', '"group":1,"x":'),
    ):
        assert TraceRecord.from_json(bad) is None, bad


def test_pub_records_of_a_batch_one_per_message():
    msgs = [Message("T", b"a", tags="x", keys="k1"), Message("T", b"bbb")]
    ctx = SendMessageContext("g", msgs, SYNC)
    hooked_call([], ctx, lambda: _result(2))
    records = [TraceRecord.from_json(line) for _, line in pub_records(ctx)]
    assert [(t.type, t.msg_id, t.keys, t.body_length, t.queue_offset, t.batch) for t in records] == [
        ("Pub", f"{0:032X}", "k1", 1, 10, 2),
        ("Pub", f"{1:032X}", None, 3, 11, 2),
    ]
    failed = SendMessageContext("g", msgs[0], SYNC)
    assert pub_records(failed) == []  # no answer, no id to find it by


def test_sub_records_pair_before_and_after():
    m = MessageExt("T", b"xy", tags="t", keys="k", queue_id=1, queue_offset=7, msg_id="M", reconsume_times=2)
    ctx = ConsumeMessageContext("cg", MessageQueue("T", "b", 1), [m])
    ctx.status = ConsumeResult.SUCCESS
    before, after = (TraceRecord.from_json(sub_records(ctx, "r1", b)[0][1]) for b in (True, False))
    assert before is not None and after is not None
    assert (before.type, before.status, before.reconsume_times, before.queue_offset) == ("SubBefore", None, 2, 7)
    assert (after.type, after.status, after.success, after.request_id) == ("SubAfter", "SUCCESS", True, "r1")


def test_dispatcher_drops_and_counts_when_full():
    class NoProducer:
        group = "x"

        def send_async(self, msg):
            raise AssertionError("not started: nothing is sent")

    d = AsyncTraceDispatcher(NoProducer(), buffer_size=3)  # type: ignore[arg-type]
    assert [d.append(list, (), 2) for _ in range(5)] == [True, True, True, False, False]
    assert d.dropped == 4 and d.pending == 3


def test_trace_option_names_a_topic():
    assert trace_topic(False) is None and trace_topic(True) == "RMQ_SYS_TRACE_TOPIC"
    assert trace_topic("Mine") == "Mine"
    with pytest.raises(ValueError):
        trace_topic("bad topic!")


def test_callables_become_function_filters():
    f = as_expression(lambda m: True)
    assert isinstance(f, FunctionFilter) and f.expression == "*" and f.type == "FUNCTION"
    assert as_expression(f) is f and isinstance(as_expression("A || B"), TagFilter)
    with pytest.raises(BadExpressionError, match="callable"):
        as_expression(42)  # type: ignore[arg-type]


def test_function_filter_test_counts_errors():
    f = FunctionFilter(lambda m: 1 / 0)
    m = MessageExt("T", b"x", msg_id="M")
    assert f.test(m) is False and f.test(m) is False and f.errors == 2
    assert FunctionFilter(lambda m: "truthy").test(m) is True
