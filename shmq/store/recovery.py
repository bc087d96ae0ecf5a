"""Recovery: find where the commitlog really ends and bring consume queues and index in line.

Normal (clean shutdown, no abort file): scan the last three segments. Abnormal (abort file
present): scan from the segment older than the checkpoint (minus a margin). Both verify body
CRCs. The log ends after the last valid record that nothing valid follows (a torn tail), and
everything after that end is cut. Bad bytes with a valid record after them are damage in the
middle of the log, not its end: they stay in place (a copy goes to DIR/damaged/), are logged
and skipped, and every record after them is kept (consume-queue entries that point into them
become blanks, which readers step over). Consume queues and the index lose entries pointing
past the end, then whatever the commitlog holds beyond their progress is re-dispatched
(dispatch is idempotent).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable, Iterator

from shmq.codec import record as fmt
from shmq.errors import MetadataError
from shmq.store import files as store_files
from shmq.store import queue_table
from shmq.store.checkpoint import StoreCheckpoint
from shmq.store.commitlog import CommitLog
from shmq.store.consume_queue import ConsumeQueue
from shmq.store.index_file import IndexService
from shmq.store.mapped_file import MappedFile

log = logging.getLogger(__name__)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
CHECKPOINT_MARGIN_MS = 3000


def find_log_end(
    commitlog: CommitLog, start_file: int, verify_crc: bool, damaged: list[tuple[int, int]] | None = None
) -> tuple[int, int]:
    """Scan records from segment number `start_file`: (offset after the last valid record, its
    store ts); damaged ranges stepped over on the way go to ``damaged`` (offset, length)."""
    files = commitlog.queue.files
    if not files:
        return 0, 0
    end = files[start_file].file_from_offset
    last_mf, last_pos = None, 0
    for mf, pos, size in commitlog.iter_records(end, verify_crc, damaged):
        last_mf, last_pos = mf, pos
        end = mf.file_from_offset + pos + size
    last_ts = fmt.HEADER.unpack_from(last_mf.view, last_pos)[10] if last_mf is not None else 0
    # a segment that ends with a blank filler: the log continues at the next segment's start
    tail = commitlog.queue.find(end)
    if tail is not None and end - tail.file_from_offset < tail.wrote_position:  # never read a hole (tmpfs)
        status, _ = fmt.check_record(tail.view, end - tail.file_from_offset, tail.size, end, False)
        if status == fmt.RECORD_BLANK:
            end = tail.file_to_offset
    return end, last_ts


def abnormal_start_file(commitlog: CommitLog, checkpoint_ts: int) -> int:
    """Index of the newest segment whose first record is older than the checkpoint minus a margin."""
    files = commitlog.queue.files
    for i in range(len(files) - 1, -1, -1):
        ts = first_store_timestamp(files[i])
        if ts > 0 and ts <= checkpoint_ts - CHECKPOINT_MARGIN_MS:
            return i
    return 0


def first_store_timestamp(mf: MappedFile) -> int:
    status, _ = fmt.check_record(mf.view, 0, mf.size, mf.file_from_offset, False)
    if status != fmt.RECORD_OK:
        return 0
    answer: int = fmt.HEADER.unpack_from(mf.view, 0)[10]
    return answer


def sync_dir(path: str) -> None:
    """fsync a folder: a file's creation, rename or removal in it is then durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def cut_marker_path(commitlog: CommitLog) -> str:
    """DIR/truncating: a replica's truncation in progress (its target offset): recovery finishes it."""
    return os.path.join(os.path.dirname(commitlog.directory), "truncating")


def cut_log(commitlog: CommitLog, offset: int) -> None:
    """Cut the commitlog at ``offset`` durably: the tail of its segment zeroed and synced before
    the later segments go, so a crash in between never brings a cut record back."""
    queue = commitlog.queue
    mf = queue.find(offset)
    if mf is not None:
        mf.zero_from(offset - mf.file_from_offset)
        mf.mm.flush()
        mf.wrote_position = mf.flushed_position = offset - mf.file_from_offset
    for later in [f for f in queue.files if f.file_from_offset > offset]:
        later.destroy()
    queue.files = [f for f in queue.files if f.file_from_offset <= offset]
    for spare in queue.spares:
        spare.destroy()
    queue.spares = []
    sync_dir(queue.directory)


def damaged_path(commitlog: CommitLog, offset: int) -> str:
    """DIR/damaged/<offset>.bin: the copy of a damaged commitlog range that recovery skipped."""
    return os.path.join(os.path.dirname(commitlog.directory), "damaged", f"{fmt.offset_file_name(offset)}.bin")


