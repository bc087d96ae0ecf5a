"""Damage in the middle of a stopped store's commitlog: one header field of one record changed
(TOTALSIZE, magic and CRC intact, or not) with thousands of records after it.

A valid record after the damage proves it is not a torn tail, so recovery must keep every
intact record after it: the damaged bytes stay in place (a copy goes to DIR/damaged/), are
skipped and logged, consume-queue entries that pointed at them become blanks, and a consumer
reads everything else and steps over the skipped record instead of failing on it forever.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct

import pytest

from shmq.codec import record as fmt
from shmq.store import verify
from shmq.store.consume_queue import BLANK_SIZE
from shmq.store.message_store import MessageStore
from shmq.store.read import columns
from shmq.store.read.reader import StoreReader

from .conftest import put_batch

SEGMENT = 256 * 1024  # ~3,000 small records fill one segment and part of the next
TOPICS = ("DamA", "DamB")
PER_TOPIC = 1501


@pytest.fixture
def config(small_config):
    return dict(small_config, mappedFileSizeCommitLog=SEGMENT)


def body_of(topic: str, i: int) -> bytes:
    return b"%s-%05d" % (topic.encode(), i)


def fill(store_dir: str, config: dict) -> dict[int, tuple[str, int]]:
    """Two topics of PER_TOPIC messages, interleaved in batches; stopped cleanly. Returns
    commitlog offset -> (topic, queue offset) of every record, and the log's end under -1."""
    where: dict[int, tuple[str, int]] = {}
    store = MessageStore(store_dir, config).start()
    try:
        for start in range(0, PER_TOPIC, 50):
            for topic in TOPICS:
                bodies = [body_of(topic, i) for i in range(start, min(start + 50, PER_TOPIC))]
                keys = [{"KEYS": f"k{i}"} for i in range(start, min(start + 50, PER_TOPIC))]
                res = put_batch(store, topic, 0, fmt.encode_batch(topic, bodies, keys))
                for k, phys in enumerate(res.phys_offsets.tolist()):
                    where[phys] = (topic, res.queue_offset + k)
        where[-1] = ("", store.commitlog.max_offset)
    finally:
        store.shutdown()
    return where


def record_at_or_after(where: dict[int, tuple[str, int]], offset: int) -> int:
    return min(p for p in where if p >= offset)


def patch(store_dir: str, offset: int, field: int, fmt_code: str, value: int) -> bytes:
    """Overwrite one header field of the record at commitlog ``offset``; returns the record's
    bytes as they are now on disk."""
    path = os.path.join(store_dir, "commitlog", fmt.offset_file_name(offset - offset % SEGMENT))
    with open(path, "r+b") as f:
        f.seek(offset % SEGMENT + field)
        f.write(struct.pack(fmt_code, value))
        f.seek(offset % SEGMENT)
        size = struct.unpack(">i", f.read(4))[0]
        f.seek(offset % SEGMENT)
        return f.read(max(size, 0) if 0 < size < SEGMENT else 256)


def consume_all(store_dir: str, topic: str, max_offset: int) -> list[tuple[int, bytes]]:
    """(queue offset, body) of every message a consumer's batch pull reads from offset 0."""
    got: list[tuple[int, bytes]] = []
    with StoreReader(store_dir) as reader:
        offset = 0
        while offset < max_offset:
            batch = columns.read_batch(reader, topic, 0, offset, 64, max_offset)
            assert batch.next_offset > offset, "the consumer stalls"
            got += [(int(q), bytes(b)) for q, b in zip(batch.queue_offset.tolist(), batch.bodies())]
            offset = batch.next_offset
    return got


