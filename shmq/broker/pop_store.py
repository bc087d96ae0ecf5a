"""The pop log on disk (``<store>/pop/pop.log``, owner-only): what the broker handed out, acked
and revived, written before each answer so that after a SIGKILL nothing acked comes back and
nothing in flight is lost (layout: ``shmq.codec.pop_log``).

Records are appended with ``os.write`` (a killed process loses no page cache) and fsynced as the
store flushes: once per pass under SYNC_FLUSH (``sync``), every flush interval under ASYNC_FLUSH
(``tick``). At open the log is read into a ``PopState``; a record that is not whole and sound
ends it (a torn tail: the file is cut there, with a log line saying what was dropped), then the
live state is written to a new file renamed over the old one (compaction), which is also done
whenever the log grew by its compaction size (``popLogCompactBytes``) since the last one.
"""

from __future__ import annotations

import errno
import logging
import os
import time

import numpy as np

from shmq.broker.pop_state import PopState, QueueKey, Row
from shmq.codec import pop_log as L
from shmq.errors import MetadataError
from shmq.store.write_retry import WriteRetry

log = logging.getLogger("shmq.broker")

POP_DIR = "pop"
LOG_NAME = "pop.log"


def row_array(items: list[tuple[int, Row]]) -> np.ndarray:
    """The ROW records of (queue offset, row) pairs."""
    fifo = L.ROW_FIFO
    return np.array(
        [
            (o, r.token, r.deadline_ms, r.phys, r.client, r.size, r.attempt, r.max_attempts, fifo if r.fifo else 0)
            for o, r in items
        ],
        L.ROW,
    ).reshape(len(items))


def _rows(arr: np.ndarray) -> list[tuple[int, Row]]:
    return [
        (
            int(a["queue_offset"]),
            Row(
                int(a["token"]),
                int(a["deadline_ms"]),
                int(a["attempt"]),
                int(a["max_attempts"]),
                int(a["client"]),
                int(a["commitlog_offset"]),
                int(a["size"]),
                bool(a["flags"] & L.ROW_FIFO),
            ),
        )
        for a in arr
    ]


def apply(state: PopState, rec: L.PopLogRecord) -> None:
    """One log record into ``state`` (recovery)."""
    if rec.kind == L.TOKEN:
        state.next_token = max(state.next_token, rec.value)
        return
    key: QueueKey = (rec.group, rec.topic, rec.queue_id)
    if rec.kind == L.CHECKPOINT:
        state.restore(key, rec.value, _rows(rec.rows))
    else:
        for offset in rec.rows["queue_offset"].tolist():
            state.settle(key, offset)


def snapshot(state: PopState) -> bytes:
    """The live state as log records: the token counter, then each queue's cursor and rows."""
    out = [L.encode(L.TOKEN, "", "", 0, state.next_token)]
    for (group, topic, qid), qs in state.queues.items():
        items = list(qs.rows.items())
        out += [
            L.encode(L.CHECKPOINT, group, topic, qid, qs.cursor, row_array(items[i : i + L.MAX_ROWS]))
            for i in range(0, max(len(items), 1), L.MAX_ROWS)
        ]
    return b"".join(out)


class PopStore:
    """The pop log file; ``state`` is what it holds (recovered at open)."""

    def __init__(self, store_dir: str, sync_flush: bool, flush_interval_ms: int, compact_bytes: int) -> None:
        self.dir = os.path.join(store_dir, POP_DIR)
        self.path = os.path.join(self.dir, LOG_NAME)
        self.sync_flush = sync_flush
        self.flush_interval_ms = flush_interval_ms
        self.compact_bytes = compact_bytes
        self.dirty = False  # written since the last fsync
        self.size = 0
        self.compacted = 0  # the file's size after the last compaction (the live state)
        self._last_sync_ms = 0
        self._write = WriteRetry(log, "writing the pop log")
        self.compact_after_failure = False  # a failed write could not be cut back: rewrite the file
        self.fd = -1
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            os.chmod(self.dir, 0o700)
            self.state, end = self._recover()
            try:
                self.compact()
            except OSError as e:  # a full disk must not keep a broker with a sound log from starting
                if e.errno not in (errno.ENOSPC, errno.EDQUOT) or end < len(L.MAGIC):
                    raise
                self._append_as_is(end, e)
        except OSError as e:
            raise MetadataError(
                f"the pop log {self.path} cannot be read or written ({e.strerror}); the broker will not "
                f"start without its POP state. Make {self.dir} writable by the broker's user, or free space"
            ) from None

    def _recover(self) -> tuple[PopState, int]:
        """The state the log holds, and where its sound records end (0: no log yet)."""
        state = PopState()
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return state, 0
        d = L.decode(data)
        for rec in d.records:
            apply(state, rec)
        if d.problem is not None:
            aside = self.path + ".damaged"
            _write_file(aside, data)
            log.warning(
                "pop log %s: %s; kept the %d records before it and dropped the last %d bytes (the file as "
                "found is kept as %s); messages handed out or acked in them may be delivered again",
                self.path,
                d.problem,
                len(d.records),
                len(data) - d.end,
                aside,
            )
        return state, d.end

    def _append_as_is(self, end: int, e: OSError) -> None:
        """No room to compact at start: append to the log as found, cut after its last sound
        record (cutting needs no space), and compact on a tick once writes work again."""
        try:
            os.unlink(self.path + ".tmp")
        except FileNotFoundError:
            pass
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        os.ftruncate(self.fd, end)
        self.size = self.compacted = end
        self.compact_after_failure = True
        log.warning("pop log %s: no room to compact it at start (%s); appending to it as found", self.path, e.strerror)

    def compact(self) -> None:
        """Write the live state to a new file and rename it over the log (the old file stays
        whole until the rename: a crash in between leaves one or the other)."""
        tmp = self.path + ".tmp"
        data = L.MAGIC + snapshot(self.state)
        _write_file(tmp, data)
        os.rename(tmp, self.path)
        dfd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        if self.fd >= 0:
            os.close(self.fd)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self.size = self.compacted = len(data)
        self.dirty = False

    def append(self, data: bytes) -> None:
        """Records written to the file (in the page cache: they survive the broker's death).
        OSError (a full disk): the file is cut back to where it was, so a record written in part
        never hides the ones written after it; the failure is logged once until writes work."""
        if not data:
            return
        try:
            _write_all(self.fd, data)
        except OSError as e:
            self._write.failed(e, time.monotonic())
            try:
                os.ftruncate(self.fd, self.size)
            except OSError:
                self.compact_after_failure = True
            raise
        self._write.succeeded()
        self.size += len(data)
        self.dirty = True

    def sync(self) -> None:
        """fsync what was written (SYNC_FLUSH: once per pass, before the answers go out)."""
        if self.dirty:
            os.fsync(self.fd)
            self.dirty = False

    def tick(self, now_ms: int) -> None:
        """ASYNC_FLUSH: fsync every flush interval; compact once the log outgrew its size."""
        if self.dirty and now_ms - self._last_sync_ms >= self.flush_interval_ms:
            self.sync()
            self._last_sync_ms = now_ms
        if self.size > self.compacted + self.compact_bytes or self.compact_after_failure:
            self.compact()
            self.compact_after_failure = False

    def close(self) -> None:
        if self.fd >= 0:
            self.sync()
            os.close(self.fd)
            self.fd = -1


def _write_file(path: str, data: bytes) -> None:
    """A whole owner-only file, fsynced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
