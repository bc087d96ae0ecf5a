import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.filter.tags import TagFilter
from shmq.model.message_ext import MessageExt
from shmq.store.read.columns import decode_batch, read_batch
from shmq.store.read.reader import EntryRange, StoreReader
from shmq.store.write.hooks import PutRequest
from tests.client.consumer.conftest import SMALL, delete_commitlog_head, put, put_many

# two tags with the same tags_code (crc32): the hash filter cannot tell them apart
COLLIDING = ("Tag29685295", "Tag32060020")


def test_header_dtype_is_the_record_header():
    assert fmt.HEADER_DTYPE.itemsize == fmt.OFF_BODY
    buf = fmt.encode_message(
        "T",
        b"abc",
        queue_id=3,
        flag=9,
        sysflag=1,
        born_timestamp=123,
        born_host=77,
        reconsume_times=2,
        prepared_tx_offset=5,
    )
    h = np.frombuffer(buf[: fmt.OFF_BODY], fmt.HEADER_DTYPE)[0]
    assert (
        int(h["total_size"]),
        int(h["magic"]),
        int(h["queue_id"]),
        int(h["flag"]),
        int(h["sysflag"]),
        int(h["born_timestamp"]),
        int(h["born_host"]),
        int(h["reconsume_times"]),
        int(h["prepared_tx_offset"]),
        int(h["body_len"]),
    ) == (len(buf), fmt.MESSAGE_MAGIC, 3, 9, 1, 123, 77, 2, 5, 3)


def batch_all(reader, topic, qid, store, expression=None, step=1000):
    mx = store.get_max_offset_in_queue(topic, qid)
    return read_batch(reader, topic, qid, 0, step, mx, expression)


def test_columns_agree_with_decode_record(store, reader):
    bodies = put_many(store, "T", 2, 200, body_size=300)
    b = batch_all(reader, "T", 2, store)
    assert len(b) == 200 and b.next_offset == 200 and b.missing == 0
    assert b.queue_offset.tolist() == list(range(200))
    assert len(b.buffers) > 1  # 60 KiB of records over 64 KiB segments: the batch spans segments
    for i in range(200):
        rec = store.commitlog.read(int(b.commit_log_offset[i]))
        assert (
            rec.queue_offset,
            rec.total_size,
            rec.store_timestamp,
            rec.born_timestamp,
            rec.sysflag,
            rec.reconsume_times,
            rec.store_host,
        ) == (
            int(b.queue_offset[i]),
            int(b.size[i]),
            int(b.store_timestamp[i]),
            int(b.born_timestamp[i]),
            int(b.sysflag[i]),
            int(b.reconsume_times[i]),
            int(b.store_host[i]),
        )
        assert bytes(b.body(i)) == bodies[i]
        assert b.properties(i) == rec.properties
    assert [bytes(v) for v in b.bodies()] == bodies
    assert all(v.readonly for v in b.bodies())


def test_tag_filter_by_hash_then_exact(store, reader):
    tags = ["TagA", "TagB", None, COLLIDING[0], COLLIDING[1]]
    put_many(store, "T", 0, 100, tags=tags)
    by_tag = {t: [i for i in range(100) if tags[i % len(tags)] == t] for t in tags}
    for expr, want in [
        ("TagA", by_tag["TagA"]),
        ("TagA || TagB", sorted(by_tag["TagA"] + by_tag["TagB"])),
        (COLLIDING[0], by_tag[COLLIDING[0]]),
        (COLLIDING[1], by_tag[COLLIDING[1]]),
        ("*", list(range(100))),
        ("Nope", []),
    ]:
        b = batch_all(reader, "T", 0, store, TagFilter(expr))
        assert b.queue_offset.tolist() == want, expr
        assert b.next_offset == 100
        assert [bytes(v).split(b":")[0] for v in b.bodies()] == [str(i).encode() for i in want]


def test_records_whose_properties_do_not_start_with_tags(store, reader):
    odd = {"a": "1", "TAGS": "TagA"}  # a producer other than shmq's: TAGS not first
    store.put(PutRequest.of_records("T", 0, [fmt.encode_message("T", b"odd", properties=odd)]))
    put(store, "T", 0, b"normal", tags="TagA")
    store.put(PutRequest.of_records("T", 0, [fmt.encode_message("T", b"other", properties={"a": "1", "TAGS": "TagB"})]))
    store.put(
        PutRequest.of_records(
            "T", 0, [fmt.encode_message("T", b"collide", properties={"a": "1", "TAGS": COLLIDING[1]})]
        )
    )
    b = batch_all(reader, "T", 0, store, TagFilter("TagA"))
    assert [bytes(v) for v in b.bodies()] == [b"odd", b"normal"]
    b = batch_all(reader, "T", 0, store, TagFilter(COLLIDING[0]))
    assert len(b) == 0


def test_untagged_and_empty_properties(store, reader):
    store.put(PutRequest.of_records("T", 0, [fmt.encode_message("T", b"bare")]))
    put(store, "T", 0, b"tagged", tags="X")
    assert [bytes(v) for v in batch_all(reader, "T", 0, store).bodies()] == [b"bare", b"tagged"]
    assert [bytes(v) for v in batch_all(reader, "T", 0, store, TagFilter("X")).bodies()] == [b"tagged"]
    m = batch_all(reader, "T", 0, store).to_message_ext(0)
    assert m.tags is None and m.keys is None and m.properties == {}
    assert m.msg_id == m.offset_msg_id
    assert batch_all(reader, "T", 0, store).messages()[0] == m


