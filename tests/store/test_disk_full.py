"""The store on a full disk (issue 10 C9), in-process: puts fail whole with DiskFullError
instead of faulting, and a recovery cut short by the disk completes by itself once space is freed."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from shmq.codec import record as fmt
from shmq.errors import DiskFullError
from shmq.store.message_store import MessageStore
from shmq.store.read.lookup import GetStatus

from .conftest import put_batch, put_one, record
from .small_disk import fill, small_disk


def test_rebuilding_consume_queues_on_a_full_disk_waits_for_space(small_config):
    """Regression (issue 10 C9): the rebuild wrote consume-queue files into holes of a full
    disk (SIGBUS on tmpfs) or failed the start."""
    small_config["diskSpaceWarningLevelRatio"] = 1.0  # only the disk itself refuses: fallocate fails
    with small_disk("tmpfs") as mnt:
        d = os.path.join(mnt, "store")
        with MessageStore(d, small_config) as s:
            for i in range(300):  # 50 queues: their files need more than recovery frees (the log's tail)
                put_one(s, "T", i % 50, record("T", b"m%d" % i))
        shutil.rmtree(os.path.join(d, "consumequeue"))  # rebuilt from the commitlog at the next start
        filler = fill(mnt, 0)
        s = MessageStore(d, small_config).start()
        try:
            assert s.disk_full
            with pytest.raises(DiskFullError, match="disk full"):
                put_one(s, "T", 0, record("T", b"refused"))
            os.unlink(filler)
            deadline = time.monotonic() + 2
            while True:  # the next put after the probe interval finishes recovery first
                try:
                    put_one(s, "T", 0, record("T", b"after"))
                    break
                except DiskFullError:
                    assert time.monotonic() < deadline
                    time.sleep(0.02)
            got = []
            for q in range(50):
                r = s.get_message("T", q, 0, 1000)
                assert r.status is GetStatus.FOUND
                got += [bytes(m.body) for m in r.messages]
            assert sorted(got) == sorted([b"m%d" % i for i in range(300)] + [b"after"])
        finally:
            s.shutdown()


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
def test_batches_fill_the_disk_then_fail_whole_and_everything_stored_is_read(kind, flush, small_config):
    """Regression (issue 10 C9): a put into a segment whose blocks the disk could not give was
    a SIGBUS (here: in this process); blocks are now reserved before anything is written."""
    small_config.update(diskSpaceWarningLevelRatio=1.0, flushDiskType=flush, mappedFileSizeCommitLog=1 << 20)
    with small_disk(kind) as mnt:
        fill(mnt, 3 << 20)
        stored = 0
        with MessageStore(os.path.join(mnt, "store"), small_config) as s:
            with pytest.raises(DiskFullError, match="disk full"):
                for i in range(100_000):
                    topic = f"T{i % 7}"
                    put_batch(s, topic, i % 3, fmt.encode_batch(topic, [os.urandom(3000)] * 5))
                    stored += 5
            assert stored > 100 and s.disk_full
            got = sum(len(s.get_message(f"T{t}", q, 0, 10_000).messages) for t in range(7) for q in range(3))
            assert got == stored


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
def test_a_store_reopened_on_a_full_disk_refuses_puts_without_faulting(kind, small_config):
    """Regression (issue 10 C9): after a restart on a full disk the first write into a loaded
    file's page faulted (SIGBUS); a loaded file is now reserved from its data end on."""
    small_config.update(diskSpaceWarningLevelRatio=1.0, mappedFileSizeCommitLog=1 << 20)
    body = os.urandom(16000)
    with small_disk(kind) as mnt:
        d = os.path.join(mnt, "store")
        fill(mnt, 6 << 20)
        stored = 0
        for _round in range(2):
            with MessageStore(d, small_config) as s:
                with pytest.raises(DiskFullError):
                    for i in range(10_000):
                        put_one(s, "T", i % 4, record("T", body, keys=f"k{i}"))
                        stored += 1
                got = sum(len(s.get_message("T", q, 0, 10_000).messages) for q in range(4))
                assert got == stored
            fill(mnt, 0)
