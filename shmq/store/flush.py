"""Flush services: when what was appended to the page cache reaches the disk.

ASYNC_FLUSH: a thread flushes the commitlog every flushIntervalCommitLog ms once at least
flushCommitLogLeastPages pages are dirty (and everything at least every
flushCommitLogThoroughInterval). SYNC_FLUSH: group commit: an append asks for its end offset
to be flushed; one flush covers every request waiting, then they are all answered. Flushing
is an msync of the range written since the last flush, or under SYNC_FLUSH (whose commitlog
is written with pwrite) an fdatasync of the segment (``MappedFile.flush`` says why it is as
durable); both release the GIL while the disk works.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

log = logging.getLogger(__name__)


class ServiceThread(abc.ABC):
    """A named daemon thread that runs `_run_once` every `interval` seconds until stopped."""

    name = "service"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._wakeup = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wakeup(self) -> None:
        self._wakeup.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wakeup.wait(self.interval)
            self._wakeup.clear()
            try:
                self._run_once()
            except Exception:  # a failed round must not end the service; the next round retries
                log.exception("%s failed", self.name)
        self._on_stop()

    @abc.abstractmethod
    def _run_once(self) -> None:
        """One round of the service's work."""

    def _on_stop(self) -> None:  # noqa: B027 - a hook: a service with nothing left to do keeps it empty
        """Last round after stop was asked (flush what is left)."""

    def shutdown(self) -> None:
        self._stop.set()
        self._wakeup.set()
        if self._thread.is_alive():
            self._thread.join()


class LeastPagesRule:
    """Flush only with at least `least_pages` dirty pages, but everything every `thorough_ms`."""

    def __init__(self, least_pages: int, thorough_ms: int) -> None:
        self.least_pages = least_pages
        self.thorough = thorough_ms / 1000
        self.last_thorough = time.monotonic()

    def next_round(self) -> int:
        """The least-pages value for this round: 0 when a thorough flush is due."""
        now = time.monotonic()
        if now - self.last_thorough >= self.thorough:
            self.last_thorough = now
            return 0
        return self.least_pages


class FlushRealTimeService(ServiceThread):
    """ASYNC_FLUSH of the commitlog."""

    name = "FlushRealTimeService"

    def __init__(
        self,
        flush: Callable[[int], tuple[int, int]],
        on_flushed: Callable[[int, int], None],
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
    ) -> None:
        super().__init__(interval_ms / 1000)
        self._flush = flush
        self._on_flushed = on_flushed
        self._rule = LeastPagesRule(least_pages, thorough_interval_ms)

    def _run_once(self) -> None:
        offset, ts = self._flush(self._rule.next_round())
        if offset >= 0:
            self._on_flushed(offset, ts)

    def _on_stop(self) -> None:
        offset, ts = self._flush(0)
        self._on_flushed(offset, ts)


class GroupCommitService(ServiceThread):
    """SYNC_FLUSH: requests wait for one flush that covers them all."""

    name = "GroupCommitService"

    def __init__(self, flush: Callable[[int], tuple[int, int]], on_flushed: Callable[[int, int], None]) -> None:
        super().__init__(0.01)
        self._flush = flush
        self._on_flushed = on_flushed
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()  # one flush at a time: the thread's or flush_now's
        self._requests: list[tuple[int, Future[bool]]] = []
        self.flushed_offset = 0

    def request(self, end_offset: int) -> Future[bool]:
        """A future that completes (with True) once `end_offset` is on disk."""
        fut: Future[bool] = Future()
        with self._lock:
            if end_offset <= self.flushed_offset:
                fut.set_result(True)
                return fut
            self._requests.append((end_offset, fut))
        self.wakeup()
        return fut

    def flush_now(self, end_offset: int) -> bool:
        """Flush in the caller's thread; True once `end_offset` is on disk.

        For a single-threaded caller that collects every waiting request before it flushes
        (the broker loop): that is already a group, and handing it to this thread and back
        cost two thread wake-ups per group, several times the fdatasync itself.
        """
        self._flush_covering(end_offset)
        return end_offset <= self.flushed_offset

    def _flush_covering(self, end_offset: int) -> int:
        with self._flush_lock:
            if end_offset > self.flushed_offset:
                offset, ts = self._flush(0)
                self._on_flushed(offset, ts)
                with self._lock:
                    self.flushed_offset = max(self.flushed_offset, offset)
            return self.flushed_offset

    def _run_once(self) -> None:
        with self._lock:
            if not self._requests:
                return
            batch, self._requests = self._requests, []
        offset = self._flush_covering(max(end for end, _ in batch))
        with self._lock:
            late = [(end, f) for end, f in batch if end > self.flushed_offset]
            self._requests = late + self._requests
        for end, fut in batch:
            if end <= offset:
                fut.set_result(True)
        if late:
            self.wakeup()

    def _on_stop(self) -> None:
        offset, ts = self._flush(0)
        self._on_flushed(offset, ts)
        with self._lock:
            batch, self._requests = self._requests, []
        for end, fut in batch:
            fut.set_result(end <= offset)


class FlushConsumeQueueService(ServiceThread):
    """Flush consume queues and index files; a thorough round (every least-pages rule off) also
    advances the checkpoint, as RocketMQ's FlushConsumeQueueService does."""

    name = "FlushConsumeQueueService"

    def __init__(
        self, flush_logics: Callable[[int], None], interval_ms: int, least_pages: int, thorough_interval_ms: int
    ) -> None:
        super().__init__(interval_ms / 1000)
        self._flush_logics = flush_logics
        self._rule = LeastPagesRule(least_pages, thorough_interval_ms)

    def _run_once(self) -> None:
        self._flush_logics(self._rule.next_round())

    def _on_stop(self) -> None:
        self._flush_logics(0)
