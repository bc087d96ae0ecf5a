"""ConsumeQueue: per topic/queue, 20-byte entries pointing into the commitlog.

Entry i of the queue is the message with queue offset i; entries are read and written as
numpy structured arrays straight over the mapped files, so a range read, a tag filter and a
time search are array operations.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Iterable

import numpy as np

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.store.mapped_file import MappedFile, MappedFileQueue
from shmq.store.queue_slots import MAX_OFFSET, MAX_PHYS_END, WIDTH, QueueSlots

log = logging.getLogger(__name__)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
# Entry written in front of the first real one when a queue starts past offset 0 (RocketMQ's
# fillPreBlank); readers skip it.
BLANK_SIZE = 0x7FFFFFFF


MAX_QUEUE_ID = 65535  # the consume-queue layout's queue ids: 0..65535


def queue_id_of(name: str) -> int | None:
    """The queue id a decimal name stands for (a consume-queue folder, a key of the offset and
    queue tables), or None if it is not one: ASCII digits, 0..MAX_QUEUE_ID."""
    if not (name.isascii() and name.isdigit()) or len(name) > 5:
        return None
    q = int(name)
    return q if q <= MAX_QUEUE_ID else None


class ConsumeQueue:
    """One topic/queue's index of commitlog positions, in queue-offset order."""

    def __init__(self, store_dir: str, topic: str, queue_id: int, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = os.path.join(store_dir, "consumequeue", topic, str(queue_id))
        self.queue = MappedFileQueue(self.directory, file_size)
        self.entries_per_file = file_size // fmt.CQ_ENTRY_SIZE
        self._views: dict[int, np.ndarray] = {}
        # (table, slot): max_offset and max_phys_end live in a QueueSlots row (one reference,
        # replaced whole, so a reader never pairs one table with another's slot)
        self._row: tuple[QueueSlots, int] = (QueueSlots(1), 0)
        self._row[0].add(self)
        self.min_offset = 0  # first queue offset still readable
        self.max_offset = 0  # next queue offset to write
        self.max_phys_end = -1  # end of the last dispatched record in the commitlog

    @property
    def max_offset(self) -> int:
        """The next queue offset to write."""
        t, i = self._row
        return t.words[i * WIDTH + MAX_OFFSET]

    @max_offset.setter
    def max_offset(self, value: int) -> None:
        t, i = self._row
        t.words[i * WIDTH + MAX_OFFSET] = value

    @property
    def max_phys_end(self) -> int:
        """The end of the last dispatched record in the commitlog (-1: none)."""
        t, i = self._row
        return t.words[i * WIDTH + MAX_PHYS_END]

    @max_phys_end.setter
    def max_phys_end(self, value: int) -> None:
        t, i = self._row
        t.words[i * WIDTH + MAX_PHYS_END] = value

    def move_to(self, table: QueueSlots, slot: int) -> None:
        """Keep the numbers in ``table``'s row ``slot`` from now on (QueueSlots.adopt copied them)."""
        self._row = (table, slot)

    def _detach(self) -> None:
        """Before the files change: the table's cached last file is dropped (attached again by the put)."""
        t, i = self._row
        t.detach(i)

    # ------------------------------------------------------------------ files

    def _entries(self, mf: MappedFile) -> np.ndarray:
        v = self._views.get(mf.file_from_offset)
        if v is None:
            v = np.frombuffer(mf.mm, dtype=fmt.CQ_DTYPE)
            self._views[mf.file_from_offset] = v
        return v

    def load(self) -> bool:
        """Open the queue's files. False when they cannot be a queue (a file of the wrong size,
        not the empty last one a crash leaves; or a file missing between two others): they are
        removed and the caller rebuilds the queue from the commitlog, which holds all it said."""
        names = (
            sorted(n for n in os.listdir(self.directory) if fmt.parse_offset_file_name(n) is not None)
            if os.path.isdir(self.directory)
            else []
        )
        sizes = [os.path.getsize(os.path.join(self.directory, n)) for n in names]
        if sizes and sizes[-1] == 0:
            sizes.pop()
        problem = next(
            (
                f"{names[i]} is {n} bytes, not {self.queue.file_size}"
                for i, n in enumerate(sizes)
                if n != self.queue.file_size
            ),
            None,
        )
        if problem is None:
            try:
                self.queue.load()
                return True
            except ValueError as e:  # a segment missing between two others
                problem = str(e)
                self.queue.close()
        log.error(
            "consume queue %s/%d is damaged (%s); its files are removed and it is rebuilt from the commitlog",
            self.topic,
            self.queue_id,
            problem,
        )
        for n in names:
            os.unlink(os.path.join(self.directory, n))
        return False

    def reset(self) -> None:
        """Empty the queue (files removed) so that it can be rebuilt from the commitlog."""
        self.destroy()
        self.min_offset = self.max_offset = 0
        self.max_phys_end = -1

    def skip_to(self, queue_offset: int) -> None:
        """Continue the queue at ``queue_offset`` (blank entries before it): what a queue whose
        messages the commitlog no longer holds had reached, so new messages never reuse offsets
        that consumers already committed past."""
        if queue_offset > self.max_offset:
            self._fill_blanks(queue_offset)

    def recover(self) -> None:
        """Find the end of valid entries (the first zero-size entry) from the last three files."""
        files = self.queue.files
        if not files:
            return
        end = files[0].file_from_offset
        for mf in files[max(0, len(files) - 3) :]:
            # up to the file's first hole: entries are written from its start, and reading a
            # hole of a full tmpfs through the mapping is a SIGBUS
            sizes = self._entries(mf)["size"][: mf.data_end() // fmt.CQ_ENTRY_SIZE]
            zero = np.flatnonzero(sizes == 0)
            n = int(zero[0]) if len(zero) else len(sizes)
            end = mf.file_from_offset + n * fmt.CQ_ENTRY_SIZE
            if n < self.entries_per_file:
                break
        self._set_end(end)
        self._find_min_offset()

    def blank_entries_within(self, phys_lo: int, phys_hi: int) -> int:
        """Make the entries pointing into commitlog bytes [phys_lo, phys_hi) blanks (a damaged
        range recovery skipped): their queue offsets stay taken, readers step over them.
        Returns how many changed; the files are flushed."""
        changed = 0
        for mf in self.queue.files:
            written = min(self.max_offset * fmt.CQ_ENTRY_SIZE - mf.file_from_offset, mf.wrote_position)
            entries = self._entries(mf)[: max(0, written) // fmt.CQ_ENTRY_SIZE]
            hit = np.flatnonzero(
                (entries["size"] != BLANK_SIZE) & (entries["offset"] >= phys_lo) & (entries["offset"] < phys_hi)
            )
            if len(hit):
                entries["size"][hit] = BLANK_SIZE  # first: a crash in between leaves a blank
                entries["offset"][hit] = 0
                entries["tags_code"][hit] = 0
                mf.mm.flush()
                changed += len(hit)
        if changed:
            self._find_min_offset()
        return changed

    def _set_end(self, end_bytes: int) -> None:
        self._detach()
        self._drop_views_after(end_bytes)
        self.queue.truncate(end_bytes)
        self.max_offset = end_bytes // fmt.CQ_ENTRY_SIZE
        self.max_phys_end = -1
        if self.max_offset > self.min_offset:
            last = self.entry(self.max_offset - 1)
            if last is not None and last["size"] != BLANK_SIZE:
                self.max_phys_end = int(last["offset"]) + int(last["size"])

    def _drop_views_after(self, end_bytes: int) -> None:
        for start in [s for s in self._views if s >= end_bytes and s > 0]:
            del self._views[start]

    def _find_min_offset(self) -> None:
        files = self.queue.files
        self.min_offset = files[0].file_from_offset // fmt.CQ_ENTRY_SIZE if files else self.max_offset
        if files:
            written = (self.max_offset * fmt.CQ_ENTRY_SIZE - files[0].file_from_offset) // fmt.CQ_ENTRY_SIZE
            sizes = self._entries(files[0])["size"][: max(0, written)]  # never into holes (see recover)
            real = np.flatnonzero(sizes != BLANK_SIZE)
            if len(real):
                self.min_offset = files[0].file_from_offset // fmt.CQ_ENTRY_SIZE + int(real[0])
        self.min_offset = min(self.min_offset, self.max_offset)

    # ------------------------------------------------------------------ writing

    def reserve(self, count: int) -> None:
        """Give the next ``count`` entries disk blocks before any is written (DiskFullError if the
        disk has none): a put on a full disk then fails whole, never between its commitlog
        write and its entries. One comparison when the last file has them already."""
        end = (self.max_offset + count) * fmt.CQ_ENTRY_SIZE
        files = self.queue.files
        if files:
            mf = files[-1]
            if end <= mf.file_to_offset and end - mf.file_from_offset <= mf.reserved_position:
                return
        self.queue.reserve(count * fmt.CQ_ENTRY_SIZE, self.max_offset * fmt.CQ_ENTRY_SIZE)

    def put_batch(self, phys: np.ndarray, sizes: np.ndarray, tags_codes: np.ndarray, first_queue_offset: int) -> int:
        """Write entries for queue offsets first_queue_offset...; entries already present are skipped.

        Skipping makes dispatch idempotent, so recovery can re-dispatch a range safely.
        Returns the number of entries written.
        """
        skip = self.max_offset - first_queue_offset
        if skip >= len(phys):
            return 0
        if skip > 0:
            phys, sizes, tags_codes = phys[skip:], sizes[skip:], tags_codes[skip:]
            first_queue_offset = self.max_offset
        if first_queue_offset > self.max_offset:
            self._fill_blanks(first_queue_offset)
        n = len(phys)
        done = 0
        while done < n:
            qoff = first_queue_offset + done
            mf = self.queue.last_file(qoff * fmt.CQ_ENTRY_SIZE)
            entries = self._entries(mf)
            i = (qoff * fmt.CQ_ENTRY_SIZE - mf.file_from_offset) // fmt.CQ_ENTRY_SIZE
            k = min(n - done, len(entries) - i)
            if (i + k) * fmt.CQ_ENTRY_SIZE > mf.reserved_position:  # a guard against SIGBUS on a full disk
                mf.reserve((i + k) * fmt.CQ_ENTRY_SIZE)
            part = entries[i : i + k]
            part["offset"] = phys[done : done + k]
            part["tags_code"] = tags_codes[done : done + k]
            part["size"] = sizes[done : done + k]  # last: recovery takes a non-zero size as a whole entry
            mf.wrote_position = (i + k) * fmt.CQ_ENTRY_SIZE
            done += k
        self.max_offset = first_queue_offset + n
        self.max_phys_end = int(phys[-1]) + int(sizes[-1])
        return n

    def put(self, phys: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """Scalar form of put_batch for single-message appends."""
        if queue_offset < self.max_offset:
            return False
        if queue_offset > self.max_offset:
            self._fill_blanks(queue_offset)
        mf = self.queue.last_file(queue_offset * fmt.CQ_ENTRY_SIZE)
        pos = queue_offset * fmt.CQ_ENTRY_SIZE - mf.file_from_offset
        if pos + fmt.CQ_ENTRY_SIZE > mf.reserved_position:  # a guard against SIGBUS on a full disk
            mf.reserve(pos + fmt.CQ_ENTRY_SIZE)
        view = mf.view
        _I64.pack_into(view, pos, phys)
        _I64.pack_into(view, pos + 12, tags_code)
        _I32.pack_into(view, pos + 8, size)  # last: recovery takes a non-zero size as a whole entry
        mf.wrote_position = pos + fmt.CQ_ENTRY_SIZE
        self.max_offset = queue_offset + 1
        self.max_phys_end = phys + size
        return True

    def _fill_blanks(self, queue_offset: int) -> None:
        """Start a queue past offset 0 (its earlier messages were cleaned from the commitlog)."""
        was_empty = self.max_offset == self.min_offset
        if not self.queue.files:
            self.queue.last_file(queue_offset * fmt.CQ_ENTRY_SIZE)
            self.max_offset = self.queue.files[0].file_from_offset // fmt.CQ_ENTRY_SIZE
        n = queue_offset - self.max_offset
        if n > 0:
            self.put_batch(
                np.zeros(n, np.int64), np.full(n, BLANK_SIZE, np.int64), np.zeros(n, np.int64), self.max_offset
            )
        if was_empty:
            self.min_offset = queue_offset

    # ------------------------------------------------------------------ reading

    def entry(self, queue_offset: int) -> np.void | None:
        mf = self.queue.find(queue_offset * fmt.CQ_ENTRY_SIZE)
        if mf is None or queue_offset >= self.max_offset:
            return None
        answer: np.void | None = self._entries(mf)[
            (queue_offset * fmt.CQ_ENTRY_SIZE - mf.file_from_offset) // fmt.CQ_ENTRY_SIZE
        ]
        return answer

    def get_range(self, queue_offset: int, max_num: int) -> np.ndarray:
        """A copy of up to `max_num` entries from `queue_offset`, stopping at a file end."""
        queue_offset = max(queue_offset, self.min_offset)
        if queue_offset >= self.max_offset or max_num <= 0:
            return np.empty(0, dtype=fmt.CQ_DTYPE)
        mf = self.queue.find(queue_offset * fmt.CQ_ENTRY_SIZE)
        if mf is None:
            return np.empty(0, dtype=fmt.CQ_DTYPE)
        entries = self._entries(mf)
        i = (queue_offset * fmt.CQ_ENTRY_SIZE - mf.file_from_offset) // fmt.CQ_ENTRY_SIZE
        k = min(max_num, self.max_offset - queue_offset, len(entries) - i)
        return entries[i : i + k].copy()

    def offset_for_timestamp(self, timestamp: int, store_ts_at: Callable[[int], int]) -> int:
        """The first queue offset whose message was stored at or after `timestamp` (ms).

        Binary search over the entries; `store_ts_at(phys)` reads STORETIMESTAMP from the
        commitlog. Store timestamps never go backwards, so the queue is sorted by them.
        Returns max_offset when every message is older.
        """
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            ts = store_ts_at(int(e["offset"])) if e is not None and e["size"] != BLANK_SIZE else -1
            if ts < 0 or ts < timestamp:  # entry points below the commitlog's min offset: treat as older
                lo = mid + 1
            else:
                hi = mid
        return lo

    # ------------------------------------------------------------------ maintenance

    def truncate_dirty(self, phys_end: int) -> None:
        """Drop entries pointing at or past `phys_end` (a commitlog tail that recovery cut)."""
        cut = self.dirty_from(phys_end)
        if cut < self.max_offset:
            self._set_end(cut * fmt.CQ_ENTRY_SIZE)
            self.min_offset = min(self.min_offset, self.max_offset)

    def dirty_from(self, phys_end: int) -> int:
        """The first queue offset whose entry ends past `phys_end` (max_offset if none): where
        ``truncate_dirty`` cuts, known before cutting (the replica's truncation records it first)."""
        if self.max_offset <= self.min_offset or self.max_phys_end <= phys_end:
            return self.max_offset
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:  # first entry with offset >= phys_end (entries are in commitlog order)
            mid = (lo + hi) // 2
            e = self.entry(mid)
            assert e is not None  # min_offset <= mid < max_offset: written
            if e["size"] != BLANK_SIZE and int(e["offset"]) + int(e["size"]) > phys_end:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def delete_expired(self, min_commitlog_offset: int) -> int:
        """Delete files whose entries all point below the commitlog's min offset; returns count."""
        deleted = 0
        files = self.queue.files
        while len(files) > 1:
            # its last real entry decides: blanks are pre-fills, or entries of skipped damage
            # (which can end a file), and say nothing about the file's age
            entries = self._entries(files[0])
            last: np.void | None = entries[-1]
            if entries[-1]["size"] == BLANK_SIZE:
                real = np.flatnonzero(entries["size"] != BLANK_SIZE)
                last = entries[real[-1]] if len(real) else None
            if last is not None and int(last["offset"]) + int(last["size"]) > min_commitlog_offset:
                break
            self._views.pop(files[0].file_from_offset, None)
            self._detach()
            self.queue.delete_first(1)
            deleted += 1
        if deleted:
            self._find_min_offset()
        head = self.get_range(self.min_offset, self.entries_per_file)
        if len(head):
            stale = (head["size"] == BLANK_SIZE) | (head["offset"] < min_commitlog_offset)
            self.min_offset += int(np.argmin(stale)) if not stale.all() else len(head)
        return deleted

    def flush(self, least_pages: int = 0) -> bool:
        return self.queue.flush(least_pages)

    def close(self) -> None:
        t, i = self._row
        t.release(i)
        self._views.clear()
        self.queue.close()

    def destroy(self) -> None:
        t, i = self._row
        t.release(i)
        self._views.clear()
        for mf in self.queue.files:
            mf.destroy()
        self.queue.files = []


def reserve_each(queues: Iterable[tuple[ConsumeQueue, int]]) -> None:
    """``ConsumeQueue.reserve(count)`` for each (queue, count) of a put, in order. A put of 256
    records over 1,250 topics reserves in 256 queues; the compiled twin makes each one's
    usual case (the last file has the room: two comparisons) without a method call."""
    for cq, count in queues:
        cq.reserve(count)


reserve_each = _speedups.pick("_queues", "reserve_each", reserve_each)


def flush_queues(queues: Iterable[ConsumeQueue], least_pages: int) -> None:
    """``ConsumeQueue.flush(least_pages)`` for each queue (the FlushConsumeQueueService round).

    With 10,000 queues the round ran each queue's ``dirty_pages`` in Python once a second (~4 us
    a queue, 40 ms of the broker's CPU a second); the compiled twin reads the two last files'
    positions in C and calls ``flush`` only for the queues it would flush."""
    for cq in queues:
        cq.flush(least_pages)


flush_queues = _speedups.pick("_queues", "flush_queues", flush_queues)
