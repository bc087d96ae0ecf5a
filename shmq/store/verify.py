"""`shmq admin store verify`: check a stopped store's files against each other, read-only.

Every commitlog record must be whole with a body matching its BODYCRC; every consume-queue
entry must point at a record of its topic and queue, with that queue offset, size and tag
code; every index entry must point at a record with a key hashing to the entry's hash. The
checks of one entry are pure functions (``cq_entry_problem``, ``index_entry_problem``); the
walk maps every file with ACCESS_READ and never writes a byte, not even the lock file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from shmq.codec import record as fmt
from shmq.errors import NotAStoreError, StoreLockedError
from shmq.store import files
from shmq.store.consume_queue import BLANK_SIZE
from shmq.store.read.index_reader import IndexFileReader, IndexGeometry
from shmq.store.read.reader import ReadOnlySegment
from shmq.store.write.dispatch import consume_queue_tags_code

MAX_PROBLEMS = 50  # problems listed in the report (all are counted)


class RecordInfo(NamedTuple):
    """What the consume-queue and index checks need of a record."""

    topic: str
    queue_id: int
    queue_offset: int
    size: int
    tags_code: int
    key_hashes: frozenset[int]
    in_queue: bool


@dataclass
class Problem:
    file: str  # relative to the store folder
    position: int  # byte position in that file
    problem: str


@dataclass
class Report:
    """Counts of what was checked and the problems found (the first ``MAX_PROBLEMS`` kept)."""

    store: str
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            (
                "commitlog_segments",
                "records",
                "record_bytes",
                "consume_queues",
                "cq_entries",
                "index_files",
                "index_entries",
            ),
            0,
        )
    )
    problems: list[Problem] = field(default_factory=list)
    problem_count: int = 0

    def add(self, file: str, position: int, problem: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(file, position, problem))

    @property
    def ok(self) -> bool:
        return self.problem_count == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "ok": self.ok,
            "counts": self.counts,
            "problem_count": self.problem_count,
            "problems": [vars(p) for p in self.problems],
        }


# --------------------------------------------------------------------------- pure checks


def cq_entry_problem(
    topic: str, queue_id: int, queue_offset: int, entry_size: int, entry_tags_code: int, rec: RecordInfo | None
) -> str | None:
    """Why a consume-queue entry does not match the record it points at; None if it does."""
    if rec is None:
        return "points at no record"
    if (rec.topic, rec.queue_id) != (topic, queue_id):
        return f"points at a record of {rec.topic}/{rec.queue_id}"
    if not rec.in_queue:
        return "points at a record that enters no consume queue (a transaction half or rollback)"
    if rec.queue_offset != queue_offset:
        return f"record's queue offset is {rec.queue_offset}"
    if rec.size != entry_size:
        return f"size {entry_size}, the record has {rec.size}"
    if rec.tags_code != entry_tags_code:
        return f"tag code {entry_tags_code}, the record's is {rec.tags_code}"
    return None


def index_entry_problem(key_hash: int, prev: int, number: int, rec: RecordInfo | None) -> str | None:
    """Why index entry ``number`` is wrong; None if it is right."""
    if not 0 <= prev < number:
        return f"prev link {prev} does not point back"
    if rec is None:
        return "points at no record"
    if key_hash not in rec.key_hashes:
        return f"key hash {key_hash} is none of the record's keys"
    return None


# --------------------------------------------------------------------------- walking the files


def check_unlocked(store_dir: str) -> None:
    """StoreLockedError if a broker holds the store's lock: its files change under a check.
    The lock file is opened read-only and never created or locked here."""
    try:
        fd = os.open(os.path.join(store_dir, "lock"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        holders = files.lock_holders(fd)
    finally:
        os.close(fd)
    if holders:
        who = ", ".join(f"pid {pid}" for pid, _ in holders)
        raise StoreLockedError(
            f"store {store_dir} is open by a broker ({who}): stop it first, "
            "a running broker's files change under the check"
        )


def _segments(directory: str) -> Iterator[ReadOnlySegment]:
    """The offset-named files of a folder, mapped read-only, oldest first (closed after use)."""
    try:
        names = sorted(n for n in os.listdir(directory) if fmt.parse_offset_file_name(n) is not None)
    except FileNotFoundError:
        return
    for name in names:
        seg = ReadOnlySegment.open(os.path.join(directory, name))
        if seg is not None:
            try:
                yield seg
            finally:
                seg.close()


def iter_records(store_dir: str, report: Report | None = None, start: int = 0) -> Iterator[fmt.StoredRecord]:
    """Every whole record of the commitlog in log order; what is wrong goes to ``report``.

    The walk is recovery's (``fmt.scan_segment``): a record failing only its CRC is reported
    (and yielded); bad bytes with a valid record after them are reported as damage that
    recovery skips, and the walk goes on after them; anything else unreadable ends its
    segment's records (in the last segment that is the log's end if only zeros follow).
    Segments that end at or below ``start`` are skipped."""
    directory = os.path.join(store_dir, "commitlog")
    segs = (
        sorted(n for n in os.listdir(directory) if fmt.parse_offset_file_name(n) is not None)
        if os.path.isdir(directory)
        else []
    )
    for i, seg in enumerate(_segments(directory)):
        if seg.end <= start:
            continue
        rel = os.path.relpath(seg.path, store_dir)
        if report is not None:
            report.counts["commitlog_segments"] += 1
        buf = memoryview(seg.mm)
        for status, pos, size in fmt.scan_segment(buf, 0, seg.size, seg.start, verify_crc=report is not None):
            if status == fmt.RECORD_BAD_CRC and report is not None:
                report.add(rel, pos, f"record at commitlog offset {seg.start + pos}: body CRC mismatch")
                yield fmt.decode_record(buf, pos)  # its entries are still checked against it
            elif status == fmt.RECORD_OK:
                yield fmt.decode_record(buf, pos)
            elif status == fmt.RECORD_DAMAGED and report is not None:
                report.add(
                    rel,
                    pos,
                    f"damaged bytes at commitlog offset {seg.start + pos} ({size} bytes, valid "
                    "records after them): a start skips them and keeps every record after them",
                )
            elif status == fmt.RECORD_END and report is not None and (i < len(segs) - 1 or seg.array[pos:].any()):
                report.add(
                    rel,
                    pos,
                    f"unreadable bytes at commitlog offset {seg.start + pos} "
                    f"(records after it in this segment cannot be checked)",
                )
        del buf  # the segment is unmapped when the next one is taken


def _check_consume_queues(store_dir: str, records: dict[int, RecordInfo], log_min: int, report: Report) -> None:
    root = os.path.join(store_dir, "consumequeue")
    for topic in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        for qid in sorted((q for q in os.listdir(os.path.join(root, topic)) if q.isdigit()), key=int):
            report.counts["consume_queues"] += 1
            for seg in _segments(os.path.join(root, topic, qid)):
                entries = seg.array[: seg.size // fmt.CQ_ENTRY_SIZE * fmt.CQ_ENTRY_SIZE].view(fmt.CQ_DTYPE)
                zero = np.flatnonzero(entries["size"] == 0)
                end = int(zero[0]) if len(zero) else len(entries)
                rel = os.path.relpath(seg.path, store_dir)
                for i in range(end):
                    phys, size, code = (int(x) for x in entries[i].item())
                    if size == BLANK_SIZE or phys < log_min:
                        continue  # a pre-fill, or a record cleanup removed
                    report.counts["cq_entries"] += 1
                    qoff = seg.start // fmt.CQ_ENTRY_SIZE + i
                    why = cq_entry_problem(topic, int(qid), qoff, size, code, records.get(phys))
                    if why is not None:
                        report.add(rel, i * fmt.CQ_ENTRY_SIZE, f"queue offset {qoff} -> commitlog offset {phys}: {why}")
                if zero.size and entries[end:].view(np.uint8).any():
                    report.add(rel, end * fmt.CQ_ENTRY_SIZE, "entries after an empty one")
                del entries


def _check_index(store_dir: str, records: dict[int, RecordInfo], log_min: int, report: Report) -> None:
    directory = os.path.join(store_dir, "index")
    names = sorted(n for n in os.listdir(directory) if len(n) == 17 and n.isdigit()) if os.path.isdir(directory) else []
    for name in names:
        f = IndexFileReader.open(os.path.join(directory, name))
        if f is None:
            continue
        rel = os.path.join("index", name)
        report.counts["index_files"] += 1
        try:
            count = f.header()[5]
            if count == 0:
                continue
            g = IndexGeometry.detect(f.mm)
            if g is None:
                report.add(rel, 0, f"header (index count {count}) matches no slot/entry layout of this file's size")
                continue
            entries = np.frombuffer(f.mm, fmt.INDEX_ENTRY_DTYPE, count, g.entry_base + fmt.INDEX_ENTRY_SIZE)
            for n, (key_hash, phys, _, prev) in enumerate(entries.tolist(), start=1):
                if phys < log_min:
                    continue
                report.counts["index_entries"] += 1
                why = index_entry_problem(key_hash, prev, n, records.get(phys))
                if why is not None:
                    report.add(
                        rel, g.entry_base + n * fmt.INDEX_ENTRY_SIZE, f"entry {n} -> commitlog offset {phys}: {why}"
                    )
            del entries
        finally:
            f.close()


def verify_store(store_dir: str) -> Report:
    """Check every file of the stopped store at ``store_dir``."""
    check_unlocked(store_dir)
    if not os.path.isdir(os.path.join(store_dir, "commitlog")):
        raise NotAStoreError(f"{store_dir} holds no shmq store (no commitlog/)")
    report = Report(os.path.abspath(store_dir))
    records: dict[int, RecordInfo] = {}
    log_min = -1
    for rec in iter_records(store_dir, report):
        if log_min < 0:
            log_min = rec.physical_offset
        props = rec.properties
        hashes = frozenset(fmt.record_key_hashes(rec.topic, rec.uniq_key, props.get(fmt.PROPERTY_KEYS)))
        records[rec.physical_offset] = RecordInfo(
            rec.topic,
            rec.queue_id,
            rec.queue_offset,
            rec.total_size,
            consume_queue_tags_code(rec),
            hashes,
            fmt.enters_consume_queue(rec.sysflag),
        )
        report.counts["records"] += 1
        report.counts["record_bytes"] += rec.total_size
    log_min = max(log_min, 0)
    _check_consume_queues(store_dir, records, log_min, report)
    _check_index(store_dir, records, log_min, report)
    return report
