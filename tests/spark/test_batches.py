"""Arrow batches of a scan, without Spark: the columnar build equals a per-row decode of the
same records on varied stores, and damaged or torn stores give a clear error or the valid
prefix. Stores are written with MessageStore directly (real files, small segments)."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pyarrow as pa
import pytest

from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.errors import CorruptRecordError
from shmq.model.pulled import PulledBatch
from shmq.spark.batches import read_slice
from shmq.spark.layout import QueueSlice
from shmq.spark.planner import plan_scan
from shmq.spark.pushdown import ScanBounds
from shmq.spark.schema import ARROW_SCHEMA
from shmq.store.message_store import MessageStore
from shmq.store.read.columns import decode_batch
from shmq.store.read.reader import StoreReader
from shmq.store.write.hooks import PutRequest

# 64 KiB commitlog segments: a few hundred records fill several, so batches cross segments
# (each put stays well under one segment)
CONFIG = {"mappedFileSizeCommitLog": 64 * 1024, "mappedFileSizeConsumeQueue": 20 * 256, "flushDiskType": "ASYNC_FLUSH"}


def per_row_reference(b: PulledBatch) -> pa.Table:
    """What a scan must return for `b`, one Python dict per record (the first cut of the reader)."""
    rows = []
    offset_ids = ids.offset_msg_ids(b.store_host, b.commit_log_offset)
    for i in range(len(b)):
        props = b.properties(i)
        rows.append(
            {
                "topic": b.topic,
                "queue_id": b.queue_id,
                "queue_offset": int(b.queue_offset[i]),
                "commitlog_offset": int(b.commit_log_offset[i]),
                "size": int(b.size[i]),
                "tags": props.get(fmt.PROPERTY_TAGS),
                "keys": props.get(fmt.PROPERTY_KEYS),
                "msg_id": props.get(fmt.PROPERTY_UNIQ_KEY) or offset_ids[i],
                "born_timestamp": int(b.born_timestamp[i]) * 1000,
                "store_timestamp": int(b.store_timestamp[i]) * 1000,
                "reconsume_times": int(b.reconsume_times[i]),
                "sys_flag": int(b.sysflag[i]),
                "properties": list(props.items()),
                "body": bytes(b.body(i)),
            }
        )
    return pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)


def put_raw(
    store: MessageStore,
    topic: str,
    queue_id: int,
    bodies: list[bytes],
    props: list[bytes],
    sysflags: list[int] | None = None,
) -> None:
    """Records with these exact property bytes (odd ones included) and sysflags."""
    buf, starts = fmt.pack_records(
        fmt.check_topic(topic),
        bodies,
        props,
        [fmt.body_crc(x) for x in bodies],
        sysflags=sysflags,
        born_timestamp=1_700_000_000_000,
    )
    n = len(bodies)
    batch = fmt.EncodedBatch(buf, starts, np.zeros(n, np.int64), np.empty(0, np.int64), np.empty(0, np.int64))
    store.put(PutRequest(batch, [topic], None, queue_id), wait_flush=False)


def props_of(**kw: str) -> bytes:
    return fmt.encode_properties(fmt.message_properties(**kw))


def write_varied(store_dir: str) -> dict[tuple[str, int], list[bytes]]:
    """Several topics and queues of varied records; returns the bodies sent per queue (inflated)."""
    rng = np.random.default_rng(7)
    sent: dict[tuple[str, int], list[bytes]] = {}
    with MessageStore(store_dir, CONFIG) as store:
        for k in range(12):
            topic, qid = ("Orders", k % 2) if k % 3 else ("Events", 0)
            n = 40 + 9 * k
            bodies = [rng.bytes(int(x)) for x in rng.integers(0, 400, n)] if k % 4 else [rng.bytes(100)] * n
            props = [props_of(tags=f"t{k}", keys=f"k{i} kk{i}", uniq_key=f"{k:08X}{i:024X}") for i in range(n)]
            if k == 2:  # no properties, no tags, unicode, an empty UNIQ_KEY
                props = [
                    b"",
                    props_of(keys="only-keys"),
                    fmt.encode_properties({"名前": "värde ✓", "e": ""}),
                    b"UNIQ_KEY\x01\x02",
                ] * (n // 4)
                bodies = bodies[: len(props)]
            if k == 5:  # compressed bodies among plain ones
                flags = [fmt.FLAG_COMPRESSED if i % 3 == 0 else 0 for i in range(n)]
                plain = [b"payload %d " % i * (i % 50) for i in range(n)]
                put_raw(store, topic, qid, [zlib.compress(x) if f else x for x, f in zip(plain, flags)], props, flags)
                sent.setdefault((topic, qid), []).extend(plain)
                continue
            if k == 7:  # a name twice, not UTF-8, no value, a second \x01, long names, empty items
                odd = [
                    b"TAGS\x01a\x02TAGS\x01b\x02",
                    b"x\x01\xff\xfe\x02",
                    b"lonely\x02k\x01v\x01w\x02",
                    b"a_very_long_property_name_1\x01v\x02a_very_long_property_name_2\x01w\x02",
                    b"\x02\x02k\x01\x01v\x02",
                ]
                props = [odd[i % len(odd)] for i in range(n)]
            put_raw(store, topic, qid, bodies, props)
            sent.setdefault((topic, qid), []).extend(bodies)
    return sent


def scan(store_dir: str, **kw: int) -> pa.Table:
    batches = [b for sl in plan_scan(store_dir, None, ScanBounds()) for b in read_slice(store_dir, sl, **kw)]
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA)


def reference(store_dir: str) -> pa.Table:
    tables = []
    with StoreReader(store_dir) as reader:
        reader.commitlog.refresh()
        for sl in plan_scan(store_dir, None, ScanBounds()):
            cq = reader.consume_queue(sl.topic, sl.queue_id)
            cq.refresh()
            b = decode_batch(reader.commitlog, sl.topic, sl.queue_id, cq.entries(sl.start, sl.end - sl.start, sl.end))
            tables.append(per_row_reference(b))
    return pa.concat_tables(tables)


def test_columnar_batches_equal_the_per_row_decode(tmp_path) -> None:
    store_dir = str(tmp_path / "store")
    sent = write_varied(store_dir)
    assert len(os.listdir(os.path.join(store_dir, "commitlog"))) > 3  # batches cross segments
    want = reference(store_dir)
    for rows in (65536, 7):  # one batch per queue; batches of a few rows (fast and per-record paths mixed)
        got = scan(store_dir, batch_rows=rows)
        assert got.schema == ARROW_SCHEMA
        assert got.equals(want), [c for c in ARROW_SCHEMA.names if not got[c].equals(want[c])]
    for (topic, qid), bodies in sent.items():  # and the reference is what was sent
        rows = want.filter(
            pa.compute.and_(pa.compute.equal(want["topic"], topic), pa.compute.equal(want["queue_id"], qid))
        )
        assert rows["body"].to_pylist() == bodies
        assert rows["queue_offset"].to_pylist() == list(range(len(bodies)))
    assert want["msg_id"].null_count == 0
    empty_uniq = want.filter(pa.compute.equal(want["sys_flag"], 0)).to_pylist()
    for row in empty_uniq:
        if dict(row["properties"]).get("UNIQ_KEY") == "":  # an empty UNIQ_KEY: the offset id
            assert row["msg_id"] == ids.offset_msg_id(0, row["commitlog_offset"])
        if row["keys"] == "only-keys":
            assert row["properties"] == [("KEYS", "only-keys")] and row["tags"] is None
    assert sum(1 for row in empty_uniq if dict(row["properties"]).get("UNIQ_KEY") == "") == 58 // 4


def test_deleted_segments_are_skipped(tmp_path) -> None:
    store_dir = str(tmp_path / "store")
    write_varied(store_dir)
    full = scan(store_dir)
    first = sorted(os.listdir(os.path.join(store_dir, "commitlog")))[0]
    os.remove(os.path.join(store_dir, "commitlog", first))  # what cleanup does to an expired segment
    got = scan(store_dir)
    assert 0 < got.num_rows < full.num_rows
    assert pa.compute.min(got["commitlog_offset"]).as_py() >= 64 * 1024
    kept = full.filter(pa.compute.greater_equal(full["commitlog_offset"], 64 * 1024))
    assert got.sort_by("commitlog_offset").equals(kept.sort_by("commitlog_offset"))


def _record_at(store_dir: str, table: pa.Table, row: int) -> tuple[str, int]:
    """(commitlog file, position in it) of the body of `row`."""
    phys = table["commitlog_offset"][row].as_py()
    size = 64 * 1024
    return os.path.join(store_dir, "commitlog", fmt.offset_file_name(phys // size * size)), phys % size + fmt.OFF_BODY


def test_a_corrupt_body_mid_queue_names_the_record(tmp_path) -> None:
    store_dir = str(tmp_path / "store")
    with MessageStore(store_dir, CONFIG) as store:
        put_raw(store, "T", 0, [b"body %d" % i * 10 for i in range(200)], [props_of(tags="a")] * 200)
    table = scan(store_dir)
    path, pos = _record_at(store_dir, table, 123)
    with open(path, "r+b") as f:
        f.seek(pos + 3)
        byte = f.read(1)
        f.seek(pos + 3)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptRecordError) as e:
        scan(store_dir)
    phys = table["commitlog_offset"][123].as_py()
    assert f"T/0 queue offset 123: the record at commitlog offset {phys} fails its body CRC" in str(e.value)
    sl = QueueSlice("T", 0, 0, 123, 0)  # the records before it still read
    assert sum(b.num_rows for b in read_slice(store_dir, sl)) == 123


def test_a_zeroed_tail_gives_the_valid_prefix(tmp_path) -> None:
    store_dir = str(tmp_path / "store")
    with MessageStore(store_dir, CONFIG) as store:
        put_raw(store, "T", 0, [b"x" * 150] * 100, [props_of(tags="a")] * 100)
    table = scan(store_dir)
    path, pos = _record_at(store_dir, table, 90)
    with open(path, "r+b") as f:  # a crash lost the last pages: records 90.. are zeros, their entries remain
        f.seek(pos - fmt.OFF_BODY)
        f.write(bytes(os.path.getsize(path) - pos + fmt.OFF_BODY))
    got = scan(store_dir)
    assert got.equals(table.slice(0, 90))