def save_damaged(commitlog: CommitLog, offset: int, length: int) -> str:
    """Copy the damaged bytes at ``offset`` beside the store (once: a later start finds the same
    damage again and keeps the first copy), so they outlive the segment's cleanup."""
    path = damaged_path(commitlog, offset)
    if os.path.exists(path):
        return path
    store_files.make_dirs(os.path.dirname(path))
    mf = commitlog.queue.find(offset)
    assert mf is not None  # the scan found the range in this segment
    data = mf.view[offset - mf.file_from_offset : offset - mf.file_from_offset + length]
    fd = store_files.open_file(path + ".tmp", os.O_WRONLY | os.O_TRUNC)[0]
    try:
        while len(data):
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(path + ".tmp", path)
    sync_dir(os.path.dirname(path))
    return path


def blank_damaged_entries(queues: Iterable[ConsumeQueue], damaged: list[tuple[int, int]]) -> None:
    """Turn the consume-queue entries that point into damaged commitlog ranges into blanks: the
    records are skipped, and a reader steps over a blank instead of failing on it forever."""
    for cq in queues:
        for offset, length in damaged:
            n = cq.blank_entries_within(offset, offset + length)
            if n:
                log.error(
                    "consume queue %s/%d: %d entries pointed into the damaged commitlog range at %d; "
                    "now blanks (consumers skip them)",
                    cq.topic,
                    cq.queue_id,
                    n,
                    offset,
                )


def finish_cut(commitlog: CommitLog) -> None:
    """Complete a replica truncation that a crash interrupted (see ``cut_marker_path``)."""
    path = cut_marker_path(commitlog)
    try:
        with open(path, encoding="ascii") as f:
            offset = int(f.read())
    except FileNotFoundError:
        return
    except ValueError:
        raise MetadataError(
            f"{path} does not hold a commitlog offset; it marks an interrupted replica "
            "truncation (DIR/diverged/ keeps the cut bytes)"
        ) from None
    log.warning("finishing an interrupted replica truncation: commitlog cut at %d", offset)
    cut_log(commitlog, offset)
    os.unlink(path)
    sync_dir(os.path.dirname(path))


def recover_commitlog(commitlog: CommitLog, abnormal: bool, checkpoint_ts: int) -> tuple[int, int]:
    """Set the commitlog's write position to its true end and cut everything after; returns the end
    and the store timestamp of the last record before it (the store's writer publishes them)."""
    finish_cut(commitlog)
    files = commitlog.queue.files
    if not files:
        return 0, 0
    start = abnormal_start_file(commitlog, checkpoint_ts) if abnormal else max(0, len(files) - 3)
    damaged: list[tuple[int, int]] = []
    end, last_ts = find_log_end(commitlog, start, verify_crc=True, damaged=damaged)
    for offset, length in damaged:
        try:
            saved = f"a copy is in {save_damaged(commitlog, offset, length)}"
        except OSError as e:  # a full disk, say: the bytes stay in the segment all the same
            saved = f"no copy saved ({e}; the bytes stay in the segment)"
        log.error(
            "commitlog damaged at offset %d (%d bytes that are no record, valid records after them): "
            "skipped, every record after it kept; %s (`shmq admin store verify` lists it)",
            offset,
            length,
            saved,
        )
    commitlog.damaged = damaged
    log.info("commitlog recovered (%s): valid data ends at %d", "abnormal" if abnormal else "normal", end)
    commitlog.queue.truncate(end)
    last = commitlog.queue.files[-1]
    if end == last.file_to_offset:  # ends with a BLANK filler: full, even if its zero tail was never written
        last.wrote_position = last.size
    for mf in commitlog.queue.files:
        mf.flushed_position = mf.wrote_position
    commitlog.last_store_timestamp = last_ts
    return end, last_ts


def decoded_records(
    commitlog: CommitLog, offset: int, only: set[tuple[str, int]] | None = None
) -> Iterator[tuple[int, fmt.StoredRecord]]:
    """(phys offset, decoded record) for every valid record from `offset` (re-dispatch input);
    with ``only``, just the records of those (topic, queue id): the rebuild of a few damaged
    consume queues reads the topic and queue id from the header and decodes nothing else."""
    offset = max(offset, commitlog.min_offset)
    topics = {t.encode() for t, _ in only or ()}
    for mf, pos, size in commitlog.iter_records(offset):
        view = mf.view
        if only is not None:
            topic_at = pos + fmt.OFF_BODY + _I32.unpack_from(view, pos + fmt.OFF_BODYLEN)[0]
            topic = bytes(view[topic_at + 1 : topic_at + 1 + view[topic_at]])
            if topic not in topics or (topic.decode(), _I32.unpack_from(view, pos + fmt.OFF_QUEUEID)[0]) not in only:
                continue
        yield mf.file_from_offset + pos, fmt.decode_record(view[pos : pos + size])


