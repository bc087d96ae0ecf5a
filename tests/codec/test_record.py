import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.errors import BadPropertiesError, BadTopicError, MessageTooLargeError

topics = st.from_regex(r"[%|a-zA-Z0-9_-]{1,127}", fullmatch=True)
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=30)
props = st.dictionaries(prop_text.filter(bool), prop_text, max_size=6)


@given(
    topic=topics,
    body=st.binary(max_size=2048),
    properties=props,
    queue_id=st.integers(0, 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    sysflag=st.sampled_from([0, 1, 2, 4, 8, 12]),
    born=st.integers(0, 2**62),
    host=st.integers(-(2**63), 2**63 - 1),
    reconsume=st.integers(0, 1000),
)
def test_record_round_trip(topic, body, properties, queue_id, flag, sysflag, born, host, reconsume):
    raw = fmt.encode_message(
        topic,
        body,
        queue_id=queue_id,
        flag=flag,
        properties=properties,
        sysflag=sysflag,
        born_timestamp=born,
        born_host=host,
        reconsume_times=reconsume,
    )
    assert len(raw) == fmt.record_size(len(body), len(topic), len(fmt.encode_properties(properties)))
    rec = fmt.decode_record(raw)
    assert (rec.topic, bytes(rec.body), rec.properties) == (topic, body, properties)
    assert (rec.queue_id, rec.flag, rec.sysflag, rec.born_timestamp, rec.born_host, rec.reconsume_times) == (
        queue_id,
        flag,
        sysflag,
        born,
        host,
        reconsume,
    )
    assert rec.body_crc == fmt.body_crc(body) and rec.total_size == len(raw)
    assert rec.physical_offset == 0 and rec.store_timestamp == 0  # the store's to fill


def test_field_offsets_follow_rocketmq_order():
    raw = fmt.encode_message(
        "T", b"abc", queue_id=7, flag=9, born_timestamp=11, born_host=13, reconsume_times=3, prepared_tx_offset=17
    )
    assert struct.unpack_from(">i", raw, fmt.OFF_TOTALSIZE)[0] == 91 + 3 + 1
    assert struct.unpack_from(">I", raw, fmt.OFF_MAGIC)[0] == 0xDAA320A7
    assert struct.unpack_from(">i", raw, fmt.OFF_QUEUEID)[0] == 7
    assert struct.unpack_from(">i", raw, fmt.OFF_FLAG)[0] == 9
    assert struct.unpack_from(">q", raw, fmt.OFF_BORNTIMESTAMP)[0] == 11
    assert struct.unpack_from(">q", raw, fmt.OFF_BORNHOST)[0] == 13
    assert struct.unpack_from(">i", raw, fmt.OFF_RECONSUMETIMES)[0] == 3
    assert struct.unpack_from(">q", raw, fmt.OFF_PREPAREDTXOFFSET)[0] == 17
    assert raw[fmt.OFF_BODY : fmt.OFF_BODY + 3] == b"abc" and raw[fmt.OFF_BODY + 3] == 1


@pytest.mark.parametrize("topic", ["", "a b", "x" * 128, "t/opic", "中文", None])
def test_bad_topics(topic):
    with pytest.raises(BadTopicError):
        fmt.encode_message(topic, b"")


def test_limits():
    with pytest.raises(MessageTooLargeError):
        fmt.encode_message("T", b"x" * (fmt.MAX_MESSAGE_SIZE + 1))
    fmt.encode_message("T", b"x" * fmt.MAX_MESSAGE_SIZE)
    with pytest.raises(BadPropertiesError):
        fmt.encode_message("T", b"", properties={"k": "v" * 40000})
    with pytest.raises(BadPropertiesError):
        fmt.encode_message("T", b"", properties={"k": "a\x01b"})
    with pytest.raises(TypeError):
        fmt.encode_message("T", "not bytes")


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=40))
def test_walk_batch_and_gather(bodies):
    batch = fmt.encode_batch("Topic", bodies)
    starts = fmt.walk_batch(batch.buf)
    assert np.array_equal(starts, batch.starts)
    src = np.frombuffer(batch.buf, np.uint8)
    assert fmt.gather_i32(src, starts + fmt.OFF_BODYLEN).tolist() == [len(b) for b in bodies]
    dst = src.copy()
    fmt.patch_owned_fields(dst, starts, 7, 99, -5, 2**40, 1000)
    assert fmt.gather_i64(dst, starts + fmt.OFF_QUEUEOFFSET).tolist() == [2**40 + i for i in range(len(bodies))]
    assert fmt.gather_i64(dst, starts + fmt.OFF_PHYSICALOFFSET).tolist() == (starts + 1000).tolist()
    for s in starts.tolist():
        rec = fmt.decode_record(dst, s)
        assert (rec.queue_id, rec.store_timestamp, rec.store_host) == (7, 99, -5)
    fields = fmt.gather_header_fields(src, starts)
    assert fields[:, 0].tolist() == np.diff(np.append(starts, len(src))).tolist()
    assert (fields[:, 1] == fmt.MESSAGE_MAGIC).all()


