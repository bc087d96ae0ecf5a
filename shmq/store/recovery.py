"""Recovery: find where the commitlog really ends and bring consume queues and index in line.

Normal (clean shutdown, no abort file): scan the last three segments. Abnormal (abort file
present): scan from the segment older than the checkpoint (minus a margin), verifying body
CRCs; the first record that fails a check ends the log and everything after it is cut.
Consume queues and the index lose entries pointing past the end, then whatever the commitlog
holds beyond their progress is re-dispatched (dispatch is idempotent).
"""
from __future__ import annotations

import logging
from typing import Iterator

from shmq.codec import record as fmt
from shmq.store.commitlog import CommitLog
from shmq.store.mapped_file import MappedFile

log = logging.getLogger(__name__)
CHECKPOINT_MARGIN_MS = 3000


def find_log_end(commitlog: CommitLog, start_file: int, verify_crc: bool) -> tuple[int, int]:
    """Scan records from segment number `start_file`: (offset after the last valid record, its store ts)."""
    files = commitlog.queue.files
    if not files:
        return 0, 0
    end = files[start_file].file_from_offset
    last_mf, last_pos = None, 0
    for mf, pos, size in commitlog.iter_records(end, verify_crc):
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
    return fmt.HEADER.unpack_from(mf.view, 0)[10]


def recover_commitlog(commitlog: CommitLog, abnormal: bool, checkpoint_ts: int) -> int:
    """Set the commitlog's write position to its true end and cut everything after; returns the end."""
    files = commitlog.queue.files
    if not files:
        return 0
    if abnormal:
        start = abnormal_start_file(commitlog, checkpoint_ts)
    else:
        start = max(0, len(files) - 3)
    end, last_ts = find_log_end(commitlog, start, verify_crc=True)
    log.info("commitlog recovered (%s): valid data ends at %d", "abnormal" if abnormal else "normal", end)
    commitlog.queue.truncate(end)
    for mf in commitlog.queue.files:
        mf.flushed_position = mf.wrote_position
    commitlog.last_store_timestamp = last_ts
    commitlog.confirmed = (end, last_ts)
    return end


def decoded_records(commitlog: CommitLog, offset: int) -> Iterator[tuple[int, fmt.StoredRecord]]:
    """(phys offset, decoded record) for every valid record from `offset` (re-dispatch input)."""
    offset = max(offset, commitlog.min_offset)
    for mf, pos, size in commitlog.iter_records(offset):
        yield mf.file_from_offset + pos, fmt.decode_record(mf.view[pos:pos + size])
