"""MessageHandler: a ``logging.Handler`` that publishes log records as messages to a topic.

What RocketMQ's log4j/logback appenders give Java programs. A record becomes one message:

- body: the formatted record (``self.format(record)``, so a ``Formatter`` set with
  ``setFormatter`` applies; the default is the message plus any traceback), UTF-8;
- tags: the level name (``INFO``, ``ERROR``, ...), so a consumer subscribes to
  ``"ERROR || CRITICAL"``;
- properties: ``logger``, ``level``, ``levelno``, ``time`` (the record's epoch milliseconds),
  ``pid``, ``process``, ``thread``, ``module``, ``func``, ``line``, ``path``, and ``exc_type``
  when the record carries an exception;
- no keys: the index would grow with every line, and logs are found by topic and time.

The logging call never waits on the broker: ``emit`` formats the record and appends it to a
bounded buffer (``buffer_size`` records); one background thread owns a ``Producer`` and sends
what the buffer holds in batches (ordered, each batch answered before the next). While no broker
answers (down at start, or gone later) records wait in the buffer and the thread tries again
every ``retry_interval`` s; once the buffer is full, new records are dropped and counted in
``dropped``, with a line on stderr at most once a minute. A batch that cannot be stored for a
reason a retry would not fix (a bad topic, a record too large) is counted in ``failed``.
Delivery is at least once: a batch whose answer timed out is sent again.

It never publishes its own traffic: records of the ``shmq`` logger hierarchy (the client's and
broker's own loggers) are ignored, and so is anything logged on the handler's sending thread.
``close()`` (called by ``logging.shutdown`` at exit) sends what it can within ``close_timeout``
and releases the producer.
"""

from __future__ import annotations

import collections
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

from shmq.client.producer.producer import Producer, split_batch
from shmq.codec import record as fmt
from shmq.errors import (
    BrokerBusyError,
    BrokerGoneError,
    BrokerNotFoundError,
    ControlTimeoutError,
    NameServerNotFoundError,
    SendTimeoutError,
    SharedMemoryFullError,
    ShmqError,
)
from shmq.model.message import Message
from shmq.namesrv.routes import namesrv_or_env

DEFAULT_GROUP = "_LOG_HANDLER_PRODUCER"
BUFFER_SIZE = 10_000  # records (logback's AsyncAppender holds 256 events; logs here outlive a broker restart)
MAX_BATCH = 256  # records per batch sent
RETRY_INTERVAL_S = 1.0
CLOSE_TIMEOUT_S = 5.0
WARN_INTERVAL_S = 60.0
IGNORED_LOGGER = "shmq"  # its hierarchy: the producer's own logging must never be published
# errors after which a retry may succeed: the records go back to the buffer
RETRIABLE = (
    BrokerGoneError,
    NameServerNotFoundError,
    BrokerNotFoundError,
    SendTimeoutError,
    BrokerBusyError,
    SharedMemoryFullError,
    ControlTimeoutError,
)

Entry = tuple[bytes, str, dict[str, str]]  # body, tags, properties


