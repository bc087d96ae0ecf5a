"""AsyncTraceDispatcher: trace events from the hooks to the trace topic, off the user's threads.

A hook appends an event (a context and the function that turns it into records) to a bounded
buffer and returns: an append is a deque append, no lock, no encoding, no I/O. When the
buffer holds ``buffer_size`` events the event is dropped and counted (``dropped`` counts its
records), and a warning is logged at most every ``LOG_INTERVAL_S``: tracing never blocks or
slows a send or a consume beyond that append. One background thread wakes every
``flush_interval`` s (or when half the buffer is used), turns the events into records, packs
up to ``max_records`` records (and at most ``max_body_bytes``) into one trace message keyed
by their message ids, and sends the trace messages of a wake-up as one batch with its own
internal producer (RocketMQ's ``_INNER_TRACE_PRODUCER-<group>``). Few, big wake-ups matter
in Python: every hand-over of the GIL between the user's thread and this one costs the
user's thread time. A trace message that cannot be stored is logged and its records counted
in ``failed``; the user's traffic is never affected.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, Protocol

from shmq.codec import record as fmt
from shmq.model.message import Message
from shmq.model.system_topics import TRACE_TOPIC
from shmq.trace.record import Line

log = logging.getLogger(__name__)

BUFFER_SIZE = 2048  # events (RocketMQ's traceContextQueue holds 2048)
MAX_RECORDS = 100  # per trace message (RocketMQ packs up to 100 trace contexts per batch)
MAX_BODY_BYTES = 128 * 1024  # RocketMQ's maxMsgSize of a trace message
MAX_BATCH_BYTES = 1024 * 1024  # trace messages sent together in one batch (a drain sends one or a few)
FLUSH_INTERVAL_S = 0.05
LOG_INTERVAL_S = 10.0
INNER_PRODUCER_PREFIX = "_INNER_TRACE_PRODUCER-"  # + the client's group: the internal producer's group
TRACE_RING_BYTES = 4 * 1024 * 1024  # the internal producer's ring: trace messages are <= MAX_BODY_BYTES

Builder = Callable[..., list[Line]]


def trace_topic(option: bool | str | None) -> str | None:
    """The topic a client's ``trace`` option names: True the system trace topic, a str that topic."""
    if option is None or option is False:
        return None
    if option is True:
        return TRACE_TOPIC
    fmt.check_topic(option)  # BadTopicError for a bad name, at the client's construction
    return option


class TraceProducer(Protocol):
    """What the dispatcher needs of its internal producer (a ``shmq.Producer`` or a cluster's):
    a protocol, because trace sits below the clients that start it."""

    group: str

    def start(self) -> object: ...

    def shutdown(self) -> None: ...

    def send_batch_async(self, msgs: Sequence[Message]) -> Future[Any]: ...


