"""The store on a full disk (issue 10 C9), in-process: a recovery cut short by the disk does
not crash, and completes by itself once space is freed."""
from __future__ import annotations

import os
import shutil
import time

import pytest

from shmq.errors import DiskFullError
from shmq.store.message_store import GetStatus, MessageStore

from .conftest import put_one, record
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
