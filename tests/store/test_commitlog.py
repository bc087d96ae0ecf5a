import os

import numpy as np
import pytest

from shmq.codec import record as fmt
from shmq.store.commitlog import CommitLog
from shmq.store.mapped_file import AllocateMappedFileService

from .conftest import record


def _log(tmp_path, size=4096, allocator=None, write_through=False):
    return CommitLog(str(tmp_path), size, store_host=42, allocator=allocator, write_through=write_through)


def _open_segment_fds(tmp_path) -> int:
    d = str(tmp_path / "commitlog")
    return sum(
        os.readlink(f"/proc/self/fd/{fd}").startswith(d)
        for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}")
    )


WRITE_MODES = pytest.mark.parametrize("write_through", [False, True], ids=["mapped", "pwrite"])


@WRITE_MODES
def test_append_rolls_with_blank_and_reads_back(tmp_path, write_through):
    log = _log(tmp_path, write_through=write_through)
    bodies = [bytes([i % 256]) * (i * 37 % 700) for i in range(60)]
    offsets = []
    for i, body in enumerate(bodies):
        offsets.append(log.append(record("T", body, tags="a"), i, 3, 1000 + i))
    files = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(files) > 3 and all(len(n) == 20 for n in files)
    assert [int(n) for n in files] == [i * 4096 for i in range(len(files))]
    for i, (off, body) in enumerate(zip(offsets, bodies)):
        rec = log.read(off)
        assert bytes(rec.body) == body and rec.queue_offset == i and rec.queue_id == 3
        assert rec.physical_offset == off and rec.store_timestamp == 1000 + i and rec.store_host == 42
        assert off // 4096 == (off + rec.total_size - 1) // 4096  # never straddles a segment
    seen = [mf.file_from_offset + pos for mf, pos, _ in log.iter_records(0, verify_crc=True)]
    assert seen == offsets
    # every non-last segment ends with a blank filler exactly filling it
    for mf in log.queue.files[:-1]:
        last = [p for m, p, s in log.iter_records(mf.file_from_offset) if m is mf][-1]
        end = last + log.read(mf.file_from_offset + last).total_size
        assert fmt.check_record(mf.view, end, mf.size, mf.file_from_offset + end) == (fmt.RECORD_BLANK, mf.size - end)
    # each mapping holds a descriptor; pwrite's own is only the last segment's (full ones let it go)
    assert _open_segment_fds(tmp_path) == len(log.queue.files) + (1 if write_through else 0)
    log.flush()
    files = list(log.queue.files)
    log.close()
    assert all(f._write_fd < 0 for f in files)


@WRITE_MODES
def test_batch_append_splits_at_segment_end(tmp_path, write_through):
    log = _log(tmp_path, write_through=write_through)
    bodies = [os.urandom(50 + i % 90) for i in range(200)]
    batch = fmt.encode_batch("Batch", bodies)
    sizes = np.diff(np.append(batch.starts, len(batch.buf)))
    res = log.append_batch(batch.buf, batch.starts, sizes, 10, 1, 777)
    assert len(log.queue.files) > 5
    for i, (phys, body) in enumerate(zip(res.phys_offsets.tolist(), bodies)):
        rec = log.read(phys)
        assert bytes(rec.body) == body and rec.queue_offset == 10 + i and rec.queue_id == 1
        assert rec.physical_offset == phys and rec.store_timestamp == 777
    assert [mf.file_from_offset + p for mf, p, _ in log.iter_records(0, True)] == res.phys_offsets.tolist()
    log.close()


@WRITE_MODES
def test_store_fills_missing_crc(tmp_path, write_through):
    log = _log(tmp_path, write_through=write_through)
    rec = record("T", b"payload", crc=0)
    off = log.append(rec, 0, 0, 5)
    assert log.read(off).body_crc == fmt.body_crc(b"payload")
    batch = fmt.encode_batch("T", [b"one", b"two"])
    buf = bytearray(batch.buf)
    for s in batch.starts:
        buf[s + fmt.OFF_BODYCRC : s + fmt.OFF_BODYCRC + 4] = bytes(4)
    sizes = np.diff(np.append(batch.starts, len(buf)))
    res = log.append_batch(bytes(buf), batch.starts, sizes, 1, 0, 6, missing_crc=np.arange(2))
    assert [log.read(p).body_crc for p in res.phys_offsets.tolist()] == [fmt.body_crc(b"one"), fmt.body_crc(b"two")]
    log.close()


def test_preallocated_next_segment_is_used(tmp_path):
    alloc = AllocateMappedFileService(warm=True)
    log = _log(tmp_path, allocator=alloc)
    for i in range(40):
        log.append(record("T", b"x" * 300), i, 0, 1)
    names = sorted(os.listdir(tmp_path / "commitlog"))
    # the segment after the one being written already exists
    assert int(names[-1]) == log.queue.files[-1].file_to_offset or len(names) == len(log.queue.files)
    alloc.shutdown()
    assert len(os.listdir(tmp_path / "commitlog")) == len(log.queue.files)  # unused pre-allocation removed
    log.close()


def test_truncate_zeroes_tail(tmp_path):
    log = _log(tmp_path)
    offs = [log.append(record("T", b"y" * 500), i, 0, 1) for i in range(20)]
    cut = offs[12]
    log.queue.truncate(cut)
    assert log.max_offset == cut
    assert [mf.file_from_offset + p for mf, p, _ in log.iter_records(0)] == offs[:12]
    mf = log.queue.find(cut)
    assert not np.any(mf.array[cut - mf.file_from_offset :])
    log.close()


def test_warm_fills_a_new_segment_and_never_touches_existing_data(tmp_path):
    from shmq.store.mapped_file import MappedFile

    path = str(tmp_path / fmt.offset_file_name(0))
    mf = MappedFile(path, 4 << 20)
    mf.warm()
    assert os.stat(path).st_blocks * 512 >= 4 << 20  # allocated, not sparse
    mf.array[100:105] = 7
    mf.close()
    again = MappedFile(path, 4 << 20)
    assert not again.created
    again.warm()
    assert bytes(again.array[99:106]) == b"\0" + b"\7" * 5 + b"\0" and int(again.array.sum()) == 35
    again.close()


def test_synced_warm_rests_after_each_chunk(tmp_path):
    """SYNC_FLUSH stores warm in synced chunks with a pause after each, so the writer's own
    fdatasyncs do not queue behind a stream of zero pages."""
    from shmq.store.mapped_file import MappedFile

    mf = MappedFile(str(tmp_path / fmt.offset_file_name(0)), 8 << 20)
    rests: list[float] = []
    mf.warm(sync=True, rest=rests.append)
    assert len(rests) == 2 and all(t > 0 for t in rests)
    mf.warm(rest=rests.append)  # unsynced warming never rests
    assert len(rests) == 2
    mf.close()


def test_a_writer_waiting_for_a_segment_hurries_the_synced_warm(tmp_path):
    import time

    alloc = AllocateMappedFileService(warm=True, sync_warm=True)
    path = str(tmp_path / fmt.offset_file_name(0))
    alloc.request(path, 64 << 20)
    t = time.monotonic()
    mf = alloc.take(path, 64 << 20)
    took = time.monotonic() - t
    assert mf.size == 64 << 20 and os.stat(path).st_blocks * 512 >= 64 << 20
    assert not alloc._hurry.is_set()  # the next segment rests again
    mf.close()
    alloc.shutdown()
    assert took < 30
