"""ProduceAccumulator: send_async and send_oneway messages gathered into batches (RocketMQ 5's autoBatch).

Encoding and writing one message at a time costs a Python producer ~20 us; as a batch the
same message costs ~1-2 us. Messages are grouped by (topic, queue), in call order, and a
group is handed to ``flush`` when it reaches ``batch_max_bytes`` or ``batch_max_delay_ms``
after its first message (a flusher thread sees to the delay). A queue whose batch was still
small at two deadlines in a row (many topics, each sent rarely) is not held back for the
next ``SPARSE_S``: waiting would only add latency. (One small batch is no sign: a caller that
waits on a window of sends leaves a batch of one open while it waits.) Waiting on the Future
of a message still in a batch (``PendingSend.result``) sends that batch at once: a caller that
keeps a window of sends in flight never waits out the delay. Flushes run under the
accumulator's lock, so the batches of one queue reach the ring in the order they were filled.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from concurrent.futures._base import FINISHED as _FINISHED
from concurrent.futures._base import PENDING as _PENDING
from dataclasses import dataclass, field
from typing import Callable

from shmq.errors import ShmqError
from shmq.message import Message

log = logging.getLogger(__name__)

MAX_BATCH_MESSAGES = 4096
MIN_BATCH = 8  # a batch's fixed cost is about that of 8 single sends: fewer go one by one
SPARSE_S = 1.0  # a queue whose batches stay small goes unbatched this long (probing sooner cost 2x, measured)
RECORD_OVERHEAD = 160  # header, topic and properties of a typical record: how a batch's size is estimated

Flush = Callable[[str, int, list[Message], list["Future | None"]], None]


@dataclass(eq=False)
class _Batch:
    key: tuple[str, int]
    deadline: float
    condition: threading.Condition = field(default_factory=threading.Condition)
    msgs: list[Message] = field(default_factory=list)
    futures: list[Future | None] = field(default_factory=list)
    size: int = 0
    sent: bool = False


class PendingSend(Future):
    """The Future of an accumulated message: waiting on it sends its batch now.

    The futures of one batch share one Condition (``add`` sets it): making a Condition per
    message cost more than the rest of an async send's bookkeeping. Sharing means a waiter can
    wake for a sibling's result, so ``result`` and ``exception`` wait in a loop.
    """

    _accumulator: ProduceAccumulator | None = None
    _batch: _Batch | None = None

    def __init__(self) -> None:  # Future.__init__ without its Condition
        self._condition = None
        self._state = _PENDING
        self._result = None
        self._exception = None
        self._waiters = []
        self._done_callbacks = []

    def result(self, timeout: float | None = None):  # noqa: ANN201 (Future's signature)
        if self._state == _FINISHED and self._exception is None:  # the usual case: answered already
            return self._result
        self._wait(timeout)
        return super().result(0)

    def exception(self, timeout: float | None = None):  # noqa: ANN201
        self._wait(timeout)
        return super().exception(0)

    def _wait(self, timeout: float | None) -> None:
        acc, b = self._accumulator, self._batch
        if acc is not None and b is not None and not b.sent:
            acc.send_now(b)
        self._accumulator = self._batch = None
        if self.done():
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while not self.done():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return
                self._condition.wait(remaining)


def settle(futures: list[PendingSend | None], results: list | None, error: BaseException | None) -> None:
    """Finish the futures of one batch (None: a oneway message): ``results[i]`` each, or ``error``
    for all. They share one Condition: taken once and notified once for the lot. A future the
    caller cancelled stays cancelled."""
    live = [(i, f) for i, f in enumerate(futures) if f is not None]
    if not live:
        return
    finished = []
    cond = live[0][1]._condition
    with cond:
        for i, f in live:
            if f._state != _PENDING:
                continue
            if error is not None:
                f._exception = error
            else:
                f._result = results[i]
            f._state = _FINISHED
            for w in f._waiters:  # concurrent.futures.wait / as_completed
                if error is not None:
                    w.add_exception(f)
                else:
                    w.add_result(f)
            finished.append(f)
        cond.notify_all()
    for f in finished:
        if f._done_callbacks:
            f._invoke_callbacks()


class ProduceAccumulator:
    """Per-(topic, queue) batches; ``flush(topic, queue_id, msgs, futures)`` sends one (queue -1: the broker picks)."""

    def __init__(self, flush: Flush, batch_max_delay_ms: float, batch_max_bytes: int) -> None:
        self._flush = flush
        self.delay = batch_max_delay_ms / 1000
        self.max_bytes = batch_max_bytes
        self._cond = threading.Condition()
        self._batches: dict[tuple[str, int], _Batch] = {}
        self._sparse: dict[tuple[str, int], float] = {}  # key -> until when its messages go at once
        self._was_small: set[tuple[str, int]] = set()  # keys whose last deadline flush was small
        self._closed = False
        self._thread: threading.Thread | None = None

    def add(self, msg: Message, queue_id: int, future: PendingSend | None) -> bool:
        """Queue a checked message (flushing its batch when full); False: the queue is sparse
        (its batches stayed small), send this one yourself, now."""
        key = (msg.topic, queue_id)
        with self._cond:
            if self._closed:
                raise ShmqError("the producer was shut down")
            b = self._batches.get(key)
            if b is None:
                now = time.monotonic()
                if self._sparse.get(key, 0.0) > now:
                    return False
                b = self._batches[key] = _Batch(key, now + self.delay)
                self._start_flusher()
                self._cond.notify()
            b.msgs.append(msg)
            b.futures.append(future)
            if future is not None:
                future._condition, future._accumulator, future._batch = b.condition, self, b
            b.size += len(msg.body) + RECORD_OVERHEAD
            if b.size >= self.max_bytes or len(b.msgs) >= MAX_BATCH_MESSAGES:
                del self._batches[key]
                self._send(key, b)
            return True

    def send_now(self, b: _Batch) -> None:
        """Send batch ``b`` unless it has gone already (someone waits on one of its messages)."""
        with self._cond:
            if self._batches.get(b.key) is b:
                del self._batches[b.key]
                self._send(b.key, b)

    def flush_all(self) -> None:
        """Send every waiting batch now (before a sync send or a batch, so none overtakes them).

        Takes the lock even when nothing waits: the flusher thread may be writing a batch it took."""
        with self._cond:
            batches, self._batches = self._batches, {}
            for key, b in batches.items():
                self._send(key, b)

    def close(self) -> None:
        """Send what waits and stop the flusher thread."""
        self.flush_all()
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)

    def _send(self, key: tuple[str, int], b: _Batch) -> None:
        b.sent = True
        if len(b.msgs) >= MIN_BATCH:
            self._was_small.discard(key)
        try:
            self._flush(key[0], key[1], b.msgs, b.futures)
        except Exception as e:  # the flush reports to futures itself; this is the last resort
            log.exception("sending a batch of %d message(s) to %s/%d failed", len(b.msgs), *key)
            for f in b.futures:
                if f is not None and not f.done():
                    f.set_exception(e)
        b.msgs = b.futures = []  # the futures keep the batch: let the messages go

    def _start_flusher(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="shmq-produce-accumulator", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._batches:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                for key in [k for k, b in self._batches.items() if b.deadline <= now]:
                    b = self._batches.pop(key)
                    if len(b.msgs) < MIN_BATCH:
                        if key in self._was_small:
                            self._sparse[key] = now + SPARSE_S
                        self._was_small.add(key)
                    self._send(key, b)
                if self._batches:
                    self._cond.wait(max(0.0, min(b.deadline for b in self._batches.values()) - now))