@pytest.mark.parametrize("field", ["bodylen", "totalsize", "magic", "physical_offset"])
def test_one_damaged_header_field_keeps_every_record_after_it(tmp_path, config, caplog, field):
    store_dir = str(tmp_path / "store")
    where = fill(store_dir, config)
    assert len(os.listdir(os.path.join(store_dir, "commitlog"))) == 2
    victim = record_at_or_after(where, 925)
    v_topic, v_qoff = where[victim]
    change = {
        "bodylen": (fmt.OFF_BODYLEN, ">i", 0x70000000 - 8),
        "totalsize": (fmt.OFF_TOTALSIZE, ">i", 0x0000FFFF),
        "magic": (fmt.OFF_MAGIC, ">I", 0x12345678),
        "physical_offset": (fmt.OFF_PHYSICALOFFSET, ">q", victim + 4096),
    }[field]
    damaged_bytes = patch(store_dir, victim, *change)
    report = verify.verify_store(store_dir)  # names the range and checks every record after it
    assert not report.ok and report.counts["records"] == 2 * PER_TOPIC - 1
    assert any(f"damaged bytes at commitlog offset {victim}" in p.problem for p in report.problems)

    caplog.set_level(logging.INFO)
    store = MessageStore(store_dir, config).start()
    try:
        assert store.commitlog.max_offset == where[-1][1]
        for topic in TOPICS:
            assert store.get_max_offset_in_queue(topic, 0) == PER_TOPIC
        ranges = store.commitlog.damaged
        assert len(ranges) == 1 and ranges[0][0] == victim
        copy = os.path.join(store_dir, "damaged", f"{fmt.offset_file_name(victim)}.bin")
        with open(copy, "rb") as f:
            saved = f.read()
        assert saved.startswith(damaged_bytes[: ranges[0][1]][: len(saved)]) and len(saved) == ranges[0][1]
        assert any(f"commitlog damaged at offset {victim}" in r.message for r in caplog.records)
        assert not any("valid data ends at 925" in r.message for r in caplog.records)
        entry = store.find_consume_queue(v_topic, 0).entry(v_qoff)
        assert entry is not None and entry["size"] == BLANK_SIZE
        assert store.query_message(v_topic, f"k{v_qoff}") == []  # its index entry stays, and finds nothing
        assert [bytes(r.body) for r in store.query_message(v_topic, f"k{v_qoff + 1}")] == [body_of(v_topic, v_qoff + 1)]
    finally:
        store.shutdown()

    for topic in TOPICS:  # a FIRST_OFFSET consumer gets all but the damaged record, and moves on
        expect = [(i, body_of(topic, i)) for i in range(PER_TOPIC) if (topic, i) != (v_topic, v_qoff)]
        assert consume_all(store_dir, topic, PER_TOPIC) == expect

    store = MessageStore(store_dir, config).start()  # a second start keeps it all, and writes go on
    try:
        res = put_batch(store, v_topic, 0, fmt.encode_batch(v_topic, [b"after"]))
        assert res.queue_offset == PER_TOPIC
    finally:
        store.shutdown()
    assert len(consume_all(store_dir, v_topic, PER_TOPIC + 1)) == PER_TOPIC


def test_a_consumer_meets_a_damaged_record_with_corrupt_record_error(tmp_path, config):
    """Before any recovery (the damage happened under a running broker): the read path raises
    the documented error, not IndexError, on a record whose BODYLEN is wrong."""
    store_dir = str(tmp_path / "store")
    where = fill(store_dir, config)
    victim = record_at_or_after(where, 925)
    topic, qoff = where[victim]
    patch(store_dir, victim, fmt.OFF_BODYLEN, ">i", 0x70000000 - 8)
    with StoreReader(store_dir) as reader:
        with pytest.raises(fmt.CorruptRecordError, match=f"offset {victim}"):
            columns.read_batch(reader, topic, 0, qoff, 8, PER_TOPIC)
        with pytest.raises(fmt.CorruptRecordError, match=f"offset {victim}"):
            columns.pull_messages(reader, topic, 0, qoff, 8, PER_TOPIC)
        with pytest.raises(fmt.CorruptRecordError):
            reader.commitlog.record(victim)


