"""A reader in this process follows a MessageStore written by a child process."""

import gc
import json
import os
import subprocess
import sys
import threading

import pytest

from shmq.filter.tags import TagFilter
from shmq.store.read.columns import read_batch
from shmq.store.read.reader import StoreReader
from tests.client.consumer.writer_child import QUEUES, TOPIC, body_for

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "writer_child.py")


class Writer:
    def __init__(self, store_dir: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, CHILD, store_dir], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def send(self, cmd: str) -> dict:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.read_state()

    def read_state(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"writer child exited with {self.proc.wait()}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(10)
        self.proc.stdout.close()


@pytest.fixture
def writer(tmp_path):
    w = Writer(str(tmp_path / "store"))
    yield w
    w.close()


def check(batch, qid):
    for qoff, body in zip(batch.queue_offset.tolist(), batch.bodies()):
        assert bytes(body) == body_for(qid, qoff)


def drain(reader, qid, offset, max_offset, expression=None, step=50):
    """Read [offset, max_offset) in steps, checking every body; returns (next offset, delivered)."""
    delivered = 0
    while offset < max_offset:
        b = read_batch(reader, TOPIC, qid, offset, step, max_offset, expression)
        check(b, qid)
        delivered += len(b)
        offset = b.next_offset
    return offset, delivered


def deleted_maps(store_dir):
    with open("/proc/self/maps") as f:
        return [line for line in f if store_dir in line and "(deleted)" in line]


def test_reader_follows_rolls_and_cleanup(writer, tmp_path):
    store_dir = str(tmp_path / "store")
    s = writer.send("put 300")
    reader = StoreReader(store_dir)
    offsets = [0] * QUEUES
    for q in range(QUEUES):
        offsets[q], n = drain(reader, q, 0, s["max"][q])
        assert n == s["max"][q]
    mapped = len(reader.commitlog.files.segments)
    held = read_batch(reader, TOPIC, 0, 0, 10, s["max"][0])  # views into the oldest segment

    s = writer.send("put 600")  # the writer rolls more segments and queue files
    assert s["segments"] > mapped
    for q in range(QUEUES):
        offsets[q], _ = drain(reader, q, offsets[q], s["max"][q], TagFilter("Odd"))
    assert len(reader.commitlog.files.segments) >= s["segments"]  # plus the one pre-allocated ahead

    s = writer.send("clean")
    assert s["cl_min"] > 0 and s["segments"] == 1
    check(held, 0)  # the files are gone; the mapping behind views handed out is not
    reader.refresh()
    assert reader.commitlog.min_offset == s["cl_min"]
    assert len(reader.commitlog.files.segments) <= 2
    check(held, 0)
    del held
    gc.collect()
    assert deleted_maps(store_dir) == []

    s = writer.send("put 200")
    for q in range(QUEUES):
        cq = reader.consume_queue(TOPIC, q)
        lo = cq.min_offset(s["max"][q])
        assert 0 < lo <= offsets[q]
        b = read_batch(reader, TOPIC, q, 0, 1000, s["max"][q])
        assert b.queue_offset[0] == lo and b.missing == 0
        check(b, q)
        offsets[q], _ = drain(reader, q, offsets[q], s["max"][q])
        assert offsets[q] == s["max"][q]
    reader.close()


def test_reader_keeps_up_with_a_free_running_writer(writer, tmp_path):
    store_dir = str(tmp_path / "store")
    total = 2400
    published = {"max": [0] * QUEUES, "done": False}
    lock = threading.Lock()

    def follow():
        writer.proc.stdin.write(f"run {total}\n")
        writer.proc.stdin.flush()
        for _ in range(total // 8 + 1):
            s = writer.read_state()
            with lock:
                published["max"] = s["max"]
        with lock:
            published["done"] = True

    t = threading.Thread(target=follow)
    t.start()
    reader = StoreReader(store_dir)
    offsets, reads_while_running = [0] * QUEUES, 0
    while True:
        with lock:
            mx, done = list(published["max"]), published["done"]
        for q in range(QUEUES):
            if offsets[q] < mx[q]:
                offsets[q], _ = drain(reader, q, offsets[q], mx[q], step=16)
                reads_while_running += not done
        if done and offsets == mx:
            break
    t.join()
    assert sum(offsets) == total
    assert reads_while_running > 10  # the reads overlapped the writes
    assert len(reader.commitlog.files.segments) > 5
    reader.close()
