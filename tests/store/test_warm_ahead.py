"""Warming stays a bounded distance ahead of the commitlog writer: a prepared segment takes
`ahead` bytes of disk, not its whole size, and the warmed end follows the writer."""

from __future__ import annotations

import os
import threading

import numpy as np

from shmq.codec import record as fmt
from shmq.codec.record import INDEX_ENTRY_SIZE
from shmq.store.commitlog import CommitLog
from shmq.store.index_file import _RESERVE_ENTRIES, IndexFile
from shmq.store.mapped_file import NEVER, AllocateMappedFileService, MappedFile
from tests.waiting import wait_for

from .conftest import record

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


def _drain(alloc: AllocateMappedFileService) -> None:
    done = threading.Event()  # jobs run in order: every earlier one is done when this one runs
    alloc._submit(done.set)
    assert done.wait(10)


def test_keep_reserved_reserves_the_next_step_in_the_background_below_no_data(tmp_path):
    """A consume-queue-like file: once the writer passes half a step before the reserved end,
    keep_reserved has the allocator's thread reserve one more step; written bytes stay as
    they were and the rest reads as zeros; the mark follows, NEVER while a request is out."""
    step = 64 << 10
    mf = MappedFile(os.path.join(tmp_path, fmt.offset_file_name(0)), 1 << 20, reserve_step=step)
    alloc = AllocateMappedFileService(warm=False)
    assert mf.reserved_position == step and mf.reserve_mark == step // 2
    alloc.keep_reserved(mf, None)
    assert mf.reserve_mark == step // 2 and not mf.reserve_due()  # not due yet: nothing asked
    data = bytes(range(256)) * 160
    mf.view[: len(data)] = data
    mf.wrote_position = len(data)
    alloc.keep_reserved(mf)
    _drain(alloc)
    assert mf.reserved_position == 2 * step and mf.reserve_mark == 2 * step - step // 2  # one step past the end
    assert _allocated(mf.path) >= mf.reserved_position
    assert bytes(mf.view[: len(data)]) == data and not mf.array[len(data) :].any()
    mf.wrote_position = mf.size - 100  # near the end: the last step stops at the file's size
    alloc.keep_reserved(mf)
    _drain(alloc)
    assert mf.reserved_position == mf.size and mf.reserve_mark == NEVER
    alloc.shutdown()
    mf.destroy()


def test_keep_reserved_on_an_index_file_and_after_close(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 100, 20_000)
    alloc = AllocateMappedFileService(warm=False)
    first = f._reserved
    assert f.reserve_mark == (first - f._entry_base) // INDEX_ENTRY_SIZE - _RESERVE_ENTRIES // 2
    rng = np.random.default_rng(1)
    n = f.reserve_mark + 1
    hashes, phys, ts = rng.integers(0, 1 << 31, n), np.arange(n) * 100, np.full(n, 1_700_000_000_000)
    assert f.put_batch(hashes, phys, ts) == n and f.reserve_due()
    before = bytes(f._mm[:first])
    alloc.keep_reserved(f)
    assert f.reserve_mark == NEVER  # one request in flight
    _drain(alloc)
    assert f._reserved == first + _RESERVE_ENTRIES * INDEX_ENTRY_SIZE and not f.reserve_due()
    assert bytes(f._mm[:first]) == before and not any(f._mm[first : f._reserved])
    assert f.query(int(hashes[-1]), 0, 1 << 62, 10)[0] == phys[-1]
    f.reserve_mark = 0
    f.close()
    alloc.keep_reserved(f)  # a closed file: nothing happens, the thread lives on
    _drain(alloc)
    alloc.shutdown()