def test_compressed_bodies_are_decompressed_on_access(store, reader):
    raw = b"compress me " * 500
    put(store, "T", 0, zlib.compress(raw), tags="A", sysflag=fmt.FLAG_COMPRESSED)
    put(store, "T", 0, b"plain", tags="A")
    b = batch_all(reader, "T", 0, store, TagFilter("A"))
    assert bytes(b.body(0)) == raw and bytes(b.body(1)) == b"plain"
    assert [bytes(v) for v in b.bodies()] == [raw, b"plain"]
    assert b.to_message_ext(0).body == raw
    assert int(b.body_len[0]) < len(raw)
    assert b.messages() == [b.to_message_ext(0), b.to_message_ext(1)]


def test_to_message_ext(store, reader):
    res = put(
        store,
        "Orders",
        3,
        b"payload",
        tags="TagA",
        keys="k1 k2",
        uniq_key="AB" * 16,
        user={"a": "1"},
        born_timestamp=1234,
        reconsume_times=2,
    )
    b = batch_all(reader, "Orders", 3, store)
    m = b.to_message_ext(0)
    assert m == MessageExt(
        topic="Orders",
        body=b"payload",
        tags="TagA",
        keys="k1 k2",
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AB" * 16, "a": "1"},
        queue_id=3,
        queue_offset=0,
        commit_log_offset=res.wrote_offset,
        born_timestamp=1234,
        store_timestamp=res.store_timestamp,
        reconsume_times=2,
        msg_id="AB" * 16,
        offset_msg_id=ids.offset_msg_id(0, res.wrote_offset),
        store_size=res.wrote_bytes,
        sysflag=0,
    )
    assert m.key_list == ["k1", "k2"]
    assert MessageExt.from_record(store.commitlog.read(res.wrote_offset)) == m
    assert b.messages() == [m]


class PropertyIs:
    type = "TEST"

    def __init__(self, key, value):
        self.key, self.value = key, value

    def match(self, properties):
        return properties.get(self.key) == self.value


def test_other_expressions_are_evaluated_per_record(store, reader):
    for i in range(10):
        put(store, "T", 0, b"%d" % i, tags="A", user={"n": str(i % 3)})
    b = batch_all(reader, "T", 0, store, PropertyIs("n", "1"))
    assert [bytes(v) for v in b.bodies()] == [b"1", b"4", b"7"]


def test_small_ranges_and_offsets(store, reader):
    put_many(store, "T", 0, 100)
    mx = store.get_max_offset_in_queue("T", 0)
    seen, off = [], 0
    while off < mx:
        b = read_batch(reader, "T", 0, off, 7, mx, TagFilter("TagB"))
        seen += b.queue_offset.tolist()
        off = b.next_offset
    assert seen == list(range(1, 100, 2))
    empty = read_batch(reader, "T", 0, mx, 32, mx)
    assert len(empty) == 0 and empty.next_offset == mx and empty.bodies() == []


def test_entries_whose_records_were_cleaned_are_counted_missing(store, reader):
    put_many(store, "T", 0, 400, body_size=500)
    mx = store.get_max_offset_in_queue("T", 0)
    stale = EntryRange(0, reader.consume_queue("T", 0).entries(0, 400, mx).entries.copy())
    new_min = delete_commitlog_head(store, 2)
    reader.refresh()
    b = decode_batch(reader.commitlog, "T", 0, stale)
    gone = int((stale.entries["offset"] < new_min).sum())
    assert gone > 0 and b.missing == gone and len(b) == 400 - gone
    assert b.queue_offset[0] == gone and b.next_offset == 400


def test_an_entry_pointing_at_no_record_is_an_error(store, reader):
    put_many(store, "T", 0, 3)
    entries = reader.consume_queue("T", 0).entries(0, 3, 3).entries.copy()
    entries["offset"][1] += 1
    with pytest.raises(fmt.CorruptRecordError):
        decode_batch(reader.commitlog, "T", 0, EntryRange(0, entries))


tag_st = st.sampled_from(["A", "B", "CC", None, COLLIDING[0], COLLIDING[1]])
record_st = st.tuples(st.binary(max_size=3000), tag_st, st.booleans())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(record_st, min_size=1, max_size=60),
    st.sampled_from(["*", "A", "A || B", "CC || " + COLLIDING[1], COLLIDING[0]]),
    st.integers(1, 70),
)
def test_batches_equal_naive_decode(tmp_path_factory, records, expr, step):
    from shmq.store.message_store import MessageStore

    d = str(tmp_path_factory.mktemp("s"))
    with MessageStore(d, dict(SMALL)) as store, StoreReader(d) as reader:
        for body, tag, tags_first in records:
            props = {"TAGS": tag} if tag else {}
            if not tags_first:
                props = {"u": "v", **props}
            store.put(PutRequest.of_records("T", 0, [fmt.encode_message("T", body, properties=props)]))
        f = TagFilter(expr)
        want = [(i, body) for i, (body, tag, _) in enumerate(records) if f.exact(tag)]
        got, off = [], 0
        while off < len(records):
            b = read_batch(reader, "T", 0, off, step, len(records), f)
            got += list(zip(b.queue_offset.tolist(), [bytes(v) for v in b.bodies()]))
            off = b.next_offset
        assert got == want
