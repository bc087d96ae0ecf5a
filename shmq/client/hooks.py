"""Send and consume hooks (RocketMQ's SendMessageHook and ConsumeMessageHook).

``producer.register_send_hook(hook)`` calls ``hook.send_message_before(ctx)`` before a send
and ``hook.send_message_after(ctx)`` when its outcome is known: the SendResult, or the
exception the send raised or its future got. ``consumer.register_consume_hook(hook)`` calls
``consume_message_before(ctx)`` / ``consume_message_after(ctx)`` around each listener call.
One object may implement both pairs (the trace hooks do). The same context object goes to
``before`` and ``after``, so a hook can keep what it needs between them in ``ctx.props``.

A hook that raises is logged and skipped: it never fails, delays or changes the send or the
consume. With no hook registered nothing here runs (the clients test one list for
emptiness). Where ``after`` runs: a sync send's in the caller's thread; an async send's in
the producer's reader thread, before the user's callback (keep it short: answers wait
behind it); a oneway send's right after the write (there is no answer); a consume hook's in
the consume thread, after the listener returned.
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence, TypeVar

from shmq.model.consumer_types import ConsumeContext, ConsumeResult, MessageListener
from shmq.model.message import Message, MessageBatch, MessageQueue, SendResult
from shmq.model.message_ext import MessageExt

log = logging.getLogger(__name__)

SYNC, ASYNC, ONEWAY = "SYNC", "ASYNC", "ONEWAY"  # RocketMQ's CommunicationMode


@dataclass(eq=False)
class SendMessageContext:
    """One send as hooks see it. ``message`` is what was given to the send (a Message, a list
    of them, or a MessageBatch); ``queue``, ``result`` and ``exception`` are set for ``after``."""

    group: str
    message: Message | Sequence[Message] | MessageBatch
    mode: str  # SYNC, ASYNC or ONEWAY
    begin_timestamp: int = field(default_factory=lambda: int(time.time() * 1000))  # ms since the epoch
    end_timestamp: int = 0
    queue: MessageQueue | None = None
    result: SendResult | None = None
    exception: BaseException | None = None
    props: dict[str, Any] = field(default_factory=dict)  # hooks' own state between before and after
    _begin_ns: int = field(default_factory=time.monotonic_ns, repr=False)
    _cost_ns: int = field(default=0, repr=False)

    @property
    def success(self) -> bool:
        return self.exception is None

    @property
    def cost_ms(self) -> float:
        """Milliseconds from ``before`` to ``after`` (monotonic clock)."""
        return self._cost_ns / 1e6


@dataclass(eq=False)
class ConsumeMessageContext:
    """One listener call as hooks see it; ``status``, ``success`` and ``exception`` are set for ``after``.
    An exception from the listener (or a return that is not a ConsumeResult) is RECONSUME_LATER."""

    group: str
    queue: MessageQueue
    messages: list[MessageExt]
    begin_timestamp: int = field(default_factory=lambda: int(time.time() * 1000))
    end_timestamp: int = 0
    status: ConsumeResult | None = None
    exception: BaseException | None = None
    props: dict[str, Any] = field(default_factory=dict)
    _begin_ns: int = field(default_factory=time.monotonic_ns, repr=False)
    _cost_ns: int = field(default=0, repr=False)

    @property
    def success(self) -> bool:
        return self.status is ConsumeResult.SUCCESS

    @property
    def cost_ms(self) -> float:
        return self._cost_ns / 1e6


class SendMessageHook(Protocol):
    def send_message_before(self, ctx: SendMessageContext) -> None: ...

    def send_message_after(self, ctx: SendMessageContext) -> None: ...


class ConsumeMessageHook(Protocol):
    def consume_message_before(self, ctx: ConsumeMessageContext) -> None: ...

    def consume_message_after(self, ctx: ConsumeMessageContext) -> None: ...


H = TypeVar("H")
R = TypeVar("R")


def check_hook(hook: object, before: str, after: str) -> None:
    """Refuse, at registration, an object that lacks the two methods."""
    missing = [m for m in (before, after) if not callable(getattr(hook, m, None))]
    if missing:
        raise TypeError(f"{type(hook).__name__} is not a hook: it has no {' or '.join(missing)} method")


def call_hooks(hooks: Sequence[H], method: str, ctx: object) -> None:
    """``hook.<method>(ctx)`` for each hook; one that raises is logged and the others still run."""
    for h in hooks:
        try:
            getattr(h, method)(ctx)
        except Exception:
            log.exception("%s.%s raised; ignored", type(h).__name__, method)


def send_done(hooks: Sequence[SendMessageHook], ctx: SendMessageContext, result: SendResult | None,
              exception: BaseException | None) -> None:
    """Fill in the outcome and run every hook's ``send_message_after``."""
    ctx._cost_ns = time.monotonic_ns() - ctx._begin_ns
    ctx.end_timestamp = int(time.time() * 1000)
    ctx.result, ctx.exception = result, exception
    if result is not None:
        ctx.queue = result.queue
    call_hooks(hooks, "send_message_after", ctx)


def hooked_call(hooks: Sequence[SendMessageHook], ctx: SendMessageContext, call: Callable[[], R]) -> R:
    """A send that answers in the caller's thread (sync, oneway, sync batch) with the hooks around it."""
    call_hooks(hooks, "send_message_before", ctx)
    try:
        out = call()
    except BaseException as e:
        send_done(hooks, ctx, None, e)
        raise
    send_done(hooks, ctx, out if isinstance(out, SendResult) else None, None)
    return out


def hooked_future(hooks: Sequence[SendMessageHook], ctx: SendMessageContext, submit: Callable[[], Future]) -> Future:
    """An async send with the hooks around it: ``after`` when its future completes."""
    call_hooks(hooks, "send_message_before", ctx)
    try:
        fut = submit()
    except BaseException as e:
        send_done(hooks, ctx, None, e)
        raise

    def done(f: Future) -> None:
        if f.cancelled():
            send_done(hooks, ctx, None, CancelledError())
        else:
            error = f.exception()
            send_done(hooks, ctx, f.result() if error is None else None, error)
    fut.add_done_callback(done)
    return fut


class HookedListener:
    """The user's listener with the consume hooks around each call (made at ``start`` only if a
    hook is registered, so a consumer without hooks calls its listener directly)."""

    def __init__(self, listener: MessageListener, group: str, hooks: list[ConsumeMessageHook]) -> None:
        self.listener = listener
        self.group = group
        self.hooks = hooks

    def __call__(self, msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        ctx = ConsumeMessageContext(self.group, context.message_queue, msgs)
        call_hooks(self.hooks, "consume_message_before", ctx)
        result: Any = None
        try:
            result = self.listener(msgs, context)
            return result
        except Exception as e:
            ctx.exception = e
            raise  # the consume service logs it and delivers again, as without hooks
        finally:
            ctx._cost_ns = time.monotonic_ns() - ctx._begin_ns
            ctx.end_timestamp = int(time.time() * 1000)
            ctx.status = result if isinstance(result, ConsumeResult) else ConsumeResult.RECONSUME_LATER
            call_hooks(self.hooks, "consume_message_after", ctx)

