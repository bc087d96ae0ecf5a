"""The spans and metrics of the clients: a send hook, a consume hook and a receive observer.

``SendSpanHook`` (a producer's send hook): a ``send <topic>`` span (PRODUCER) per send or batch,
a child of whatever span is current in the sending thread; its context goes into every
message's ``traceparent`` / ``tracestate`` properties before the message is encoded. Sync sends
end it in the caller's thread, async ones in the producer's reader thread when the answer
comes. ``ProcessSpanHook`` (a push consumer's consume hook): a ``process <topic>`` span
(CONSUMER) around each listener call, current while the listener runs (the listener's own
spans are its children); one message: a child of the producer's send span; several: linked to
each producer's context. ``ReceiveObserver`` (LitePullConsumer.poll, PullConsumer.pull,
SimpleConsumer.receive): a ``receive <topic>`` span (CLIENT) per call that got messages, linked
to each message's producer context, as the conventions model a pull.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from opentelemetry import context, trace
from opentelemetry.trace import NonRecordingSpan, SpanKind, Status, StatusCode

from shmq.client.hooks import ConsumeMessageContext, SendMessageContext
from shmq.model.consumer_types import MessageModel, PullResult
from shmq.model.message import Message, MessageBatch
from shmq.model.message_ext import MessageExt
from shmq.otel import attributes as A
from shmq.otel.instruments import Instruments
from shmq.otel.propagation import extract, inject, links

SPAN = "otel.span"  # keys of the hook context's props: the span, the attach token
TOKEN = "otel.token"

R = TypeVar("R")


def error_type(e: BaseException) -> str:
    """The conventions' ``error.type``: the exception's fully qualified class name."""
    cls = type(e)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _fail(span: trace.Span, error: str, exception: BaseException | None) -> None:
    span.set_attribute(A.ERROR_TYPE, error)
    if exception is not None:
        span.record_exception(exception)
    span.set_status(Status(StatusCode.ERROR, str(exception) if exception is not None else error))


class SendSpanHook:
    """The send hook of an instrumented producer (see the module)."""

    def __init__(self, inst: Instruments) -> None:
        self.inst = inst
        self.tracer = inst.tracer

    def send_message_before(self, ctx: SendMessageContext) -> None:
        tracer = self.tracer
        if tracer is None:
            return
        sent = ctx.message
        topic = A.topic_of(sent)
        span = tracer.start_span(f"send {topic}", kind=SpanKind.PRODUCER, attributes=A.send_attributes(sent, topic))
        ctx.props[SPAN] = span
        if not span.get_span_context().is_valid:
            return
        if isinstance(sent, Message | MessageBatch):
            sent.properties = inject(span, sent.properties)
        else:
            for m in sent:
                if isinstance(m, Message):
                    m.properties = inject(span, m.properties)

    def send_message_after(self, ctx: SendMessageContext) -> None:
        exc = ctx.exception
        error = None if exc is None else error_type(exc)
        span = ctx.props.get(SPAN)
        if span is not None:
            r = ctx.result
            if r is not None:  # one call: the SDK takes the span's lock once per call
                q = r.queue
                where = {A.PARTITION: str(q.queue_id), A.SERVER_ADDRESS: q.broker_name}
                if isinstance(ctx.message, Message):
                    where[A.MESSAGE_ID] = r.msg_id
                span.set_attributes(where)
            if error is not None:
                _fail(span, error, exc)
            span.end()
        inst = self.inst
        if inst.metered:
            attrs = A.metric_attributes("send", A.topic_of(ctx.message), None, error)
            inst.operation_duration.record(ctx.cost_ms / 1000, attrs)
            inst.sent.add(A.count_of(ctx.message), attrs)


class ProcessSpanHook:
    """The consume hook of an instrumented push consumer (see the module)."""

    def __init__(self, inst: Instruments, group: str, model: MessageModel) -> None:
        self.inst = inst
        self.tracer = inst.tracer
        self.group = group
        self.model = model

    def consume_message_before(self, ctx: ConsumeMessageContext) -> None:
        tracer = self.tracer
        if tracer is None:
            return
        msgs = ctx.messages
        topic = A.common_topic(msgs)
        parent: context.Context | None = None
        linked = None
        if len(msgs) == 1:
            sc = extract(msgs[0].properties)
            if sc is not None:
                parent = trace.set_span_in_context(NonRecordingSpan(sc))
        else:
            linked = links(m.properties for m in msgs)
        span = tracer.start_span(
            f"process {topic}" if topic else "process",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=linked,
            attributes=A.consume_attributes(msgs, topic, self.group, self.model, "process"),
        )
        ctx.props[SPAN] = span
        ctx.props[TOKEN] = context.attach(trace.set_span_in_context(span))

    def consume_message_after(self, ctx: ConsumeMessageContext) -> None:
        exc = ctx.exception
        error = None
        if exc is not None:
            error = error_type(exc)
        elif not ctx.success and ctx.status is not None:
            error = ctx.status.value  # RECONSUME_LATER, SUSPEND_CURRENT_QUEUE_A_MOMENT
        token = ctx.props.get(TOKEN)
        if token is not None:
            context.detach(token)
        span = ctx.props.get(SPAN)
        if span is not None:
            if error is not None:
                _fail(span, error, exc)
            span.end()
        inst = self.inst
        if inst.metered:
            attrs = A.metric_attributes("process", A.common_topic(ctx.messages), self.group, error)
            inst.process_duration.record(ctx.cost_ms / 1000, attrs)
            inst.consumed.add(len(ctx.messages), attrs)


def _messages(result: object) -> Sequence[MessageExt]:
    return result.messages if isinstance(result, PullResult) else result  # type: ignore[return-value]


class ReceiveObserver:
    """Spans and metrics of an instrumented pull-style consumer's receive calls (see the module)."""

    def __init__(self, inst: Instruments, group: str, model: MessageModel | None) -> None:
        self.inst = inst
        self.tracer = inst.tracer
        self.group = group
        self.model = model

    def receive(self, call: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """``call(*args, **kwargs)``, a poll, pull or receive giving a list of messages or a PullResult."""
        start_ns = time.time_ns()
        begin = time.perf_counter()
        try:
            out = call(*args, **kwargs)
        except Exception as e:
            self._record(start_ns, time.perf_counter() - begin, (), e)
            raise
        self._record(start_ns, time.perf_counter() - begin, _messages(out), None)
        return out

    def _record(self, start_ns: int, seconds: float, msgs: Sequence[MessageExt], exc: Exception | None) -> None:
        topic = A.common_topic(msgs)
        error = None if exc is None else error_type(exc)
        tracer = self.tracer
        if tracer is not None and (msgs or exc is not None):
            span = tracer.start_span(
                f"receive {topic}" if topic else "receive",
                kind=SpanKind.CLIENT,
                links=links(m.properties for m in msgs),
                attributes=A.consume_attributes(msgs, topic, self.group, self.model, "receive"),
                start_time=start_ns,
            )
            if error is not None:
                _fail(span, error, exc)
            span.end()
        inst = self.inst
        if inst.metered:
            attrs = A.metric_attributes("receive", topic, self.group, error)
            inst.operation_duration.record(seconds, attrs)
            if msgs:
                inst.consumed.add(len(msgs), attrs)