def test_check_record_classifies():
    raw = bytearray(fmt.encode_message("T", b"hello"))
    struct.pack_into(">q", raw, fmt.OFF_STORETIMESTAMP, 123)
    struct.pack_into(">q", raw, fmt.OFF_PHYSICALOFFSET, 1000)
    buf = bytearray(1000) + raw + bytearray(64)
    assert fmt.check_record(buf, 1000, len(buf), 1000) == (fmt.RECORD_OK, len(raw))
    assert fmt.check_record(buf, 1000, len(buf), 1008)[0] == fmt.RECORD_END  # offset field disagrees
    buf[1000 + fmt.OFF_BODY] ^= 0xFF
    assert fmt.check_record(buf, 1000, len(buf), 1000) == (fmt.RECORD_BAD_CRC, len(raw))
    assert fmt.check_record(buf, 1000, len(buf), 1000, verify_crc=False)[0] == fmt.RECORD_OK
    blank = bytearray(64)
    fmt.BLANK.pack_into(blank, 0, 64, fmt.BLANK_MAGIC)
    assert fmt.check_record(blank, 0, 64, 0) == (fmt.RECORD_BLANK, 64)
    assert fmt.check_record(bytearray(64), 0, 64, 0)[0] == fmt.RECORD_END


def test_hashes_are_stable_and_distinct():
    assert fmt.tags_code(None) == 0 and fmt.tags_code("TagA") == fmt.tags_code("TagA") != fmt.tags_code("TagB")
    assert 0 <= fmt.index_key_hash("T", "k") < 2**31
    assert fmt.index_key_hash("T", "k") != fmt.index_key_hash("U", "k")


@given(props)
def test_properties_round_trip(p):
    assert fmt.decode_properties(fmt.encode_properties(p)) == p


def _stored(body: bytes, phys: int) -> bytearray:
    raw = bytearray(fmt.encode_message("T", body))
    struct.pack_into(">q", raw, fmt.OFF_STORETIMESTAMP, 1)
    struct.pack_into(">q", raw, fmt.OFF_PHYSICALOFFSET, phys)
    return raw


def test_scan_keeps_bad_crc_record_only_when_followed_by_a_good_one():
    a = _stored(b"first", 0)
    b = _stored(b"second", len(a))
    b[fmt.OFF_BODYCRC : fmt.OFF_BODYCRC + 4] = bytes([0, 0, 0, 1])  # a client's wrong CRC
    c = _stored(b"third", len(a) + len(b))
    buf = a + b + c + bytearray(32)
    got = [(st, p) for st, p, _ in fmt.scan_segment(buf, 0, len(buf), 0, verify_crc=True)]
    assert got == [
        (fmt.RECORD_OK, 0),
        (fmt.RECORD_BAD_CRC, len(a)),
        (fmt.RECORD_OK, len(a) + len(b)),
        (fmt.RECORD_END, len(buf) - 32),
    ]
    tail = a + b + bytearray(32)  # the bad record is last: a torn tail, cut there
    got = [(st, p) for st, p, _ in fmt.scan_segment(tail, 0, len(tail), 0, verify_crc=True)]
    assert got == [(fmt.RECORD_OK, 0), (fmt.RECORD_END, len(a))]


@given(
    st.lists(st.tuples(st.binary(max_size=200), props), min_size=1, max_size=20),
    st.integers(0, 2**40),
    st.integers(-(2**63), 2**63 - 1),
)
def test_pack_records_equals_encode_message(items, born, host):
    bodies = [b for b, _ in items]
    encoded_props = [fmt.encode_properties(p) for _, p in items]
    buf, starts = fmt.pack_records(
        b"Topic",
        bodies,
        encoded_props,
        [fmt.body_crc(b) for b in bodies],
        [7] * len(items),
        [fmt.FLAG_COMPRESSED] * len(items),
        born,
        host,
    )
    singles = [
        fmt.encode_message(
            "Topic", b, properties=p, flag=7, sysflag=fmt.FLAG_COMPRESSED, born_timestamp=born, born_host=host
        )
        for b, p in items
    ]
    assert buf == b"".join(singles)
    assert starts.tolist() == np.cumsum([0] + [len(r) for r in singles[:-1]]).tolist()


def test_uniq_key_blocks_continue_the_sequence():
    gen = ids.UniqKeyGenerator()
    keys = [gen.next()] + [b.decode() for b in gen.next_block(5).tolist()] + [gen.next()]
    assert [int(k[-8:], 16) for k in keys] == list(range(1, 8)) and len(set(keys)) == 7
    assert all(len(k) == 32 and k == k.upper() and k[:24] == keys[0][:24] for k in keys)


@given(st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=20), st.integers(-(2**63), 2**63 - 1))
def test_offset_msg_ids_match_the_single_form(offsets, host):
    assert ids.offset_msg_ids(host, np.array(offsets, np.int64)) == [ids.offset_msg_id(host, o) for o in offsets]