class MessageHandler(logging.Handler):
    """Publishes log records to ``topic`` on ``broker`` (else ``SHMQ_BROKER``, else ``default``)."""

    def __init__(
        self,
        topic: str,
        broker: str | None = None,
        level: int | str = logging.NOTSET,
        *,
        namesrv: str | None = None,
        group: str = DEFAULT_GROUP,
        buffer_size: int = BUFFER_SIZE,
        retry_interval: float = RETRY_INTERVAL_S,
        close_timeout: float = CLOSE_TIMEOUT_S,
        producer: Callable[[], Producer] | None = None,
    ) -> None:
        """``producer`` builds the (not started) producer the thread owns; by default
        ``Producer(group, broker, namesrv=namesrv, auto_batch=False)``: the handler sends its
        own batches (over every broker of the cluster with ``namesrv``)."""
        super().__init__(level)
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
        fmt.check_topic(topic)  # BadTopicError here, not in every batch later
        self.topic = topic
        self.broker = broker
        self.buffer_size = buffer_size
        self.retry_interval = retry_interval
        self.close_timeout = close_timeout
        self.dropped = 0  # records dropped because the buffer was full
        self.failed = 0  # records the broker would not store (not retried)
        self.sent = 0  # records stored
        self.last_error: BaseException | None = None  # why the last send or attach failed
        namesrv_or_env(namesrv, broker)  # both, or a bad name: ConfigError here, not on the thread
        self._make_producer = producer or (
            lambda: Producer(group, broker, namesrv=namesrv, auto_batch=False, start_timeout=0.5)
        )
        self._buffer: collections.deque[Entry] = collections.deque()
        self._in_hand = 0  # records taken from the buffer and not answered yet
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._drained = threading.Condition()
        self._warned_at = 0.0
        self._warned_dropped = 0
        self._thread = threading.Thread(target=self._run, name=f"shmq-log-{topic}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the logging thread

    def filter(self, record: logging.LogRecord) -> bool:
        """Never the handler's own traffic: the shmq hierarchy, or a record logged on its thread."""
        name = record.name
        if name == IGNORED_LOGGER or name.startswith(IGNORED_LOGGER + "."):
            return False
        if threading.current_thread() is self._thread:
            return False
        return bool(super().filter(record))

    def emit(self, record: logging.LogRecord) -> None:
        """Format and buffer: no I/O, no waiting (a full buffer drops the record and counts it)."""
        try:
            if len(self._buffer) >= self.buffer_size or self._stopping.is_set():
                self.dropped += 1
                return
            body = self.format(record).encode("utf-8", "backslashreplace")
            self._buffer.append((body, record.levelname, _properties(record)))
            if not self._wake.is_set():
                self._wake.set()
        except Exception:  # noqa: BLE001 - logging's contract: handleError reports it
            self.handleError(record)

    # ------------------------------------------------------------------ the sending thread

    def _run(self) -> None:
        p: Producer | None = None
        try:
            while True:
                if not self._buffer:
                    if self._stopping.is_set():
                        return
                    self._wake.wait(0.5)
                    self._wake.clear()
                    continue
                if p is None:
                    p = self._attach()
                    if p is None:
                        self._pause()
                        continue
                if not self._send_some(p):
                    self._pause()
                self._warn_dropped()  # a burst larger than the buffer
        finally:
            if p is not None:
                p.shutdown()
            with self._drained:
                self._drained.notify_all()

    def _attach(self) -> Producer | None:
        p = self._make_producer()
        try:
            return p.start()
        except RETRIABLE as e:
            self.last_error = e
            p.shutdown()
            return None

    def _send_some(self, p: Producer) -> bool:
        """Send up to MAX_BATCH records as one batch; False when the broker did not take them (they
        go back to the front of the buffer, in order)."""
        self._in_hand = min(len(self._buffer), MAX_BATCH)  # before taking: flush() never sees them nowhere
        taken = [self._buffer.popleft() for _ in range(self._in_hand)]
        try:
            msgs = [Message(self.topic, body, tags=tags, properties=props) for body, tags, props in taken]
            for batch in split_batch(msgs):
                p.send_batch(batch)
                self.sent += len(batch)
                del taken[: len(batch)]
            return True
        except RETRIABLE as e:
            self.last_error = e
            self._buffer.extendleft(reversed(taken))
            return False
        except ShmqError as e:
            self.last_error = e
            self.failed += len(taken)
            _stderr(f"shmq.MessageHandler: {len(taken)} log records not stored in {self.topic!r}: {e}")
            return True
        finally:
            self._in_hand = 0
            with self._drained:
                self._drained.notify_all()

    def _pause(self) -> None:
        """Wait before trying the broker again (saying why records are dropped, with the error that
        made this wait); at close there is no waiting for one."""
        self._warn_dropped()
        if self._stopping.wait(self.retry_interval):  # close() gives up on what the broker did not take
            n = len(self._buffer)
            self._buffer.clear()
            self.dropped += n
            self._warned_dropped += n
            _stderr(
                f"shmq.MessageHandler: {n} log records not sent within close_timeout={self.close_timeout} s"
                f"{self._why()}"
            )

    def _warn_dropped(self) -> None:
        now = time.monotonic()
        if self.dropped > self._warned_dropped and now - self._warned_at >= WARN_INTERVAL_S:
            _stderr(
                f"shmq.MessageHandler: {self.dropped - self._warned_dropped} log records dropped "
                f"(buffer of {self.buffer_size} full; {self.dropped} in all){self._why()}"
            )
            self._warned_at = now
            self._warned_dropped = self.dropped

    def _why(self) -> str:
        return f"; last error: {self.last_error}" if self.last_error is not None else ""

    # ------------------------------------------------------------------ lifecycle

    def flush(self, timeout: float | None = None) -> bool:  # type: ignore[override]
        """Wait until every buffered record was sent (``close_timeout`` by default); False if some
        still wait (the broker is down)."""
        deadline = time.monotonic() + (self.close_timeout if timeout is None else timeout)
        with self._drained:
            while self._buffer or self._in_hand:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._wake.set()
                self._drained.wait(min(left, 0.05))
        return True

    def close(self) -> None:
        """Send what can be sent within ``close_timeout``, then stop the thread and its producer."""
        if self._thread.is_alive():
            self.flush()
            self._stopping.set()
            self._wake.set()
            self._thread.join(self.close_timeout + 1.0)
        self._warned_at = 0.0
        self._warn_dropped()
        super().close()


def _properties(record: logging.LogRecord) -> dict[str, str]:
    props = {
        "logger": record.name,
        "level": record.levelname,
        "levelno": str(record.levelno),
        "time": str(int(record.created * 1000)),
        "pid": str(record.process or os.getpid()),
        "process": str(record.processName),
        "thread": str(record.threadName),
        "module": record.module,
        "func": str(record.funcName),
        "line": str(record.lineno),
        "path": record.pathname,
    }
    if record.exc_info and record.exc_info[0] is not None:
        props["exc_type"] = record.exc_info[0].__name__
    return props


def _stderr(line: str) -> None:
    """Straight to stderr: through logging it could reach this handler again."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
