"""IndexReader (read-only, another process's index) against the writer's own IndexService.query."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import numpy as np
import pytest

from shmq.codec.record import index_key_hash
from shmq.store.index_file import IndexService
from shmq.store.read.index_reader import IndexFileReader, IndexGeometry, IndexReader

T0 = 1_700_000_000_000
FAR = 2**62


def _fill(store_dir: str, slot_num: int, index_num: int, n: int, keys: int) -> IndexService:
    """``n`` records with one of ``keys`` keys each, 1 s apart, in topic T."""
    svc = IndexService(os.path.join(store_dir, "index"), slot_num, index_num)
    for i in range(n):
        svc.put([index_key_hash("T", f"k{i % keys}")], 100 * i, T0 + 1000 * i)
    return svc


@pytest.mark.parametrize("slot_num,index_num", [(7, 50), (97, 512), (1009, 4000)])
def test_same_answers_as_the_writer_across_files(tmp_path, slot_num: int, index_num: int) -> None:
    svc = _fill(str(tmp_path), slot_num, index_num, 300, 13)  # 300 > 49: several files at (7, 50)
    reader = IndexReader(str(tmp_path))
    try:
        for k in range(14):
            for begin, end, max_num in ((0, FAR, 1000), (T0 + 50_000, T0 + 150_000, 1000), (0, FAR, 5)):
                want = svc.query("T", f"k{k}", max_num, begin, end)
                assert reader.query("T", f"k{k}", max_num, begin, end) == want
        assert reader.query("T", "k1", 1000, 0, FAR)  # k13 finds nothing, k1 something
    finally:
        reader.close()
        svc.close()


def test_geometry_found_from_the_file_alone(tmp_path) -> None:
    svc = _fill(str(tmp_path), 1009, 4000, 10, 3)
    path = svc.files[0].path
    svc.close()
    f = IndexFileReader.open(path)
    assert f is not None
    try:
        assert IndexGeometry.detect(f.mm) == IndexGeometry(1009, 4000)
    finally:
        f.close()


def test_an_empty_file_needs_no_geometry(tmp_path) -> None:
    svc = IndexService(os.path.join(tmp_path, "index"), 97, 512)
    svc.reserve(1)  # makes the file
    reader = IndexReader(str(tmp_path))
    try:
        assert reader.query("T", "k", 10, 0, FAR) == []
    finally:
        reader.close()
        svc.close()


def test_files_deleted_and_added_are_followed(tmp_path) -> None:
    svc = _fill(str(tmp_path), 7, 50, 60, 2)  # two files
    reader = IndexReader(str(tmp_path))
    try:
        assert len(reader.query("T", "k0", 1000, 0, FAR)) == 30
        svc.delete_files_below(10**9)  # the older file goes
        assert 0 < len(reader.query("T", "k0", 1000, 0, FAR)) < 30
    finally:
        reader.close()
        svc.close()


def test_damaged_files_never_raise(tmp_path) -> None:
    """Random bytes over header, slots and entries: a query returns some list, never an error."""
    svc = _fill(str(tmp_path), 97, 512, 200, 7)
    path = svc.files[0].path
    svc.close()
    clean = Path(path).read_bytes()
    rng = random.Random(7)
    for _ in range(300):
        data = bytearray(clean)
        for _ in range(rng.randint(1, 20)):
            pos = rng.choice([rng.randrange(40), rng.randrange(len(data))])
            data[pos] = rng.randrange(256)
        with open(path, "wb") as f:
            f.write(data)
        reader = IndexReader(str(tmp_path))
        try:
            for k in range(8):
                got = reader.query("T", f"k{k}", 64, 0, FAR)
                assert isinstance(got, list) and len(got) <= 64
        finally:
            reader.close()


def test_truncated_file_is_skipped(tmp_path) -> None:
    svc = _fill(str(tmp_path), 97, 512, 20, 3)
    path = svc.files[0].path
    svc.close()
    os.truncate(path, 1000)
    reader = IndexReader(str(tmp_path))
    try:
        assert reader.query("T", "k0", 10, 0, FAR) == []
    finally:
        reader.close()


def test_detect_rejects_garbage() -> None:
    assert IndexGeometry.detect(bytes(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8))) is None


def test_reads_while_the_writer_puts(tmp_path) -> None:
    """Queries racing a writer thread see only entries of their key, never an error, and at the
    end everything (the geometry is found even while puts land between count and end)."""

    svc = IndexService(os.path.join(tmp_path, "index"), 1009, 40000)
    done = threading.Event()

    def write() -> None:
        for i in range(20000):
            svc.put([index_key_hash("T", f"k{i % 50}")], 100 * i, T0 + i)
        done.set()

    t = threading.Thread(target=write)
    t.start()
    reader = IndexReader(str(tmp_path))
    try:
        while not done.is_set():
            for phys in reader.query("T", "k7", 1000, 0, FAR):
                assert phys % 100 == 0 and (phys // 100) % 50 == 7
        t.join()
        assert len(reader.query("T", "k7", 1000, 0, FAR)) == 400
    finally:
        t.join()
        reader.close()
        svc.close()
