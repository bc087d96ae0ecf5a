"""Consume services: how pulled messages reach the user's listener (RocketMQ's ConsumeMessage*Service).

Concurrently: each pulled list goes to the thread pool and is handed to the listener in slices
of ``consume_message_batch_max_size``; lists of different pulls and queues run in parallel.
Orderly: one task per queue at a time, in queue order.

A message the listener did not consume (RECONSUME_LATER, an exception, not a ConsumeResult):
- clustering: sent back to the broker (one SEND_BACK for the failed messages of a pulled list),
  which stores it under ``%RETRY%<group>`` with delay level 3 + reconsume times, or under
  ``%DLQ%<group>`` after ``max_reconsume_times``; once stored it counts as consumed. If the
  broker does not take it (gone, a replica) it stays in its ProcessQueue and is delivered again
  here after a short growing delay with ``reconsume_times`` + 1, as RocketMQ does;
- broadcasting: logged and dropped (RocketMQ's rule: there is no retry topic per member).
Orderly listeners suspend the queue (SUSPEND_CURRENT_QUEUE_A_MOMENT) and get the same messages
again; a message suspended ``max_reconsume_times`` times goes to the DLQ (dropped, logged, when
broadcasting) and the queue moves on.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Protocol

from shmq.client.consumer.process_queue import ProcessQueue
from shmq.codec.send_back import TO_DLQ
from shmq.model.consumer_types import ConsumeContext, ConsumeResult, MessageListener
from shmq.model.message_ext import MessageExt

log = logging.getLogger(__name__)

FIRST_RETRY_DELAY_S = 0.1
MAX_RETRY_DELAY_S = 5.0
ORDERLY_SLICE_S = 0.5  # an orderly task yields its thread after this long, so busy queues take turns


def retry_delay(reconsume_times: int) -> float:
    """Seconds before delivering again a message already delivered ``reconsume_times`` + 1 times."""
    answer: float = min(FIRST_RETRY_DELAY_S * 2 ** min(reconsume_times, 16), MAX_RETRY_DELAY_S)
    return answer


class SendBack(Protocol):
    """Where a clustering consumer's unconsumed messages go (``SendBackClient``): per message
    whether the broker stored it under the retry topic or DLQ."""

    def send_back(self, msgs: Sequence[MessageExt], delay_level: int = 0) -> list[bool]: ...


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
    def __init__(
        self,
        listener: MessageListener,
        executor: Executor,
        scheduler: DelayScheduler,
        batch_max: int,
        max_reconsume_times: int,
        suspend: float,
        on_consumed: Callable[[ProcessQueue], None],
        send_back: SendBack | None,
    ) -> None:
        """``send_back`` None: broadcasting, messages not consumed are dropped (logged)."""
        self.listener = listener
        self.executor = executor
        self.scheduler = scheduler
        self.batch_max = batch_max
        self.max_reconsume_times = max_reconsume_times
        self.suspend = suspend
        self.on_consumed = on_consumed
        self.send_back = send_back

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
            log.exception(
                "listener failed on %d message(s) of %s/%d; they will be delivered again",
                len(msgs),
                pq.mq.topic,
                pq.mq.queue_id,
            )
            return ConsumeResult.RECONSUME_LATER
        if not isinstance(result, ConsumeResult):
            log.warning("listener returned %r, not a ConsumeResult: delivering again", result)
            return ConsumeResult.RECONSUME_LATER
        return result

    def _spawn(self, fn: Callable[..., object], *args: object) -> bool:
        """Run ``fn(*args)`` in the pool; False if the pool takes no more work: the consumer
        shuts down, or the interpreter exits (it stops the pools before the ``atexit`` handler
        that shuts down a consumer left open). The messages stay in their process queue, not
        committed: the group gets them again."""
        try:
            self.executor.submit(fn, *args)
        except RuntimeError:  # "cannot schedule new futures after (interpreter) shutdown"
            return False
        return True

    def _dropped(self, pq: ProcessQueue, msgs: list[MessageExt], why: str) -> None:
        for m in msgs:
            log.warning(
                "BROADCASTING: message %s of %s/%d %s; dropped (no retry topic per member)",
                m.msg_id,
                pq.mq.topic,
                pq.mq.queue_id,
                why,
            )


class ConsumeMessageConcurrentlyService(_Service):
    """``slots``: how many listener calls may run at once (``consume_thread_max``), shared by the
    pool's workers and a puller that calls the listener itself (``reserve_here``); None: the
    pool's size alone bounds them."""

    slots: threading.Semaphore | None = None

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Hand pulled messages (already in ``pq``) to the thread pool."""
        self._spawn(self._consume_in_slot, pq, msgs)

    def _consume_in_slot(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if self.slots is None:
            self._consume(pq, msgs)
            return
        with self.slots:
            self._consume(pq, msgs)

    def reserve_here(self) -> bool:
        """Take a listener slot for ``consume_here`` without waiting; False if all are taken."""
        return self.slots is None or self.slots.acquire(blocking=False)

    def unreserve(self) -> None:
        """Give back the slot of a ``reserve_here`` not followed by ``consume_here``."""
        if self.slots is not None:
            self.slots.release()

    def consume_here(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Call the listener on pulled messages in the calling thread, in the slot
        ``reserve_here`` took (a puller that handed its turn over: ``PushConsumer._run``)."""
        try:
            self._consume(pq, msgs)
        finally:
            self.unreserve()

    def _consume(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Slices of one pulled list in turn; a rebalance that drops the queue stops it between
        slices. The slices not consumed are sent back with one frame at the end of the list."""
        if not pq.begin():
            return
        ctx = ConsumeContext(pq.mq, self.suspend)
        done: list[MessageExt] = []
        failed: list[MessageExt] = []
        level = 0  # the delay level the listener chose for the failed slices (the last choice counts)
        try:
            for i in range(0, len(msgs), self.batch_max):
                if pq.dropped:
                    return
                chunk = msgs[i : i + self.batch_max]
                ctx.delay_level_when_next_consume = 0
                if self._invoke(pq, chunk, ctx) is ConsumeResult.SUCCESS:
                    done.extend(chunk)
                else:
                    failed.extend(chunk)
                    level = ctx.delay_level_when_next_consume or level
            if failed:
                done.extend(self._not_consumed(pq, failed, level))
        finally:
            if done:  # one removal per pulled list: the commit offset moves once, not per message
                pq.remove(done)
            pq.end()  # after the removal: a rebalance waiting for this call then commits past them
            if done:
                self.on_consumed(pq)

    def _not_consumed(self, pq: ProcessQueue, failed: list[MessageExt], delay_level: int) -> list[MessageExt]:
        """Send back (clustering) or drop (broadcasting) messages the listener did not consume;
        those the broker did not take are delivered again here. Returns the ones now settled."""
        if self.send_back is None:
            self._dropped(pq, failed, "was not consumed")
            return failed
        stored = self.send_back.send_back(failed, delay_level)
        settled = [m for m, ok in zip(failed, stored) if ok]
        again = [m.redelivered() for m, ok in zip(failed, stored) if not ok]
        if again:
            self.scheduler.schedule(
                retry_delay(again[0].reconsume_times - 1), functools.partial(self._redeliver, pq, again)
            )
        return settled

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
        self._restart(pq)

    def _restart(self, pq: ProcessQueue) -> None:
        """The queue's task, again in the pool; if the pool takes no more work, the queue is idle."""
        if not self._spawn(self._run, pq):
            with pq.lock:
                pq.consuming = False

    def _run(self, pq: ProcessQueue) -> None:
        start = time.monotonic()
        ctx = ConsumeContext(pq.mq, self.suspend)
        while True:
            with pq.lock:
                if pq.dropped or not pq.pending:
                    pq.consuming = False
                    return
                chunk = [pq.pending[i] for i in range(min(self.batch_max, len(pq.pending)))]
            ctx.suspend_current_queue_time = self.suspend
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
                settled = self._past_max(pq, chunk)
                gone = {id(m) for m in settled}  # to the DLQ: the queue moves on past them
                again = [m.redelivered() for m in chunk if id(m) not in gone]
                with pq.lock:
                    for _ in chunk:
                        pq.pending.popleft()
                    pq.pending.extendleft(reversed(again))
                if settled:
                    pq.remove(settled)
                    self.on_consumed(pq)
                if again:
                    self.scheduler.schedule(max(ctx.suspend_current_queue_time, 0), lambda: self._restart(pq))
                    return
                continue
            if time.monotonic() - start > ORDERLY_SLICE_S:
                self._restart(pq)
                return

    def _past_max(self, pq: ProcessQueue, chunk: list[MessageExt]) -> list[MessageExt]:
        """Messages of a suspended chunk that were consumed ``max_reconsume_times`` times: sent to
        the DLQ (dropped when broadcasting); those the broker did not take stay suspended."""
        over = [m for m in chunk if m.reconsume_times >= self.max_reconsume_times]
        if not over:
            return []
        if self.send_back is None:
            self._dropped(pq, over, f"was suspended {self.max_reconsume_times} times")
            return over
        stored = self.send_back.send_back(over, TO_DLQ)
        return [m for m, ok in zip(over, stored) if ok]
