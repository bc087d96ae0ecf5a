import os
import time

import numpy as np
import pytest

from shmq.codec import record as fmt
from shmq.store.consume_queue import BLANK_SIZE, ConsumeQueue
from shmq.store.read.reader import ConsumeQueueReader, ReadOnlySegment, SegmentQueue, StoreReader
from tests.client.consumer.conftest import delete_commitlog_head, put, put_many


def test_entries_match_the_writer(store, reader):
    put_many(store, "T", 1, 300)
    cq = reader.consume_queue("T", 1)
    rng = cq.entries(0, 1000, 300)
    assert rng.start == 0 and rng.next_offset == 300
    want = store.find_consume_queue("T", 1)
    got = [(int(e["offset"]), int(e["size"]), int(e["tags_code"])) for e in rng.entries]
    assert got == [
        (int(e["offset"]), int(e["size"]), int(e["tags_code"]))
        for e in np.concatenate([want.get_range(o, 128) for o in range(0, 300, 128)])
    ]


def test_max_offset_is_never_passed(store, reader):
    put_many(store, "T", 0, 50)
    cq = reader.consume_queue("T", 0)
    assert len(cq.entries(0, 100, 20).entries) == 20
    assert cq.entries(10, 5, 20).next_offset == 15
    assert len(cq.entries(20, 5, 20).entries) == 0
    assert len(cq.entries(30, 5, 20).entries) == 0


def test_view_inside_one_file_copy_across_files(store, reader):
    put_many(store, "T", 0, 300)  # 128 entries a file
    cq = reader.consume_queue("T", 0)
    inside = cq.entries(10, 50, 300).entries
    assert inside.base is not None and not inside.flags.writeable  # a read-only view of the mapping
    across = cq.entries(100, 100, 300)
    assert len(across.entries) == 100 and across.entries.flags.owndata
    assert across.entries["offset"].tolist() == sorted(across.entries["offset"].tolist())


def test_a_queue_that_does_not_exist_is_empty(tmp_path):
    with StoreReader(str(tmp_path)) as r:
        cq = r.consume_queue("Nope", 0)
        assert cq.min_offset(0) == 0
        assert len(cq.entries(0, 10, 0).entries) == 0
        assert r.commitlog.record(0) is None


def test_blank_prefill_is_skipped(tmp_path):
    store_dir = str(tmp_path / "s")
    cq = ConsumeQueue(store_dir, "T", 0, 20 * 128)
    cq.put_batch(np.array([1000, 2000], np.int64), np.array([100, 100], np.int64), np.array([7, 8], np.int64), 130)
    cq.flush()
    r = ConsumeQueueReader(store_dir, "T", 0)
    assert r.min_offset(132) == 130
    rng = r.entries(0, 10, 132)
    assert rng.start == 130 and rng.entries["offset"].tolist() == [1000, 2000]
    assert (rng.entries["size"] != BLANK_SIZE).all()
    cq.close()
    r.close()


def test_mappings_are_read_only(store, reader):
    put_many(store, "T", 0, 10)
    seg = reader.commitlog.segment(0)
    assert not seg.array.flags.writeable
    with pytest.raises(ValueError):
        seg.array[0] = 1
    with pytest.raises(TypeError):
        seg.mm[0] = 1
    view = reader.commitlog.data(0, 8)
    assert view.readonly


def test_record_and_timestamps(store, reader):
    r0 = put(store, "T", 0, b"hello", tags="A", keys="k1 k2")
    rec = reader.commitlog.record(r0.wrote_offset)
    assert bytes(rec.body) == b"hello" and rec.tags == "A" and rec.keys == ["k1", "k2"]
    assert reader.commitlog.store_timestamp_at(r0.wrote_offset) == r0.store_timestamp


def test_offset_for_timestamp_agrees_with_the_store(store, reader):
    stamps = []
    for _i in range(6):
        res = put(store, "T", 0, b"x" * 10)
        stamps.append(res.store_timestamp)
        put_many(store, "T", 0, 20)
        time.sleep(0.003)
    mx = store.get_max_offset_in_queue("T", 0)
    cq = reader.consume_queue("T", 0)
    for ts in [0, *stamps, stamps[-1] + 1000, stamps[2] + 1]:
        assert cq.offset_for_timestamp(ts, mx) == store.get_offset_in_queue_by_time("T", 0, ts)
    with pytest.raises(ValueError):
        ConsumeQueueReader(store.store_dir, "T", 0).offset_for_timestamp(0, mx)


def test_follows_new_segments(store, reader):
    put_many(store, "T", 0, 50, body_size=500)
    cq = reader.consume_queue("T", 0)
    first = cq.entries(0, 1000, 50)
    assert reader.commitlog.record(int(first.entries[-1]["offset"])) is not None
    mapped = len(reader.commitlog.files.segments)
    put_many(store, "T", 0, 600, body_size=500)  # several more 64 KiB segments, more queue files
    mx = store.get_max_offset_in_queue("T", 0)
    last = cq.entries(mx - 1, 1, mx).entries[0]
    rec = reader.commitlog.record(int(last["offset"]))
    assert rec is not None and rec.queue_offset == mx - 1
    assert len(reader.commitlog.files.segments) > mapped


def maps_of(path_prefix: str) -> list[str]:
    with open("/proc/self/maps") as f:
        return [line for line in f if path_prefix in line]


def test_deleted_segments_stay_readable_until_released(store, reader):
    put_many(store, "T", 0, 400, body_size=500)
    mx = store.get_max_offset_in_queue("T", 0)
    cq = reader.consume_queue("T", 0)
    old = cq.entries(0, 10, mx).entries.copy()
    view = reader.commitlog.data(int(old[0]["offset"]), int(old[0]["size"]))
    first_path = reader.commitlog.files.segments[0].path
    new_min = delete_commitlog_head(store, 2)
    assert not os.path.exists(first_path)
    assert bytes(view[fmt.OFF_BODY : fmt.OFF_BODY + 2]) == b"0:"  # the mapping outlives the file
    assert reader.commitlog.min_offset == 0  # nothing refreshed yet
    reader.refresh()
    assert reader.commitlog.min_offset == new_min
    assert reader.commitlog.data(int(old[0]["offset"]), 4) is None
    assert bytes(view[fmt.OFF_BODY : fmt.OFF_BODY + 2]) == b"0:"  # a view handed out keeps its pages
    del view
    assert not [m for m in maps_of(store.store_dir) if "(deleted)" in m]
    lo = cq.min_offset(mx)
    assert lo == store.get_min_offset_in_queue("T", 0) > 0
    assert int(cq.entries(0, 1, mx).entries[0]["offset"]) >= new_min


def test_segment_queue_waits_for_a_sized_file(tmp_path):
    d = tmp_path / "q"
    d.mkdir()
    (d / fmt.offset_file_name(0)).write_bytes(b"\0" * 4096)
    (d / fmt.offset_file_name(4096)).touch()  # created, not yet sized by the writer
    q = SegmentQueue(str(d))
    q.refresh()
    assert [s.start for s in q.segments] == [0]
    assert q.find(5000) is None
    (d / fmt.offset_file_name(4096)).write_bytes(b"\0" * 4096)
    assert q.find(5000).start == 4096
    q.close()
    assert ReadOnlySegment.open(str(d / fmt.offset_file_name(8192))) is None
