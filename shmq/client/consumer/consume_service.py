"""Consume services: how pulled messages reach the user's listener (RocketMQ's ConsumeMessage*Service).

Concurrently: each pulled list goes to the thread pool and is handed to the listener in slices
of ``consume_message_batch_max_size``; lists of different pulls and queues run in parallel.
Orderly: one task per queue at a time, in queue order. A message the listener did not
consume stays in its ProcessQueue (so its offset is never committed past) and is delivered
again to this consumer after a short growing delay with ``reconsume_times`` + 1; none is
dropped. (The retry topic and the DLQ after ``max_reconsume_times`` come with the retry
feature; until then redelivery goes on at the longest delay.)
"""
from __future__ import annotations

import functools

import heapq
import itertools
import logging
import threading
import time
from concurrent.futures import Executor
from typing import Callable

from shmq.model.consumer_types import ConsumeContext, ConsumeResult, MessageListener
from shmq.model.message_ext import MessageExt
from shmq.client.consumer.process_queue import ProcessQueue

log = logging.getLogger(__name__)

FIRST_RETRY_DELAY_S = 0.1
MAX_RETRY_DELAY_S = 5.0
ORDERLY_SLICE_S = 0.5  # an orderly task yields its thread after this long, so busy queues take turns


def retry_delay(reconsume_times: int) -> float:
    """Seconds before delivering again a message already delivered ``reconsume_times`` + 1 times."""
    return min(FIRST_RETRY_DELAY_S * 2 ** min(reconsume_times, 16), MAX_RETRY_DELAY_S)


class DelayScheduler:
    """One thread running callbacks at their due time (redeliveries, suspended orderly queues)."""

    def __init__(self, name: str) -> None:
        self._heap: list[tuple[float, int, Callable[[], object]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule(self, delay: float, fn: Callable[[], object]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), fn))
            self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        self._thread.join(2.0)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception:
                log.exception("scheduled consume task failed")


class _Service:
    def __init__(self, listener: MessageListener, executor: Executor, scheduler: DelayScheduler, batch_max: int,
                 max_reconsume_times: int, suspend_millis: int, on_consumed: Callable[[ProcessQueue], None]) -> None:
        self.listener = listener
        self.executor = executor
        self.scheduler = scheduler
        self.batch_max = batch_max
        self.max_reconsume_times = max_reconsume_times
        self.suspend_millis = suspend_millis
        self.on_consumed = on_consumed

    def _call(self, pq: ProcessQueue, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult | None:
        """The listener's verdict; None when the queue was dropped and the call skipped."""
        if not pq.begin():
            return None
        try:
            return self._invoke(pq, msgs, ctx)
        finally:
            pq.end()

    def _invoke(self, pq: ProcessQueue, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        """Call the listener (between ``pq.begin()`` and ``pq.end()``); an exception means RECONSUME_LATER."""
        try:
            result = self.listener(msgs, ctx)
        except Exception:
            log.exception("listener failed on %d message(s) of %s/%d; they will be delivered again",
                          len(msgs), pq.mq.topic, pq.mq.queue_id)
            return ConsumeResult.RECONSUME_LATER
        if not isinstance(result, ConsumeResult):
            log.warning("listener returned %r, not a ConsumeResult: delivering again", result)
            return ConsumeResult.RECONSUME_LATER
        return result

    def _again(self, msgs: list[MessageExt]) -> list[MessageExt]:
        out = []
        for m in msgs:
            if m.reconsume_times + 1 == self.max_reconsume_times:
                log.warning("message %s reached maxReconsumeTimes %d; it stays in redelivery until the retry "
                            "topic and DLQ exist", m.msg_id, self.max_reconsume_times)
            out.append(m.redelivered())
        return out


class ConsumeMessageConcurrentlyService(_Service):
    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Hand pulled messages (already in ``pq``) to the thread pool."""
        self.executor.submit(self._consume, pq, msgs)

    def _consume(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Slices of one pulled list in turn; a rebalance that drops the queue stops it between slices."""
        if not pq.begin():
            return
        ctx = ConsumeContext(pq.mq, self.suspend_millis)
        done: list[MessageExt] = []
        try:
            for i in range(0, len(msgs), self.batch_max):
                if pq.dropped:
                    return
                chunk = msgs[i:i + self.batch_max]
                if self._invoke(pq, chunk, ctx) is ConsumeResult.SUCCESS:
                    done.extend(chunk)
                else:
                    again = self._again(chunk)
                    delay = retry_delay(chunk[0].reconsume_times)
                    self.scheduler.schedule(delay, functools.partial(self._redeliver, pq, again))
        finally:
            if done:  # one removal per pulled list: the commit offset moves once, not per message
                pq.remove(done)
            pq.end()  # after the removal: a rebalance waiting for this call then commits past them
            if done:
                self.on_consumed(pq)

    def _redeliver(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if not pq.dropped:
            self.submit(pq, msgs)


class ConsumeMessageOrderlyService(_Service):
    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Queue pulled messages behind the ones already waiting; start the queue's task if idle."""
        with pq.lock:
            pq.pending.extend(msgs)
            if pq.consuming:
                return
            pq.consuming = True
        self.executor.submit(self._run, pq)

    def _run(self, pq: ProcessQueue) -> None:
        start = time.monotonic()
        ctx = ConsumeContext(pq.mq, self.suspend_millis)
        while True:
            with pq.lock:
                if pq.dropped or not pq.pending:
                    pq.consuming = False
                    return
                chunk = [pq.pending[i] for i in range(min(self.batch_max, len(pq.pending)))]
            ctx.suspend_current_queue_time_millis = self.suspend_millis
            result = self._call(pq, chunk, ctx)
            if result is None:
                with pq.lock:
                    pq.consuming = False
                return
            if result is ConsumeResult.SUCCESS:
                with pq.lock:
                    for _ in chunk:
                        pq.pending.popleft()
                pq.remove(chunk)
                self.on_consumed(pq)
            else:
                again = self._again(chunk)
                with pq.lock:
                    for i, m in enumerate(again):
                        pq.pending[i] = m
                self.scheduler.schedule(max(ctx.suspend_current_queue_time_millis, 0) / 1000,
                                        lambda: self.executor.submit(self._run, pq))
                return
            if time.monotonic() - start > ORDERLY_SLICE_S:
                self.executor.submit(self._run, pq)
                return
