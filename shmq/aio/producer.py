"""``shmq.aio.Producer``: ``await producer.send(msg)`` on an asyncio event loop.

It wraps a ``shmq.Producer`` but never waits out ``batch_max_delay``: the sends of one
event-loop iteration are gathered by topic, and ONE flush is scheduled with ``loop.call_soon``,
which runs after the tasks already ready in this iteration. A lone ``await send`` so costs one
round trip, and 256 tasks sending at once go out together: a topic with at least ``MIN_BATCH``
sends as batches answered per message (``send_batch_async(per_message=True)``, one future and
one callback per batch), fewer through the sync producer's accumulator (which mixes the small
groups of many topics into one frame). Answers arrive on the client's reader thread; they are
queued there and the loop is woken once per burst of answers (``call_soon_threadsafe``).

A producer belongs to the event loop it was started on.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Sequence
from concurrent.futures import CancelledError, Future
from typing import Any

from shmq.client.producer.accumulator import MAX_BATCH_MESSAGES, MIN_BATCH, RECORD_OVERHEAD
from shmq.client.producer.producer import Producer as SyncProducer
from shmq.client.producer.producer import Selector
from shmq.errors import ShmqError
from shmq.model.message import Message, MessageBatch, SendResult

Waiting = list[tuple[Message, asyncio.Future[SendResult]]]  # the sends of one iteration to one (topic, timeout)
Answered = asyncio.Future[SendResult] | list[asyncio.Future[SendResult]]  # a send, or a batch answered per message


class Producer:
    """Asyncio twin of ``shmq.Producer``; keyword arguments are the sync producer's."""

    def __init__(self, group: str, broker: str | None = None, **kwargs: Any) -> None:
        self.sync = SyncProducer(group, broker, **kwargs)
        self._max_bytes: int = kwargs.get("batch_max_bytes", 256 * 1024)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[tuple[str, float | None], Waiting] = {}  # this iteration's sends, flushed by _flush
        self._flush_scheduled = False  # a call_soon(_flush) runs at the end of this iteration
        # (asyncio future or list of them, answer: a SendResult or a list of them); reader thread
        self._answers: deque[tuple[Answered, Future[Any]]] = deque()
        self._wake_scheduled = False  # a call_soon_threadsafe(_deliver) is on its way
        self._unanswered = 0  # sends awaited through this object, not answered yet (flush)
        self._all_answered: asyncio.Event | None = None  # set by _deliver when _unanswered is 0
        # traced by OpenTelemetry (shmq.otel): each send is handed over in its own task, whose
        # current span is the send span's parent (the end-of-iteration flush runs in the context
        # of whichever task scheduled it)
        self._traced = self.sync.otel is not None and self.sync.otel.tracer is not None

    @property
    def group(self) -> str:
        return self.sync.group

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Producer:
        """Attach to the broker (in a worker thread: attaching may wait ``start_timeout``)."""
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.sync.start)
        return self

    async def shutdown(self) -> None:
        """Send what waits, detach; sends still unanswered fail with ShmqError."""
        self._flush()
        await asyncio.to_thread(self.sync.shutdown)
        self._deliver()  # the failures the shutdown set, before anyone awaits them again

    async def __aenter__(self) -> Producer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # ------------------------------------------------------------------ sends

    async def send(
        self, msg: Message, selector: Selector | None = None, arg: Any = None, timeout: float | None = None
    ) -> SendResult:
        """Send and wait for the broker's answer: a SendResult, or the sync ``send``'s exception.

        Cancelling the awaiting task within the iteration of the send cancels the message (it is
        never sent); once handed over it is stored whatever happens to the task."""
        loop = self._running_loop()
        fut: asyncio.Future[SendResult] = loop.create_future()
        self._unanswered += 1
        if selector is not None or msg.delivery_rules or self._traced:  # its own queue, never batched, or traced
            self._watch(fut, self.sync.send_async(msg, selector=selector, arg=arg, timeout=timeout))
            self._schedule_flush(loop)  # the accumulator holds it: written at the end of the iteration
        else:
            waiting = self._waiting.get((msg.topic, timeout))
            if waiting is None:
                self._schedule_flush(loop)
                waiting = self._waiting[(msg.topic, timeout)] = []
            waiting.append((msg, fut))
        return await fut

    async def send_batch(
        self,
        msgs: Sequence[Message] | MessageBatch,
        selector: Selector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send messages of one topic as one batch; one SendResult (as ``shmq.Producer.send_batch``)."""
        fut: asyncio.Future[SendResult] = self._running_loop().create_future()
        self._unanswered += 1
        self._watch(fut, self.sync.send_batch_async(msgs, selector=selector, arg=arg, timeout=timeout))
        return await fut

    async def send_oneway(self, msg: Message, selector: Selector | None = None, arg: Any = None) -> None:
        """Fire and forget (no answer, no retry), through the sync producer's accumulator."""
        self.sync.send_oneway(msg, selector=selector, arg=arg)
        self._schedule_flush(self._running_loop())

    async def flush(self, timeout: float | None = None) -> bool:
        """Send what waits now and wait until every send made through this object is answered;
        False if some were still unanswered after ``timeout`` seconds."""
        self._flush()
        if not self._unanswered:
            return True
        if self._all_answered is None:
            self._all_answered = asyncio.Event()
        self._all_answered.clear()
        try:
            await asyncio.wait_for(self._all_answered.wait(), timeout)
        except TimeoutError:
            return False
        return True

    # ------------------------------------------------------------------ the end of an iteration

    def _schedule_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Hand this iteration's sends to the ring: batches per topic, or the accumulator."""
        self._flush_scheduled = False
        waiting, self._waiting = self._waiting, {}
        for (_, timeout), sends in waiting.items():
            live = [(m, f) for m, f in sends if not f.done()]  # a cancelled task's message is not sent
            self._unanswered -= len(sends) - len(live)
            sends = live
            if len(sends) < MIN_BATCH:
                for m, f in sends:
                    self._watch(f, self.sync.send_async(m, timeout=timeout))
                continue
            for chunk in self._chunks(sends):
                self._send_chunk(chunk, timeout)
        self.sync.flush(0)  # what send_async and send_oneway left in the accumulator, not waited for

    def _chunks(self, sends: Waiting) -> list[Waiting]:
        """Cut at ``batch_max_bytes`` (estimated as the accumulator does) and MAX_BATCH_MESSAGES."""
        out: list[Waiting] = [[]]
        size = 0
        for m, f in sends:
            n = len(m.body) + RECORD_OVERHEAD
            if out[-1] and (size + n > self._max_bytes or len(out[-1]) >= MAX_BATCH_MESSAGES):
                out.append([])
                size = 0
            out[-1].append((m, f))
            size += n
        return out

    def _send_chunk(self, chunk: Waiting, timeout: float | None) -> None:
        futures = [f for _, f in chunk]
        try:
            sent = self.sync.send_batch_async([m for m, _ in chunk], timeout=timeout, per_message=True)
        except Exception:  # noqa: BLE001 - a bad message, the broker gone: each send gets its own verdict
            for m, f in chunk:
                self._watch(f, self.sync.send_async(m, timeout=timeout))
            return
        sent.add_done_callback(functools.partial(self._answered, futures))

    # ------------------------------------------------------------------ answers across threads

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise ShmqError("this shmq.aio.Producer was started on another event loop")
        return loop

    def _watch(self, fut: asyncio.Future[SendResult], sent: Future[SendResult]) -> None:
        sent.add_done_callback(functools.partial(self._answered, fut))

    def _answered(self, futures: Answered, sent: Future[Any]) -> None:
        """On the reader thread (or wherever ``sent`` completed): queue the answer, wake the loop
        once. The deque is appended before the flag is read, so a ``_deliver`` that clears the
        flag afterwards still finds this answer."""
        self._answers.append((futures, sent))
        if not self._wake_scheduled and self._loop is not None:
            self._wake_scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop is closed: nobody awaits these any more
                self._wake_scheduled = False

    def _deliver(self) -> None:
        """On the loop: pass every queued answer to its asyncio future(s)."""
        self._wake_scheduled = False
        answers = self._answers
        while answers:
            futures, sent = answers.popleft()
            error: BaseException | None = None
            try:  # result() first: an answered PendingSend gives it without taking its lock
                result = sent.result(0)
            except CancelledError:
                result, error = None, asyncio.CancelledError()
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting task, whatever it is
                result, error = None, e
            if isinstance(futures, list):  # a batch answered per message
                self._unanswered -= len(futures)
                for i, fut in enumerate(futures):
                    _settle(fut, result[i] if error is None else None, error)
            else:
                self._unanswered -= 1
                _settle(futures, result, error)
        if not self._unanswered and self._all_answered is not None:
            self._all_answered.set()


def _settle(
    fut: asyncio.Future[SendResult], result: SendResult | BaseException | None, error: BaseException | None
) -> None:
    if fut.done():  # its task was cancelled
        return
    if isinstance(error, asyncio.CancelledError):
        fut.cancel()
    elif error is not None:
        fut.set_exception(error)
    elif isinstance(result, BaseException):  # one message of a batch the broker refused
        fut.set_exception(result)
    elif result is not None:  # None only with an error
        fut.set_result(result)
