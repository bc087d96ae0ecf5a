"""The producer's batch encoder must produce exactly what encoding each message alone produces."""

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq.client.producer.encoder import MessageEncoder
from shmq.codec import record as fmt
from shmq.errors import BadTopicError, MessageTooLargeError
from shmq.model.message import Message, MessageBatch

words = st.text("abcXYZ09_-", min_size=1, max_size=6)
messages = st.builds(
    Message,
    topic=st.just("Orders"),
    body=st.one_of(st.binary(max_size=40), st.just(b"z" * 300), st.binary(min_size=300, max_size=300)),
    tags=st.one_of(st.none(), st.sampled_from(["TagA", "TagB"])),
    keys=st.one_of(st.none(), st.lists(words, max_size=3).map(" ".join)),
    properties=st.one_of(st.none(), st.dictionaries(words, words, max_size=2)),
    flag=st.integers(0, 5),
)


def _records(buf: bytes, starts: np.ndarray) -> list[fmt.StoredRecord]:
    return [fmt.decode_record(buf, int(s)) for s in starts]


@settings(max_examples=150, deadline=None)
@given(st.lists(messages, min_size=1, max_size=12), st.booleans())
def test_batch_equals_one_by_one(msgs, uniform):
    if uniform:
        msgs = [Message("Orders", m.body, tags="TagA", keys="k1 k2") for m in msgs]
    enc = MessageEncoder(compress_over=200).encode_batch(msgs, born_timestamp=1234, born_host=99)
    b = enc.batch
    uniq = [u.decode() for u in enc.uniq_keys.tolist()]
    assert len(set(uniq)) == len(msgs) and enc.msg_ids == ",".join(uniq)
    records = _records(b.buf, b.starts)
    assert sum(r.total_size for r in records) == len(b.buf)
    for i, (m, r) in enumerate(zip(msgs, records)):
        body = zlib.decompress(r.body) if r.sysflag & fmt.FLAG_COMPRESSED else bytes(r.body)
        assert body == m.body
        assert (r.sysflag & fmt.FLAG_COMPRESSED) == (len(m.body) > 200 and len(zlib.compress(m.body, 5)) < len(m.body))
        alone = fmt.encode_message(
            "Orders",
            bytes(r.body),
            properties=m.build_properties(uniq[i]),
            flag=m.flag,
            sysflag=r.sysflag,
            born_timestamp=1234,
            born_host=99,
        )
        assert bytes(b.buf[b.starts[i] : b.starts[i] + r.total_size]) == alone
        assert b.tags_codes[i] == fmt.tags_code(m.tags)
        assert b.key_hashes[b.key_records == i].tolist() == fmt.record_key_hashes("Orders", uniq[i], m.keys)
    assert (np.diff(b.key_records) >= 0).all()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["Orders", "Pay", "X"]), messages), min_size=1, max_size=12))
def test_mixed_topics_equal_one_by_one(pairs):
    """A SEND_MULTI's records (auto_batch's small groups of many topics) are byte for byte what
    each message encodes to alone, with its topic's tag code and index key hashes."""
    msgs = [Message(t, m.body, m.tags, m.keys, m.properties, m.flag) for t, m in pairs]
    enc = MessageEncoder(compress_over=200).encode_mixed(msgs, born_timestamp=1234, born_host=99)
    b = enc.batch
    assert len(set(enc.uniq_keys)) == len(msgs)
    assert [enc.topics_b[k].decode() for k in enc.topic_idx.tolist()] == [m.topic for m in msgs]
    records = _records(b.buf, b.starts)
    for i, (m, r) in enumerate(zip(msgs, records)):
        alone = fmt.encode_message(
            m.topic,
            bytes(r.body),
            properties=m.build_properties(enc.uniq_keys[i]),
            flag=m.flag,
            sysflag=r.sysflag,
            born_timestamp=1234,
            born_host=99,
        )
        assert bytes(b.buf[b.starts[i] : b.starts[i] + r.total_size]) == alone
        assert b.tags_codes[i] == fmt.tags_code(m.tags)
        assert b.key_hashes[b.key_records == i].tolist() == fmt.record_key_hashes(m.topic, enc.uniq_keys[i], m.keys)


