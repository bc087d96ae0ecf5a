"""What a scan reads: the topics and queues of a store, each queue's readable range, and the
partitions a scan is split into. No Spark here (tested alone); read-only, no lock taken.

A store being written (a live broker, a replica catching up) or left by a crash is read the
same way. The broker writes a record, then its consume-queue entry, both in order, and a
record's PHYSICALOFFSET field last; so the entries that point at whole records form a prefix
of each queue, and the first entry that does not (still zero, torn, or pointing at bytes not
yet whole) is where a consistent read of that queue ends. `queue_extent` finds that end
without reading the records in between (a binary search over record checks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from shmq.codec import record as fmt
from shmq.errors import NotAStoreError
from shmq.model.system_topics import is_system_topic
from shmq.spark.stores import is_store
from shmq.store.consume_queue import BLANK_SIZE
from shmq.store.read.reader import CommitLogReader, ConsumeQueueReader

DEFAULT_MAX_PARTITION_BYTES = 64 * 1024 * 1024  # commitlog bytes one task reads at most


def check_store(store_dir: str) -> str:
    """The absolute store path; NotAStoreError when it is not a shmq store."""
    path = os.path.abspath(store_dir)
    if not os.path.isdir(path):
        raise NotAStoreError(f"{store_dir!r} is not a shmq store: no such directory")
    # a broker makes commitlog/ with its first message; before that its checkpoint file says
    # the directory is a store (an empty one)
    if not is_store(path):
        raise NotAStoreError(
            f"{store_dir!r} is not a shmq store: it has no commitlog/ directory nor checkpoint "
            "file (give the directory a broker was started with, `shmq broker --store DIR`)"
        )
    return path


def store_topics(store_dir: str) -> list[str]:
    """Every topic with a consume queue on disk, sorted."""
    try:
        names = os.listdir(os.path.join(store_dir, "consumequeue"))
    except FileNotFoundError:
        return []
    return sorted(
        n
        for n in names
        if fmt.TOPIC_PATTERN.match(n)
        and len(n) <= fmt.MAX_TOPIC_LENGTH
        and os.path.isdir(os.path.join(store_dir, "consumequeue", n))
    )


def topic_queues(store_dir: str, topic: str) -> list[int]:
    """The queue ids of `topic` that have a folder on disk, sorted."""
    try:
        names = os.listdir(os.path.join(store_dir, "consumequeue", topic))
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isdigit() and len(n) < 10)


def select_topics(store_dir: str, wanted: list[str] | None) -> list[str]:
    """The topics a scan covers: those named (system topics included only when named), else
    every user topic of the store."""
    present = store_topics(store_dir)
    if wanted is None:
        return [t for t in present if not is_system_topic(t)]
    have = set(present)
    return [t for t in dict.fromkeys(wanted) if t in have]


def parse_topic_option(value: str | None) -> list[str] | None:
    """The `topic` option: a comma list (blanks ignored); None when absent or empty."""
    if value is None:
        return None
    topics = [t.strip() for t in value.split(",") if t.strip()]
    for t in topics:
        fmt.check_topic(t)
    return topics or None


@dataclass(frozen=True, slots=True)
class QueueExtent:
    """A queue's readable range [start, end) and the commitlog bytes each entry points at."""

    topic: str
    queue_id: int
    start: int
    end: int


def _entry_problem(
    commitlog: CommitLogReader, entry: np.void, queue_id: int, queue_offset: int, verify_crc: bool = False
) -> str | None:
    """Why this consume-queue entry does not point at a whole record of this queue (None: it
    does, or its record was deleted by cleanup and a read skips it). The CRC is checked when
    asked (a scan checks it when the record is read)."""
    size = int(entry["size"])
    phys = int(entry["offset"])
    if size == BLANK_SIZE:
        return None
    if size < fmt.FIXED_OVERHEAD or phys < 0:
        return f"the entry holds commitlog offset {phys} and size {size}, which no record has"
    seg = commitlog.segment(phys)
    if seg is None or phys + size > seg.end:
        commitlog.refresh()
        seg = commitlog.segment(phys)
        if seg is None:
            return (
                None
                if phys < commitlog.min_offset
                else f"it points at commitlog offset {phys}, past the commitlog files on disk"
            )
        if phys + size > seg.end:
            return f"its record at commitlog offset {phys} (size {size}) runs past the end of its segment"
    status, got = fmt.check_record(memoryview(seg.mm), phys - seg.start, seg.size, phys, verify_crc=verify_crc)
    if status == fmt.RECORD_BAD_CRC:
        return f"the record at commitlog offset {phys} fails its body CRC"
    if status != fmt.RECORD_OK or got != size:
        return f"no whole record of size {size} is at commitlog offset {phys}"
    hdr = np.frombuffer(seg.mm, fmt.HEADER_DTYPE, 1, phys - seg.start)[0]
    if int(hdr["queue_id"]) != queue_id or int(hdr["queue_offset"]) != queue_offset:
        return (
            f"the record at commitlog offset {phys} belongs to queue {int(hdr['queue_id'])} "
            f"offset {int(hdr['queue_offset'])}"
        )
    return None