@pytest.mark.parametrize("lost", ["none", "consumequeue"])
def test_after_a_crash_the_damage_is_skipped_too(tmp_path, config, lost):
    """The abnormal path (abort file left behind), and a rebuild of every consume queue from the
    commitlog: the damaged record's queue offset is a blank, everything else is there."""
    store_dir = str(tmp_path / "store")
    where = fill(store_dir, config)
    victim = record_at_or_after(where, 925)
    v_topic, v_qoff = where[victim]
    patch(store_dir, victim, fmt.OFF_BODYLEN, ">i", 0x70000000 - 8)
    open(os.path.join(store_dir, "abort"), "wb").close()
    if lost == "consumequeue":
        shutil.rmtree(os.path.join(store_dir, "consumequeue"))
    store = MessageStore(store_dir, config).start()
    try:
        assert store.commitlog.max_offset == where[-1][1]
        assert [r[0] for r in store.commitlog.damaged] == [victim]
        for topic in TOPICS:
            assert store.get_max_offset_in_queue(topic, 0) == PER_TOPIC
    finally:
        store.shutdown()
    for topic in TOPICS:
        expect = [(i, body_of(topic, i)) for i in range(PER_TOPIC) if (topic, i) != (v_topic, v_qoff)]
        assert consume_all(store_dir, topic, PER_TOPIC) == expect


def test_a_lost_consumequeue_folder_is_rebuilt_once(tmp_path, config, caplog):
    """consumequeue/ gone: the re-dispatch from the log's start rebuilds every queue, named
    once in the log, and nothing is re-dispatched a second time."""
    store_dir = str(tmp_path / "store")
    fill(store_dir, config)
    shutil.rmtree(os.path.join(store_dir, "consumequeue"))
    with caplog.at_level(logging.INFO, logger="shmq"):
        store = MessageStore(store_dir, config).start()
        store.shutdown()
    passes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("re-dispatched")]
    assert len(passes) == 1, passes
    lost = [r.getMessage() for r in caplog.records if "lost entries" in r.getMessage()]
    assert len(lost) == 1 and all(t in lost[0] for t in TOPICS), lost
    for topic in TOPICS:
        assert [b for _, b in consume_all(store_dir, topic, PER_TOPIC)] == [body_of(topic, i) for i in range(PER_TOPIC)]


def test_a_copy_that_cannot_be_saved_does_not_stop_the_start(tmp_path, config, caplog):
    store_dir = str(tmp_path / "store")
    where = fill(store_dir, config)
    victim = record_at_or_after(where, 925)
    patch(store_dir, victim, fmt.OFF_MAGIC, ">I", 0)
    open(os.path.join(store_dir, "damaged"), "wb").close()  # a file where the folder would go
    store = MessageStore(store_dir, config).start()
    try:
        assert store.commitlog.max_offset == where[-1][1]
        assert any(
            f"commitlog damaged at offset {victim}" in r.message and "no copy saved" in r.message
            for r in caplog.records
        )
    finally:
        store.shutdown()


def test_a_skipped_record_that_ends_a_consume_queue_file_keeps_the_file(tmp_path, config):
    """The blank that replaces the damaged record's entry is the last entry of the queue's first
    file: the file still holds live entries, so neither the start's nor cleanup's expiry of
    consume-queue files may take it for an expired one."""
    config = dict(config, mappedFileSizeConsumeQueue=20 * 256)
    store_dir = str(tmp_path / "store")
    where = fill(store_dir, config)
    victim = next(p for p, (t, q) in where.items() if (t, q) == ("DamB", 255))
    patch(store_dir, victim, fmt.OFF_PHYSICALOFFSET, ">q", 2199023413705)
    store = MessageStore(store_dir, config).start()
    try:
        assert store.find_consume_queue("DamB", 0).min_offset == 0
        store.find_consume_queue("DamB", 0).delete_expired(store.commitlog.min_offset)
        assert store.find_consume_queue("DamB", 0).min_offset == 0
    finally:
        store.shutdown()
    expect = [(i, body_of("DamB", i)) for i in range(PER_TOPIC) if i != 255]
    assert consume_all(store_dir, "DamB", PER_TOPIC) == expect