def test_single_encode_matches_the_record_layout():
    enc = MessageEncoder()
    e = enc.encode(Message("T", b"hello", tags="TagA", keys="a b", properties={"x": "1"}))
    buf = bytearray(e.record_len)
    fmt.pack_message_into(buf, 0, e.topic_b, e.body, e.props_b, e.crc)
    r = fmt.decode_record(buf)
    assert r.properties == {"TAGS": "TagA", "KEYS": "a b", "UNIQ_KEY": e.uniq, "x": "1"}
    assert e.key_hashes == fmt.record_key_hashes("T", e.uniq, "a b")


@pytest.mark.parametrize(
    "msgs, error",
    [
        ([], ValueError),
        ([Message("A", b"1"), Message("B", b"2")], ValueError),
        ([Message("A", b"1"), "not a message"], TypeError),
        ([Message("A", "text body")], TypeError),
        ([Message("A", b"1", delay_level=2)], ValueError),
        ([Message("bad topic!", b"1")], BadTopicError),
        ([Message("A", b"x" * 101)], MessageTooLargeError),
    ],
)
def test_bad_batches_are_refused_with_a_clear_error(msgs, error):
    with pytest.raises(error):
        MessageEncoder(max_message_size=100, compress_over=1000).encode_batch(msgs, 0, 0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.binary(max_size=30), min_size=1, max_size=10),
    st.sampled_from([None, "TagA"]),
    st.one_of(st.none(), words, st.lists(st.one_of(st.none(), words), min_size=10, max_size=10)),
    st.one_of(st.none(), st.dictionaries(words, words, max_size=2)),
)
def test_message_batch_equals_the_same_messages_as_a_list(bodies, tags, keys, props):
    per_keys = keys[: len(bodies)] if isinstance(keys, list) else [keys] * len(bodies)
    columns = MessageBatch(
        "Orders", bodies, tags=tags, keys=per_keys if isinstance(keys, list) else keys, properties=props, flag=3
    )
    listed = [Message("Orders", b, tags=tags, keys=k, properties=props, flag=3) for b, k in zip(bodies, per_keys)]
    a = MessageEncoder().encode_batch(columns, 5, 6)
    b = MessageEncoder().encode_batch(listed, 5, 6)
    uniq_a, uniq_b = a.uniq_keys.tolist(), b.uniq_keys.tolist()
    assert a.batch.buf.replace(uniq_a[0][:24], b"") == b.batch.buf.replace(uniq_b[0][:24], b"")
    assert a.batch.tags_codes.tolist() == b.batch.tags_codes.tolist()
    assert a.batch.key_records.tolist() == b.batch.key_records.tolist()


def test_message_batch_with_wrong_number_of_keys_is_refused():
    with pytest.raises(ValueError, match="2 bodies but 1 keys"):
        MessageEncoder().encode_batch(MessageBatch("T", [b"a", b"b"], keys=["k"]), 0, 0)


class _SameUniq:
    """A UNIQ_KEY source that gives the same id to both encoders compared."""

    def __init__(self, uniq: str) -> None:
        self.uniq = uniq

    def next(self) -> str:
        return self.uniq


plain_messages = st.builds(
    Message,
    topic=st.sampled_from(["Orders", "T%1"]),
    body=st.one_of(st.binary(max_size=40), st.binary(min_size=300, max_size=300)),
    tags=st.one_of(st.none(), st.just(""), st.sampled_from(["TagA", "TagB"])),
    keys=st.one_of(st.none(), st.just(""), st.lists(words, max_size=3).map(" ".join)),
    properties=st.one_of(st.none(), st.just({}), st.dictionaries(words, words, max_size=2)),
    flag=st.integers(0, 5),
    delay_level=st.sampled_from([0, 0, 3]),
)


@settings(max_examples=200, deadline=None)
@given(plain_messages)
def test_encode_equals_the_general_path(m):
    """``encode`` takes a shortcut for the usual message; every field it gives is the general path's."""
    enc = MessageEncoder(compress_over=200)
    enc.uniq = _SameUniq("0A1B2C3D4E5F60718293A4B5C6D7E8F9")  # type: ignore[assignment]
    assert enc.encode(m) == enc._encode_any(m)


def test_encode_plain_refuses_as_the_general_path():
    enc = MessageEncoder()
    with pytest.raises(BadTopicError):
        enc.encode(Message("bad topic", b"x"))
    long_keys = " ".join(f"k{i:05d}" for i in range(6000))
    with pytest.raises(fmt.BadPropertiesError):
        enc.encode(Message("Orders", b"x", keys=long_keys))
    with pytest.raises(fmt.BadPropertiesError):
        enc.encode(Message("Orders", b"x", tags="a\x01b"))