class AsyncTraceDispatcher:
    """Trace records to ``topic``, sent by ``producer`` (the client's internal one, not started
    yet, with no hooks: its own sends are not traced; compression off keeps bodies plain JSON)."""

    def __init__(
        self,
        producer: TraceProducer,
        topic: str = TRACE_TOPIC,
        *,
        buffer_size: int = BUFFER_SIZE,
        max_records: int = MAX_RECORDS,
        max_body_bytes: int = MAX_BODY_BYTES,
        flush_interval: float = FLUSH_INTERVAL_S,
    ) -> None:
        self.topic = topic
        self.buffer_size = buffer_size
        self.max_records = max_records
        self.max_body_bytes = max_body_bytes
        self.flush_interval = flush_interval
        self.producer = producer
        self.dropped = 0  # records dropped because the buffer was full
        self.sent = 0  # records stored
        self.failed = 0  # records whose trace message could not be stored
        self._events: collections.deque[tuple[Builder, tuple[Any, ...], int]] = collections.deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()  # one drain at a time (the thread, or flush)
        self._inflight: set[Future[Any]] = set()
        self._stopping = False
        self._dropped_logged_at = 0.0
        self._thread: threading.Thread | None = None

    def start(self) -> AsyncTraceDispatcher:
        self.producer.start()
        self._thread = threading.Thread(target=self._run, name=f"shmq-trace-{self.producer.group}", daemon=True)
        self._thread.start()
        return self

    def append(self, build: Builder, args: tuple[Any, ...], records: int) -> bool:
        """Queue an event (``build(*args)`` makes its ``records`` records later); False if dropped."""
        events = self._events
        if len(events) >= self.buffer_size or self._stopping:
            self.dropped += records
            now = time.monotonic()
            if now - self._dropped_logged_at >= LOG_INTERVAL_S:
                self._dropped_logged_at = now
                log.warning(
                    "trace buffer of %r full (%d events): %d trace records dropped so far",
                    self.producer.group,
                    self.buffer_size,
                    self.dropped,
                )
            return False
        events.append((build, args, records))
        if len(events) == self.buffer_size // 2:  # wake early only when the buffer fills: fewer, bigger drains
            self._wake.set()
        return True

    @property
    def pending(self) -> int:
        """Events not yet turned into trace messages."""
        return len(self._events)

    def flush(self, timeout: float = 5.0) -> bool:
        """Send every queued event and wait for the answers; whether all came within ``timeout``."""
        with self._lock:
            self._drain()
        deadline = time.monotonic() + timeout
        while self._inflight and time.monotonic() < deadline:
            time.sleep(0.002)
        return not self._inflight

    def shutdown(self, timeout: float = 5.0) -> None:
        """Send what is queued, then stop the thread and the internal producer."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.flush(timeout)
        self.producer.shutdown()

    # ------------------------------------------------------------------ the sender thread

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            try:
                with self._lock:
                    self._drain()
            except Exception:
                log.exception("trace dispatcher of %r failed; going on", self.producer.group)

    def _drain(self) -> None:
        """Turn the queued events into trace messages and send them, one batch per
        ``MAX_BATCH_BYTES`` (without waiting for the answers)."""
        events = self._events
        records: list[Line] = []
        while events:
            build, args, _ = events.popleft()
            try:
                records.extend(build(*args))
            except Exception:
                log.exception("building trace records failed; event skipped")
        batch: list[Message] = []
        counts: list[int] = []
        size = 0
        for msg, n in self._messages(records):
            if batch and size + len(msg.body) > MAX_BATCH_BYTES:
                self._send(batch, counts)
                batch, counts, size = [], [], 0
            batch.append(msg)
            counts.append(n)
            size += len(msg.body)
        if batch:
            self._send(batch, counts)

    def _messages(self, records: list[Line]) -> Iterator[tuple[Message, int]]:
        """Trace messages of at most ``max_records`` records and ``max_body_bytes`` (or one record),
        each keyed by the message ids of its records; with the count of records in each."""
        start = 0
        while start < len(records):
            end, size = start + 1, len(records[start][1])
            while end < len(records) and end - start < self.max_records:
                size += len(records[end][1])
                if size > self.max_body_bytes:
                    break
                end += 1
            chunk = records[start:end]
            ids = " ".join(dict.fromkeys(msg_id for msg_id, _ in chunk if msg_id))
            yield Message(self.topic, "".join(line for _, line in chunk).encode(), keys=ids or None), len(chunk)
            start = end

    def _send(self, batch: list[Message], counts: list[int]) -> None:
        try:
            fut = self.producer.send_batch_async(batch)
        except Exception as e:  # noqa: BLE001 - a bad record (an id too long for the KEYS property): this batch only
            self.failed += sum(counts)
            log.warning("trace messages of %d records to %s not sent: %s", sum(counts), self.topic, e)
            return
        self._inflight.add(fut)
        fut.add_done_callback(functools.partial(self._done, n=sum(counts)))

    def _done(self, fut: Future[Any], n: int) -> None:
        self._inflight.discard(fut)
        error = None if fut.cancelled() else fut.exception()
        if error is None and not fut.cancelled():
            self.sent += n
            return
        self.failed += n
        log.warning("a trace message of %d records to %s was not stored: %s", n, self.topic, error or "cancelled")
