"""asyncio twins of the consumers: ``async for msg in PushConsumer(...).messages("Orders")`` and
``await LitePullConsumer(...).poll()``.

PushConsumer delivery, at least once: the sync consumer's consume threads call a listener that
hands its messages (``consume_message_batch_max_size`` of them, 1 by default) to the event loop
and blocks until the loop gives a verdict. A batch counts as consumed (ConsumeResult.SUCCESS)
when the iterator is asked for the message after its last one, that is when the body of the
``async for`` finished with it. If the iteration ends inside a batch (``break``, an exception,
a cancelled task) or the consumer shuts down before a batch was taken, the batch is not
consumed (RECONSUME_LATER: clustering consumers get it again through the group's retry topic,
orderly ones after a suspension). So a ``break`` gives the message it stopped at back; the
internal queue is bounded by the consume threads (``consume_thread_max`` batches at most), and
the sync consumer's pull thresholds bound what is read ahead.

An iteration that started the consumer shuts it down when it ends, and a consume thread that
finds its event loop closed stops the consumer too: leaving the README's ``async for`` leaves
the group, and no thread waits for a loop that is gone, so the process exits when it ends.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from shmq.client.consumer.lite_pull import LitePullConsumer as SyncLitePullConsumer
from shmq.client.consumer.push import PushConsumer as SyncPushConsumer
from shmq.errors import ShmqError
from shmq.filter.function import Predicate
from shmq.filter.tags import Expression
from shmq.model.consumer_types import ConsumeContext, ConsumeResult
from shmq.model.message import MessageQueue
from shmq.model.message_ext import MessageExt

log = logging.getLogger(__name__)


VERDICT_CHECK_S = 0.1  # how often a consume thread waiting for the loop's verdict looks whether the loop closed


class _Delivery:
    """One listener call's messages, waiting on a consume thread for the loop's verdict."""

    __slots__ = ("msgs", "verdict", "done")

    def __init__(self, msgs: Sequence[MessageExt]) -> None:
        self.msgs = msgs
        self.verdict = ConsumeResult.RECONSUME_LATER
        self.done = threading.Event()

    def finish(self, verdict: ConsumeResult) -> None:
        """The first verdict counts (an iterator's, a shutdown's, or a closed loop's)."""
        if not self.done.is_set():
            self.verdict = verdict
            self.done.set()


def _in_thread(fn: Callable[[], object], name: str) -> Future[None]:
    """Run ``fn`` in a thread of its own and return its outcome as a Future.

    Not a daemon, not the loop's executor: the interpreter waits for it at exit, so a start or
    a stop begun on a loop that ends meanwhile (``asyncio.run`` returning) still finishes."""
    done: Future[None] = Future()
    done.set_running_or_notify_cancel()

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task, whatever it is
            done.set_exception(e)
        else:
            done.set_result(None)

    threading.Thread(target=run, name=name).start()
    return done


async def _wait(done: Future[None]) -> None:
    """Await ``done``; a cancelled wait leaves what it waits for running."""
    await asyncio.shield(asyncio.wrap_future(done))


class PushConsumer:
    """Asyncio twin of ``shmq.PushConsumer``; keyword arguments are the sync consumer's
    (``orderly=True``: one queue at a time, in queue order). No listener to register: iterate."""

    def __init__(self, group: str, broker: str | None = None, *, orderly: bool = False, **kwargs: Any) -> None:
        self.sync = SyncPushConsumer(group, broker, **kwargs)
        self.sync.register_listener(self._listener, orderly=orderly)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[_Delivery | None] = asyncio.Queue()
        self._open: set[_Delivery] = set()  # handed to the loop, no verdict yet (their threads wait)
        self._closing = False
        self._started: Future[None] | None = None  # sync.start in its thread
        self._stopped: Future[None] | None = None  # sync.shutdown in its thread
        self._stop_lock = threading.Lock()  # a consume thread that finds the loop closed stops too

    @property
    def group(self) -> str:
        return self.sync.group

    def subscribe(self, topic: str, expression: str | Expression | Predicate = "*") -> None:
        """As ``shmq.PushConsumer.subscribe``; ``messages(topic)`` does it for you."""
        self.sync.subscribe(topic, expression)

    async def start(self) -> PushConsumer:
        """Join the group and start pulling (in a thread: attaching may wait). A task cancelled
        meanwhile leaves the start running; ``shutdown`` waits for it, then stops."""
        if self._closing:
            raise ShmqError("the consumer was shut down")
        if self._started is None:
            self._loop = asyncio.get_running_loop()
            self._started = _in_thread(self.sync.start, f"shmq-aio-start-{self.group}")
        await _wait(self._started)
        return self

    async def shutdown(self) -> None:
        """Stop: batches not taken yet are not consumed (they come again), iterators end, then
        the sync consumer's shutdown (it waits up to a second for a batch an iterator holds)."""
        await _wait(self._stop())

    def _stop(self) -> Future[None]:
        """Begin the shutdown without awaiting anything (on the loop): an iteration's ``finally``
        may not get past its first ``await`` (``asyncio.run`` cancels what is left when its
        coroutine returns), so the sync shutdown runs in a thread of its own."""
        with self._stop_lock:
            if self._stopped is not None:
                return self._stopped
            self._closing = True
            while not self._queue.empty():
                d = self._queue.get_nowait()
                if d is not None:
                    self._give_back(d)
            self._queue.put_nowait(None)  # every iterator ends (each puts it back for the next)
            self._stopped = _in_thread(self._stop_sync, f"shmq-aio-stop-{self.group}")
            return self._stopped

    def _stop_sync(self) -> None:
        """In the stop thread: wait for a start begun, shut the sync consumer down, give back
        what the iterators did not finish."""
        if self._started is not None:
            futures.wait([self._started])
            if self._started.exception() is None:  # a failed start has nothing to stop
                try:
                    self.sync.shutdown()
                except Exception:
                    log.exception("consumer %r: shutdown failed", self.group)
        for d in list(self._open):
            self._give_back(d)

    def suspend(self) -> None:
        """As ``shmq.PushConsumer.suspend``: iterators get what was pulled already, then wait."""
        self.sync.suspend()

    def resume(self) -> None:
        self.sync.resume()

    async def __aenter__(self) -> PushConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def __aiter__(self) -> AsyncIterator[MessageExt]:
        return self.messages()

    async def messages(
        self, topic: str | None = None, expression: str | Expression | Predicate = "*"
    ) -> AsyncIterator[MessageExt]:
        """Every message of the subscriptions (subscribing ``topic`` first when given; starting
        the consumer if needed), until ``shutdown``. See the module for when one counts as consumed.

        An iteration that starts the consumer (``async for m in PushConsumer(...).messages(T)``)
        shuts it down when it ends, by ``break`` too: nothing else could, and its threads would
        keep the group's queues and the process. Start the consumer first (``await c.start()``)
        to iterate more than once."""
        if topic is not None:
            self.subscribe(topic, expression)
        owner = self._started is None
        try:
            await self.start()
            while True:
                d = await self._queue.get()
                if d is None:
                    self._queue.put_nowait(None)
                    return
                if d.done.is_set():  # given back by shutdown meanwhile
                    continue
                try:
                    for m in d.msgs:
                        yield m
                except BaseException:  # GeneratorExit (break, the task's error or cancel) and the like
                    self._give_back(d)
                    raise
                self._settle(d, ConsumeResult.SUCCESS)
        finally:
            if owner:
                self._stop()

    def _settle(self, d: _Delivery, verdict: ConsumeResult) -> None:
        d.finish(verdict)
        self._open.discard(d)

    def _give_back(self, d: _Delivery) -> None:
        self._settle(d, ConsumeResult.RECONSUME_LATER)

    def _listener(self, msgs: list[MessageExt], _ctx: ConsumeContext) -> ConsumeResult:
        """On a consume thread: hand ``msgs`` to the loop and wait for its verdict.

        A loop that closed with no shutdown (an iteration never finished) gives no verdict: the
        batch is given back and the consumer stops, so that the process can still exit."""
        loop = self._loop
        if self._closing or loop is None:
            return ConsumeResult.RECONSUME_LATER
        d = _Delivery(msgs)
        self._open.add(d)  # before the hand-over: shutdown gives back whatever is open
        try:
            loop.call_soon_threadsafe(self._queue.put_nowait, d)
        except RuntimeError:  # the loop is closed
            self._give_back(d)
            self._abandon()
            return ConsumeResult.RECONSUME_LATER
        while not d.done.wait(VERDICT_CHECK_S):
            if loop.is_closed():
                self._give_back(d)
                self._abandon()
        return d.verdict

    def _abandon(self) -> None:
        """On a consume thread whose loop closed: stop as ``shutdown`` would (nobody else will)."""
        with self._stop_lock:
            if self._stopped is None:
                self._closing = True
                self._stopped = _in_thread(self._stop_sync, f"shmq-aio-stop-{self.group}")


class LitePullConsumer:
    """Asyncio twin of ``shmq.LitePullConsumer``: ``await poll(timeout)``, ``async for``.

    Polls run in one worker thread of this consumer. A poll whose task is cancelled keeps what
    the thread got (it was taken from the buffers, and auto commit counts it as received): the
    next poll returns it first, so a cancel loses nothing."""

    def __init__(self, group: str, broker: str | None = None, **kwargs: Any) -> None:
        self.sync = SyncLitePullConsumer(group, broker, **kwargs)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"shmq-aio-poll-{group}")
        self._kept: list[MessageExt] = []  # what a cancelled poll got
        self._orphan: asyncio.Future[list[MessageExt]] | None = None  # a cancelled poll whose thread still runs
        self._closed = False

    @property
    def group(self) -> str:
        return self.sync.group

    def subscribe(self, topic: str, expression: str | Expression | Predicate = "*") -> None:
        self.sync.subscribe(topic, expression)

    def assignment(self) -> set[MessageQueue]:
        return self.sync.assignment()

    async def start(self) -> LitePullConsumer:
        await self._in_thread(self.sync.start)
        return self

    async def shutdown(self) -> None:
        """Stop the puller and commit (as the sync ``shutdown``); a running poll returns first."""
        if self._closed:
            return
        self._closed = True
        # not in the poll thread: a poll there returns when the sync shutdown wakes it
        await asyncio.to_thread(self.sync.shutdown)
        await asyncio.to_thread(self._executor.shutdown)

    async def __aenter__(self) -> LitePullConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """Up to ``pull_batch_size`` messages as soon as any are there, [] after ``timeout``."""
        if self._closed:
            raise ShmqError("the consumer was shut down")
        if self._orphan is not None:  # a cancelled poll still runs: what it gets comes first
            await asyncio.wait({self._orphan}, timeout=timeout)
            if self._orphan is not None:
                return []
        if self._kept:
            kept, self._kept = self._kept, []
            return kept
        running = asyncio.get_running_loop().run_in_executor(self._executor, self.sync.poll, timeout)
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            self._orphan = running
            running.add_done_callback(self._keep)
            raise

    def _keep(self, running: asyncio.Future[list[MessageExt]]) -> None:
        """A cancelled poll's thread returned: keep its messages for the next poll."""
        self._orphan = None
        if not running.cancelled() and running.exception() is None:
            self._kept.extend(running.result())

    async def commit(self) -> None:
        await self._in_thread(self.sync.commit)

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        await self._in_thread(self.sync.seek, mq, offset)

    # the other controls: as the sync consumer's, in a thread of their own (not behind a poll)

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return await asyncio.to_thread(self.sync.fetch_message_queues, topic)

    async def assign(self, mqs: Iterable[MessageQueue]) -> None:
        await asyncio.to_thread(self.sync.assign, list(mqs))

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        await asyncio.to_thread(self.sync.seek_to_begin, mq)

    async def seek_to_end(self, mq: MessageQueue) -> None:
        await asyncio.to_thread(self.sync.seek_to_end, mq)

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        self.sync.pause(mqs)

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        self.sync.resume(mqs)

    def paused(self) -> set[MessageQueue]:
        return self.sync.paused()

    async def commit_sync(self) -> None:
        await asyncio.to_thread(self.sync.commit_sync)

    async def committed(self, mq: MessageQueue) -> int:
        return int(await asyncio.to_thread(self.sync.committed, mq))

    async def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return int(await asyncio.to_thread(self.sync.offset_for_timestamp, mq, timestamp_ms))

    def __aiter__(self) -> AsyncIterator[MessageExt]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[MessageExt]:
        """Messages one by one until ``shutdown``."""
        while not self._closed:
            try:
                msgs = await self.poll(1.0)
            except ShmqError:
                if self._closed:
                    return
                raise
            for m in msgs:
                yield m

    async def _in_thread(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
