"""The filter bitmap's consume-queue extension files: cleanup follows the queue's head, also for
files an earlier broker run wrote (regression: only files the running broker had open went)."""

from __future__ import annotations

import os

import numpy as np

from shmq.filter.bloom import BITMAP_BYTES
from shmq.store.consume_queue_ext import ConsumeQueueExt, ext_dir


def _fill(ext: ConsumeQueueExt, first: int, n: int) -> None:
    ext.put(first, np.arange(first, first + n, dtype=np.int64) * 100, 1, np.zeros((n, BITMAP_BYTES), np.uint8))


def test_files_below_the_queue_head_go_whoever_wrote_them(tmp_path):
    store = str(tmp_path)
    old = ConsumeQueueExt(store, "T", 0, entries_per_file=10)
    _fill(old, 0, 35)  # files 0..3
    old.close()
    assert len(os.listdir(ext_dir(store, "T", 0))) == 4
    new = ConsumeQueueExt(store, "T", 0, entries_per_file=10)  # a restarted broker: nothing open yet
    _fill(new, 35, 5)
    new.delete_below(25)  # files 0 and 1 hold only entries below 25
    assert sorted(os.listdir(ext_dir(store, "T", 0))) == sorted(os.path.basename(new._path(i)) for i in (2, 3))
    new.close()