@given(
    st.binary(max_size=40),
    st.integers(1, 12).flatmap(lambda k: st.lists(st.binary(min_size=k, max_size=k), min_size=1, max_size=20)),
)
def test_crc32_of_variants_equals_zlib(prefix, suffixes):
    first = zlib.crc32(prefix + suffixes[0])
    rows = np.frombuffer(b"".join(suffixes), np.uint8).reshape(len(suffixes), -1)
    assert fmt.crc32_of_variants(first, rows).tolist() == [zlib.crc32(prefix + s) for s in suffixes]


def _decodes_or_refuses(buf, pos: int = 0) -> None:
    """decode_record answers a record or CorruptRecordError; nothing else (struct.error, IndexError)."""
    try:
        rec = fmt.decode_record(buf, pos)
    except fmt.CorruptRecordError:
        return
    assert fmt.record_size(len(rec.body), len(rec.topic.encode("ascii", "replace")), 0) <= rec.total_size


@settings(max_examples=300)
@given(st.binary(max_size=300), st.integers(0, 320))
def test_decode_record_of_any_bytes_is_a_record_or_corrupt_record_error(raw, pos):
    _decodes_or_refuses(raw, pos)


@settings(max_examples=300)
@given(st.binary(max_size=100), props, st.data())
def test_decode_record_of_a_record_with_one_field_changed_or_cut(body, p, data):
    raw = bytearray(fmt.encode_message("Topic", body, properties=p))
    field, code = data.draw(st.sampled_from([(fmt.OFF_TOTALSIZE, ">i"), (fmt.OFF_BODYLEN, ">i")]))
    struct.pack_into(code, raw, field, data.draw(st.integers(-(2**31), 2**31 - 1)))
    _decodes_or_refuses(raw)
    _decodes_or_refuses(bytes(raw[: data.draw(st.integers(0, len(raw)))]))


def test_decode_record_names_the_damaged_length():
    raw = bytearray(fmt.encode_message("Topic", b"hello"))
    struct.pack_into(">i", raw, fmt.OFF_BODYLEN, 0x70000000)
    with pytest.raises(fmt.CorruptRecordError, match="BODYLEN 1879048192 does not fit TOTALSIZE"):
        fmt.decode_record(raw)
    with pytest.raises(fmt.CorruptRecordError, match="shorter than a record header"):
        fmt.decode_record(raw[:40])


def test_scan_skips_damage_with_a_valid_record_after_it_and_ends_at_a_torn_tail():
    a = _stored(b"first", 0)
    b = _stored(b"second", len(a))
    c = _stored(b"third", len(a) + len(b))
    for field, value in ((fmt.OFF_BODYLEN, 0x70000000), (fmt.OFF_TOTALSIZE, 7), (fmt.OFF_MAGIC, 0)):
        bad = bytearray(b)
        struct.pack_into(">i", bad, field, value)
        buf = a + bad + c + bytearray(32)
        got = [(st_, p, n) for st_, p, n in fmt.scan_segment(buf, 0, len(buf), 0, verify_crc=True)]
        assert got == [
            (fmt.RECORD_OK, 0, len(a)),
            (fmt.RECORD_DAMAGED, len(a), len(b)),
            (fmt.RECORD_OK, len(a) + len(b), len(c)),
            (fmt.RECORD_END, len(buf) - 32, 0),
        ], field
        tail = a + bad + bytearray(64)  # nothing valid after it: a torn tail
        assert [s for s, _, _ in fmt.scan_segment(tail, 0, len(tail), 0, verify_crc=True)] == [
            fmt.RECORD_OK,
            fmt.RECORD_END,
        ]
    moved = _stored(b"second", len(a) + 5)  # a valid record, but not at its own offset: never a resync point
    buf = a + moved + bytearray(32)
    assert fmt.resync(buf, len(a), len(buf), 0) == -1


def test_a_changed_totalsize_pointing_at_a_later_record_skips_only_the_damaged_one():
    """Equal-size records, one TOTALSIZE grown by exactly one record: the damaged range is that
    record alone, the record its size now points past is kept."""
    recs = []
    for _i in range(4):
        recs.append(_stored(b"x" * 37, sum(map(len, recs))))
    size = len(recs[0])
    bad = bytearray(recs[1])
    struct.pack_into(">i", bad, fmt.OFF_TOTALSIZE, 2 * size)
    buf = recs[0] + bad + recs[2] + recs[3] + bytearray(16)
    got = [(st_, p) for st_, p, _ in fmt.scan_segment(buf, 0, len(buf), 0, verify_crc=True)]
    assert got == [
        (fmt.RECORD_OK, 0),
        (fmt.RECORD_DAMAGED, size),
        (fmt.RECORD_OK, 2 * size),
        (fmt.RECORD_OK, 3 * size),
        (fmt.RECORD_END, 4 * size),
    ]
