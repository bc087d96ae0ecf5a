"""ProduceAccumulator: send_async and send_oneway messages gathered into batches (RocketMQ 5's autoBatch).

Encoding and writing one message at a time costs a Python producer ~20 us; as a batch the
same message costs ~1-2 us. Messages are grouped by (topic, queue), in call order, and a
group is handed to ``flush`` when it reaches ``batch_max_bytes`` or ``batch_max_delay_ms``
after its first message (a flusher thread sees to the delay). A queue whose batch was still
small at its deadline (many topics, each sent rarely) is not held back for the next
``SPARSE_S``: waiting would only add latency. Flushes run under the accumulator's lock, so
the batches of one queue reach the ring in the order they were filled.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

from shmq.errors import ShmqError
from shmq.message import Message

log = logging.getLogger(__name__)

MAX_BATCH_MESSAGES = 4096
MIN_BATCH = 8  # a batch's fixed cost is about that of 8 single sends: fewer go one by one
SPARSE_S = 1.0  # a queue whose last batch was small goes unbatched this long (probing sooner cost 2x, measured)
RECORD_OVERHEAD = 160  # header, topic and properties of a typical record: how a batch's size is estimated

Flush = Callable[[str, int, list[Message], list["Future | None"]], None]


@dataclass(eq=False)
class _Batch:
    deadline: float
    msgs: list[Message] = field(default_factory=list)
    futures: list[Future | None] = field(default_factory=list)
    size: int = 0


class ProduceAccumulator:
    """Per-(topic, queue) batches; ``flush(topic, queue_id, msgs, futures)`` sends one (queue -1: the broker picks)."""

    def __init__(self, flush: Flush, batch_max_delay_ms: float, batch_max_bytes: int) -> None:
        self._flush = flush
        self.delay = batch_max_delay_ms / 1000
        self.max_bytes = batch_max_bytes
        self._cond = threading.Condition()
        self._batches: dict[tuple[str, int], _Batch] = {}
        self._sparse: dict[tuple[str, int], float] = {}  # key -> until when its messages go at once
        self._closed = False
        self._thread: threading.Thread | None = None

    def add(self, msg: Message, queue_id: int, future: Future | None) -> bool:
        """Queue a checked message (flushing its batch when full); False: the queue is sparse
        (its last batch was small), send this one yourself, now."""
        key = (msg.topic, queue_id)
        with self._cond:
            if self._closed:
                raise ShmqError("the producer was shut down")
            b = self._batches.get(key)
            if b is None:
                now = time.monotonic()
                if self._sparse.get(key, 0.0) > now:
                    return False
                b = self._batches[key] = _Batch(now + self.delay)
                self._start_flusher()
                self._cond.notify()
            b.msgs.append(msg)
            b.futures.append(future)
            b.size += len(msg.body) + RECORD_OVERHEAD
            if b.size >= self.max_bytes or len(b.msgs) >= MAX_BATCH_MESSAGES:
                del self._batches[key]
                self._send(key, b)
            return True

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
        try:
            self._flush(key[0], key[1], b.msgs, b.futures)
        except Exception as e:  # the flush reports to futures itself; this is the last resort
            log.exception("sending a batch of %d message(s) to %s/%d failed", len(b.msgs), *key)
            for f in b.futures:
                if f is not None and not f.done():
                    f.set_exception(e)

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
                        self._sparse[key] = now + SPARSE_S
                    self._send(key, b)
                if self._batches:
                    self._cond.wait(max(0.0, min(b.deadline for b in self._batches.values()) - now))
