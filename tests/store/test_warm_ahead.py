"""Warming stays a bounded distance ahead of the commitlog writer: a prepared segment takes
`ahead` bytes of disk, not its whole size, and the warmed end follows the writer."""
from __future__ import annotations

import os

from shmq.codec import record as fmt
from shmq.store.commitlog import CommitLog
from shmq.store.mapped_file import NEVER, AllocateMappedFileService

from .conftest import record
from tests.waiting import wait_for

SEGMENT = 8 << 20
AHEAD = 1 << 20


def _allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def test_prepared_segment_is_warmed_only_ahead_bytes_then_follows_the_writer(tmp_path):
    alloc = AllocateMappedFileService(warm=True, ahead=AHEAD)
    log = CommitLog(str(tmp_path), SEGMENT, allocator=alloc)
    rec = record("T", b"x" * 1000)
    log.append(rec, 0, 0, 1)
    nxt = os.path.join(tmp_path, "commitlog", fmt.offset_file_name(SEGMENT))
    assert wait_for(lambda: not alloc._pending and os.path.exists(nxt))
    assert AHEAD <= _allocated(nxt) <= AHEAD + (64 << 10)  # sparse past the warmed part
    i = 1
    while len(log.queue.files) < 2:  # roll into the prepared segment
        log.append(rec, i, 0, 1)
        i += 1
    mf = log.queue.files[-1]
    while mf.wrote_position < 3 * AHEAD:
        log.append(rec, i, 0, 1)
        i += 1
    # warming is asked for by appends: once the thread is idle, one more append leaves the
    # warmed end between half of `ahead` and `ahead` past the writer
    assert wait_for(lambda: mf.warm_mark != NEVER)
    log.append(rec, i, 0, 1)
    i += 1
    assert wait_for(lambda: mf.warm_mark != NEVER)
    assert _allocated(mf.path) >= mf.wrote_position + AHEAD // 2
    assert _allocated(mf.path) <= mf.wrote_position + AHEAD + (64 << 10)
    assert _allocated(mf.path) < SEGMENT  # not the whole segment
    # what the writer wrote is intact: populating never changes a byte
    stored = [log.read(seg.file_from_offset + p) for seg, p, _ in log.iter_records(mf.file_from_offset)]
    assert [r.queue_offset for r in stored] == list(range(stored[0].queue_offset, i))
    assert all(bytes(r.body) == b"x" * 1000 for r in stored)
    alloc.shutdown()
    log.close()


def test_ahead_of_a_segment_or_more_warms_whole_segments(tmp_path):
    """What the benchmarks set: the next segment is entirely warmed before the writer gets there."""
    alloc = AllocateMappedFileService(warm=True, ahead=SEGMENT)
    log = CommitLog(str(tmp_path), SEGMENT, allocator=alloc)
    log.append(record("T", b"x"), 0, 0, 1)
    nxt = os.path.join(tmp_path, "commitlog", fmt.offset_file_name(SEGMENT))
    assert wait_for(lambda: not alloc._pending and os.path.exists(nxt) and _allocated(nxt) >= SEGMENT)
    alloc.shutdown()
    log.close()