def queue_ends(commitlog: CommitLog) -> dict[tuple[str, int], int]:
    """Each queue's max offset (last queue offset + 1) as the whole commitlog's records say,
    from their headers alone: the queue table's stand-in when it cannot be read."""
    ends: dict[tuple[str, int], int] = {}
    hidden = fmt.TRANSACTION_PREPARED  # prepared and rolled-back records have no queue entry
    for mf, pos, _ in commitlog.iter_records(commitlog.min_offset):
        view = mf.view
        if _I32.unpack_from(view, pos + fmt.OFF_SYSFLAG)[0] & hidden:
            continue
        topic_at = pos + fmt.OFF_BODY + _I32.unpack_from(view, pos + fmt.OFF_BODYLEN)[0]
        key = (
            bytes(view[topic_at + 1 : topic_at + 1 + view[topic_at]]).decode(),
            _I32.unpack_from(view, pos + fmt.OFF_QUEUEID)[0],
        )
        ends[key] = _I64.unpack_from(view, pos + fmt.OFF_QUEUEOFFSET)[0] + 1
    return ends


def expected_queue_ends(store_dir: str, commitlog: CommitLog) -> dict[tuple[str, int], int]:
    """Each queue's max offset as far as known: the queue table, or when it cannot be read (or
    is missing on a store with data) the commitlog's record headers, with the reason logged."""
    expected, problems = queue_table.read(store_dir)
    if expected is not None:
        return expected
    if commitlog.max_offset <= commitlog.min_offset:
        return {}
    if problems:
        log.error(
            "queue table damaged (%s); every consume queue is checked against the whole commitlog", " | ".join(problems)
        )
    else:
        log.warning(
            "no queue table (a store written before it existed): every consume queue is checked "
            "against the whole commitlog once"
        )
    return queue_ends(commitlog)


def log_damaged(damaged: set[tuple[str, int]]) -> None:
    keys = sorted(damaged)
    shown = ", ".join(f"{t}/{q}" for t, q in keys[:10]) + (f" and {len(keys) - 10} more" if len(keys) > 10 else "")
    log.error("consume queues lost entries that the commitlog holds: %s; rebuilding them from the commitlog", shown)


def continue_rebuilt(queues: list[ConsumeQueue], expected: dict[tuple[str, int], int]) -> None:
    """After a rebuild: each queue continues at least at the max offset the table recorded, so
    new messages never reuse offsets that the commitlog no longer holds (cleaned segments)."""
    for cq in queues:
        lo, hi = cq.min_offset, cq.max_offset
        cq.skip_to(expected.get((cq.topic, cq.queue_id), 0))
        log.error(
            "consume queue %s/%d rebuilt: queue offsets %d..%d from the commitlog%s",
            cq.topic,
            cq.queue_id,
            lo,
            hi,
            f"; it continues at {cq.max_offset}, the max offset in the queue table (the commitlog "
            "no longer holds the rest)"
            if cq.max_offset > hi
            else "",
        )


def short_queues(
    max_offsets: dict[tuple[str, int], int], expected: dict[tuple[str, int], int]
) -> list[tuple[str, int]]:
    """The queues whose recovered max offset is below what the queue table recorded (or that are
    gone): their consume queue lost entries that the commitlog still has."""
    return sorted(k for k, n in expected.items() if max_offsets.get(k, -1) < n)


def redispatch_start(
    commitlog: CommitLog,
    queues: Iterable[ConsumeQueue],
    index: IndexService | None,
    checkpoint: StoreCheckpoint,
    abnormal: bool,
    rebuild: bool,
) -> int:
    """Where re-dispatch starts at a store's start: everything for a lost folder (``rebuild``),
    the checkpoint's file after a crash, else the end of what the queues and the index hold."""
    if rebuild or not commitlog.queue.files:
        return commitlog.min_offset
    if abnormal:
        i = abnormal_start_file(commitlog, checkpoint.min_timestamp(index is not None))
        return commitlog.queue.files[i].file_from_offset
    # clean shutdown: dispatch is synchronous and in log order, so everything before the
    # most advanced queue's last entry is dispatched (RocketMQ's reput offset likewise)
    ends = [cq.max_phys_end for cq in queues if cq.max_phys_end >= 0]
    if index is not None and index.end_phys_offset >= 0:
        ends.append(index.end_phys_offset + 1)
    return max(ends) if ends else commitlog.min_offset