def _record_whole(commitlog: CommitLogReader, entry: np.void, queue_id: int, queue_offset: int) -> bool:
    """Does this consume-queue entry point at a whole record of this queue (what a reader may
    return)? The CRC is checked later, when the record is read."""
    return _entry_problem(commitlog, entry, queue_id, queue_offset) is None


def _written_end(cq: ConsumeQueueReader) -> int:
    """One past the last entry with a non-zero size: what the broker has written at least partly."""
    cq.refresh()
    for seg in reversed(cq.files.segments):
        sizes = seg.array.view(fmt.CQ_DTYPE)["size"]
        nz = np.flatnonzero(sizes != 0)
        if len(nz):
            return seg.start // fmt.CQ_ENTRY_SIZE + int(nz[-1]) + 1
    return 0


def queue_extent(store_dir: str, topic: str, queue_id: int, commitlog: CommitLogReader) -> QueueExtent:
    """The range of `topic`/`queue_id` a consistent read returns now (see the module doc)."""
    cq = ConsumeQueueReader(store_dir, topic, queue_id, commitlog)
    try:
        hi = _written_end(cq)
        lo = cq.min_offset(hi) if hi else 0

        def whole(i: int) -> bool:
            e = cq.entries(i, 1, hi).entries
            return len(e) == 1 and _record_whole(commitlog, e[0], queue_id, i)

        if hi > lo and not whole(hi - 1):
            good, bad = lo - 1, hi - 1  # invariant: entry `good` is whole (or none), `bad` is not
            while bad - good > 1:
                mid = (good + bad) // 2
                if whole(mid):
                    good = mid
                else:
                    bad = mid
            hi = bad
        return QueueExtent(topic, queue_id, lo, max(lo, hi))
    finally:
        cq.close()


@dataclass(frozen=True, slots=True)
class QueueSlice:
    """One partition: queue offsets [start, end) of one queue; `nbytes` is the commitlog bytes
    its entries point at (what the task reads)."""

    topic: str
    queue_id: int
    start: int
    end: int
    nbytes: int


def entry_sizes(store_dir: str, topic: str, queue_id: int, start: int, end: int) -> np.ndarray:
    """Record sizes of entries [start, end) (blanks count 0), read from the consume queue only."""
    cq = ConsumeQueueReader(store_dir, topic, queue_id)
    try:
        cq.refresh()
        sizes = cq.entries(start, end - start, end).entries["size"].astype(np.int64)
        return np.where(sizes == BLANK_SIZE, 0, sizes)
    finally:
        cq.close()


def split_extent(store_dir: str, ext: QueueExtent, max_bytes: int) -> list[QueueSlice]:
    """Cut a queue's range into slices of at most `max_bytes` of records each (one record may
    exceed it alone)."""
    if ext.end <= ext.start:
        return []
    sizes = entry_sizes(store_dir, ext.topic, ext.queue_id, ext.start, ext.end)
    total = int(sizes.sum())
    if total <= max_bytes:
        return [QueueSlice(ext.topic, ext.queue_id, ext.start, ext.start + len(sizes), total)]
    cum = np.cumsum(sizes)
    out: list[QueueSlice] = []
    i, base = 0, 0
    while i < len(sizes):
        j = int(np.searchsorted(cum, base + max_bytes, side="right"))
        j = max(j, i + 1)
        nbytes = int(cum[j - 1]) - base
        out.append(QueueSlice(ext.topic, ext.queue_id, ext.start + i, ext.start + j, nbytes))
        base += nbytes
        i = j
    return out


def describe_damage(store_dir: str, sl: QueueSlice, error: Exception) -> str:
    """The message for a read of `sl` that met damage: the first entry of the slice that does
    not point at a whole, CRC-clean record of its queue, named by topic, queue and queue offset
    (found by checking entry by entry: only done once a read has failed)."""
    commitlog = CommitLogReader(store_dir)
    cq = ConsumeQueueReader(store_dir, sl.topic, sl.queue_id, commitlog)
    where = f"{sl.topic}/{sl.queue_id} queue offsets [{sl.start}, {sl.end})"
    try:
        commitlog.refresh()
        cq.refresh()
        for start in range(sl.start, sl.end, 4096):
            rng = cq.entries(start, min(4096, sl.end - start), sl.end)
            for i, entry in enumerate(rng.entries):
                problem = _entry_problem(commitlog, entry, sl.queue_id, rng.start + i, verify_crc=True)
                if problem is not None:
                    return (
                        f"{store_dir}: topic {sl.topic} queue {sl.queue_id} queue offset {rng.start + i} is "
                        f"damaged: {problem} (the read of {where} stopped there: {error})"
                    )
    finally:
        cq.close()
        commitlog.close()
    return f"{store_dir}: {where}: {error}"
