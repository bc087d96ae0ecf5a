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
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from shmq.errors import ArgumentTypeError
from shmq.model.consumer_types import ConsumeContext, ConsumeResult, MessageListener
from shmq.model.message import Message, MessageBatch, MessageQueue, SendResult
from shmq.model.message_ext import MessageExt

log = logging.getLogger(__name__)

SYNC, ASYNC, ONEWAY = "SYNC", "ASYNC", "ONEWAY"  # RocketMQ's CommunicationMode
LOG_INTERVAL_S = 10.0


class _Context:
    """Timing shared by both contexts. Slotted classes with a plain ``__init__``: one is made per
    send while a hook is registered, and a dataclass with default factories cost a microsecond."""

    __slots__ = ("begin_timestamp", "end_timestamp", "props", "_begin_ns", "_cost_ns")

    def __init__(self) -> None:
        self.begin_timestamp = int(time.time() * 1000)  # ms since the epoch
        self.end_timestamp = 0
        self.props: dict[str, Any] = {}  # hooks' own state between before and after
        self._begin_ns = time.monotonic_ns()
        self._cost_ns = 0

    def _finish(self) -> None:
        self._cost_ns = time.monotonic_ns() - self._begin_ns
        self.end_timestamp = int(time.time() * 1000)

    @property
    def cost_ms(self) -> float:
        """Milliseconds from ``before`` to ``after`` (monotonic clock)."""
        return self._cost_ns / 1e6

    def __repr__(self) -> str:
        names = [n for c in type(self).__mro__ for n in getattr(c, "__slots__", ()) if not n.startswith("_")]
        return f"{type(self).__name__}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in names) + ")"


class SendMessageContext(_Context):
    """One send as hooks see it. ``message`` is what was given to the send (a Message, a list
    of them, or a MessageBatch); ``mode`` SYNC, ASYNC or ONEWAY; ``queue``, ``result`` and
    ``exception`` are set for ``after``."""

    __slots__ = ("group", "message", "mode", "queue", "result", "exception")

    def __init__(self, group: str, message: Message | Sequence[Message] | MessageBatch, mode: str) -> None:
        super().__init__()
        self.group = group
        self.message = message
        self.mode = mode
        self.queue: MessageQueue | None = None
        self.result: SendResult | None = None
        self.exception: BaseException | None = None

    @property
    def success(self) -> bool:
        return self.exception is None


class ConsumeMessageContext(_Context):
    """One listener call as hooks see it; ``status``, ``success`` and ``exception`` are set for ``after``.
    An exception from the listener (or a return that is not a ConsumeResult) is RECONSUME_LATER."""

    __slots__ = ("group", "queue", "messages", "status", "exception")

    def __init__(self, group: str, queue: MessageQueue, messages: list[MessageExt]) -> None:
        super().__init__()
        self.group = group
        self.queue = queue
        self.messages = messages
        self.status: ConsumeResult | None = None
        self.exception: BaseException | None = None

    @property
    def success(self) -> bool:
        return self.status is ConsumeResult.SUCCESS


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
        raise ArgumentTypeError(f"{type(hook).__name__} is not a hook: it has no {' or '.join(missing)} method")


_failures: dict[tuple[int, str], float] = {}  # (hook id, method) -> when its failure was last logged


def call_hooks(hooks: Sequence[H], method: str, ctx: object) -> None:
    """``hook.<method>(ctx)`` for each hook; one that raises is logged (with its traceback at most
    once per ``LOG_INTERVAL_S`` per hook and method: a broken hook must not flood the log) and
    the others still run."""
    for h in hooks:
        try:
            getattr(h, method)(ctx)
        except Exception:
            now, key = time.monotonic(), (id(h), method)
            if now - _failures.get(key, -LOG_INTERVAL_S) >= LOG_INTERVAL_S:
                _failures[key] = now
                log.exception("%s.%s raised; ignored (the send or consume goes on)", type(h).__name__, method)


def send_done(
    hooks: Sequence[SendMessageHook],
    ctx: SendMessageContext,
    result: SendResult | None,
    exception: BaseException | None,
) -> None:
    """Fill in the outcome and run every hook's ``send_message_after``."""
    ctx._finish()
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


def hooked_future(
    hooks: Sequence[SendMessageHook], ctx: SendMessageContext, submit: Callable[[], Future[R]]
) -> Future[R]:
    """An async send with the hooks around it: ``after`` when its future completes."""
    call_hooks(hooks, "send_message_before", ctx)
    try:
        fut = submit()
    except BaseException as e:
        send_done(hooks, ctx, None, e)
        raise

    def done(f: Future[R]) -> None:
        # f is done: one result() call (one turn of its lock) reads any of its three outcomes
        try:
            result = f.result()  # a list for a batch answered per message
        except BaseException as e:  # noqa: BLE001 - the send's error (CancelledError if cancelled) goes to the hooks
            send_done(hooks, ctx, None, e)
        else:
            send_done(hooks, ctx, result if isinstance(result, SendResult) else None, None)

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
        result: ConsumeResult | None = None
        try:
            result = self.listener(msgs, context)
            return result
        except Exception as e:
            ctx.exception = e
            raise  # the consume service logs it and delivers again, as without hooks
        finally:
            ctx._finish()
            ctx.status = result if isinstance(result, ConsumeResult) else ConsumeResult.RECONSUME_LATER
            call_hooks(self.hooks, "consume_message_after", ctx)
