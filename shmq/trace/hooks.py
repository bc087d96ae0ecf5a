"""The trace hooks: a client's ``trace`` option registers one of these, feeding its dispatcher.

Each hook only appends the context to the dispatcher's buffer; the records are built in the
dispatcher's thread. Messages of the trace topic itself are not traced (a consumer reading
trace records with ``trace=True`` would otherwise trace its own reading without end).
"""

from __future__ import annotations

import itertools
import os

from shmq.client.hooks import ConsumeMessageContext, SendMessageContext
from shmq.model.message import Message
from shmq.trace.dispatcher import AsyncTraceDispatcher
from shmq.trace.record import pub_records, sub_records

REQUEST_ID = "trace.request_id"  # key of ctx.props: pairs a call's SubBefore and SubAfter records


class SendTraceHook:
    """Pub records of every answered send."""

    def __init__(self, dispatcher: AsyncTraceDispatcher) -> None:
        self.dispatcher = dispatcher

    def send_message_before(self, ctx: SendMessageContext) -> None:
        pass  # the record needs the answer: everything happens after

    def send_message_after(self, ctx: SendMessageContext) -> None:
        r = ctx.result
        if r is None or r.queue.topic == self.dispatcher.topic:
            return
        self.dispatcher.append(pub_records, (ctx,), 1 if isinstance(ctx.message, Message) else r.count)


class ConsumeTraceHook:
    """SubBefore and SubAfter records of every listener call."""

    def __init__(self, dispatcher: AsyncTraceDispatcher) -> None:
        self.dispatcher = dispatcher
        self._calls = itertools.count(1)
        self._prefix = f"{os.getpid()}-{id(self):x}-"

    def consume_message_before(self, ctx: ConsumeMessageContext) -> None:
        if ctx.queue.topic == self.dispatcher.topic:
            return
        request_id = ctx.props[REQUEST_ID] = f"{self._prefix}{next(self._calls)}"
        self.dispatcher.append(sub_records, (ctx, request_id, True), len(ctx.messages))

    def consume_message_after(self, ctx: ConsumeMessageContext) -> None:
        request_id = ctx.props.get(REQUEST_ID)
        if request_id is not None:
            self.dispatcher.append(sub_records, (ctx, request_id, False), len(ctx.messages))
