"""Frame codecs: round trips for every frame kind, and garbage never raising anything but CorruptFrameError."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.errors import CorruptFrameError

u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
topics = st.from_regex(r"[a-zA-Z0-9_%|-]{1,127}", fullmatch=True)
names = st.from_regex(r"[a-zA-Z0-9_-]{0,60}", fullmatch=True)


@given(u64, i64, i32, st.integers(0, 2**32 - 1), i64, topics, st.lists(i64, max_size=20), st.binary(max_size=300))
def test_send_roundtrip(req_id, enq, qid, flags, tags, topic, keys, record):
    s = P.decode(P.SEND, P.encode_send(req_id, enq, qid, flags, tags, topic, keys, record))
    assert (s.req_id, s.enqueue_ns, s.queue_id, s.flags, s.tags_code, s.topic, s.key_hashes, bytes(s.record)) == (
        req_id,
        enq,
        qid,
        flags,
        tags,
        topic,
        keys,
        record,
    )


@given(u64, i64, i32, topics, st.lists(st.binary(max_size=50), min_size=1, max_size=10), st.data())
def test_send_batch_roundtrip(req_id, enq, qid, topic, bodies, data):
    props = [
        fmt.message_properties(tags=data.draw(st.sampled_from([None, "A"])), keys="k1 k2", uniq_key="U") for _ in bodies
    ]
    batch = fmt.encode_batch(topic, bodies, props)
    b = P.decode(P.SEND_BATCH, P.encode_send_batch(req_id, enq, qid, 0, topic, batch))
    assert (b.req_id, b.enqueue_ns, b.queue_id, b.topic) == (req_id, enq, qid, topic)
    assert b.batch.buf == batch.buf
    for name in ("starts", "tags_codes", "key_hashes", "key_records"):
        assert np.array_equal(getattr(b.batch, name), getattr(batch, name))


@given(u64, names, topics, st.integers(0, 0xFFFF), i64)
def test_commit_offset_roundtrip(req_id, group, topic, qid, offset):
    assert P.decode(P.COMMIT_OFFSET, P.encode_commit_offset(req_id, group, topic, qid, offset)) == P.CommitOffset(
        req_id, group, topic, qid, offset
    )


@pytest.mark.parametrize("qid", [-1, -(2**31), 0x10000, 2**31 - 1])
def test_commit_offset_of_a_queue_id_out_of_range_is_corrupt(qid):
    with pytest.raises(CorruptFrameError, match="queue id"):
        P.decode(P.COMMIT_OFFSET, P.encode_commit_offset(1, "g", "T", qid, 0))


@given(u64, topics, i32, i64, st.integers(0, 2**32 - 1))
def test_pull_wait_roundtrip(req_id, topic, qid, offset, timeout):
    assert P.decode(P.PULL_WAIT, P.encode_pull_wait(req_id, topic, qid, offset, timeout)) == P.PullWait(
        req_id, topic, qid, offset, timeout
    )


@given(u64, st.integers(0, 3), i32, i64, i64, i64, i64, st.lists(i64, min_size=1, max_size=20))
def test_send_result_roundtrip(req_id, status, qid, qoff, phys, ts, host, phys_all):
    count = len(phys_all)
    r = P.SendResultFrame(req_id, status, qid, qoff, phys, ts, host, count, phys_all if count > 1 else None)
    assert P.decode(P.SEND_RESULT, P.encode_send_result(r)) == r


@given(u64, st.integers(0, 65535), st.text(max_size=200), i64, st.booleans())
def test_error_wake_heartbeat_roundtrip(req_id, code, message, max_offset, timed_out):
    assert P.decode(P.ERROR, P.encode_error(req_id, code, message)) == P.Error(req_id, code, message)
    assert P.decode(P.WAKE, P.encode_wake(req_id, max_offset, timed_out)) == P.Wake(req_id, max_offset, timed_out)
    assert P.decode(P.HEARTBEAT, P.encode_heartbeat(req_id)) == req_id


def _valid_frames():
    batch = fmt.encode_batch("T", [b"a", b"bc"], [fmt.message_properties(keys="k")] * 2)
    return [
        (P.SEND, P.encode_send(1, 2, 3, 0, 4, "T", [5, 6], fmt.encode_message("T", b"x"))),
        (P.SEND_BATCH, P.encode_send_batch(1, 2, 3, 0, "T", batch)),
        (P.COMMIT_OFFSET, P.encode_commit_offset(1, "g", "T", 0, 9)),
        (P.PULL_WAIT, P.encode_pull_wait(1, "T", 0, 9, 100)),
        (P.HEARTBEAT, P.encode_heartbeat(1)),
        (P.SEND_RESULT, P.encode_send_result(P.SendResultFrame(1, 0, 0, 0, 0, 0, 0, 2, [1, 2]))),
        (P.ERROR, P.encode_error(1, 2, "busy")),
        (P.WAKE, P.encode_wake(1, 2, True)),
        (P.SEND_MULTI, P.encode_send_multi(1, 2, 0, ["T", "U"], np.array([0, 1]), np.array([-1, 2]), batch)),
        (
            P.SEND_MULTI_RESULT,
            P.encode_send_multi_result(
                P.SendMultiResultFrame(
                    1, 2, 3, np.array([0, -16]), np.array([1, 2]), np.array([3, -1]), np.array([4, -1]), "no"
                )
            ),
        ),
    ]


@settings(max_examples=300)
@given(st.sampled_from([*sorted(P.REQUEST_KINDS | P.RESPONSE_KINDS), 99]), st.binary(max_size=400))
def test_garbage_raises_only_corrupt_frame(kind, payload):
    try:
        P.decode(kind, payload)
    except CorruptFrameError:
        pass


@settings(max_examples=300)
@given(st.sampled_from(range(10)), st.data())
def test_mutated_frames_raise_only_corrupt_frame(which, data):
    kind, frame = _valid_frames()[which]
    buf = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    for payload in (bytes(buf), bytes(buf[:cut]), memoryview(buf)[:cut]):
        try:
            P.decode(kind, payload)
        except CorruptFrameError:
            pass


@pytest.mark.parametrize("kind,frame", _valid_frames())
def test_truncated_frames_are_corrupt(kind, frame):
    for cut in range(len(frame)):
        with pytest.raises(CorruptFrameError):
            P.decode(kind, frame[:cut])


def test_batch_key_records_out_of_range():
    batch = fmt.encode_batch("T", [b"a"], [fmt.message_properties(keys="k")])
    batch.key_records[:] = 5
    with pytest.raises(CorruptFrameError, match="key record"):
        P.decode(P.SEND_BATCH, P.encode_send_batch(1, 2, 3, 0, "T", batch))


def test_packed_send_results_decode_like_single_ones():
    import struct

    from shmq.ring.framing import frame_bytes

    req_ids, flags = [5, 6, 7, 8], [0, P.FLAG_ONEWAY, 0, 0]
    a = P.pack_send_results(req_ids, flags, 2, 100, [1000, 1100, 1200, 1300], 77, 99)
    assert len(a) == 3 and P.RESULT_FRAME.itemsize == frame_bytes(
        len(P.encode_send_result(P.SendResultFrame(1, 0, 0, 0, 0, 0, 0)))
    )
    raw = a.tobytes()
    size = P.RESULT_FRAME.itemsize
    got = []
    for i in range(3):
        length, kind = struct.unpack_from("<II", raw, i * size)
        assert kind == P.SEND_RESULT
        got.append(P.decode_send_result(raw[i * size + 8 : i * size + 8 + length]))
    assert [
        (r.req_id, r.queue_offset, r.phys_offset, r.queue_id, r.store_timestamp, r.store_host, r.count, r.status)
        for r in got
    ] == [
        (5, 100, 1000, 2, 77, 99, 1, P.SEND_OK),
        (7, 102, 1200, 2, 77, 99, 1, P.SEND_OK),
        (8, 103, 1300, 2, 77, 99, 1, P.SEND_OK),
    ]
    assert P.pack_send_results([1], [P.FLAG_ONEWAY], 0, 0, [0], 0, 0) is None


def test_send_multi_round_trip_and_malformed_frames():
    from shmq.codec.frames import (
        SEND_OK,
        SendMultiResultFrame,
        decode_send_multi,
        decode_send_multi_result,
        encode_send_multi,
        encode_send_multi_result,
    )

    parts = [fmt.encode_batch(t, [b], [{"KEYS": "k"}]) for t, b in (("A", b"1"), ("Bee", b"22"), ("A", b"333"))]
    batch = fmt.concat_batches(parts)
    raw = encode_send_multi(7, 99, 0, ["A", "Bee"], np.array([0, 1, 0]), np.array([-1, 3, 2]), batch)
    m = decode_send_multi(raw)
    assert (m.req_id, m.enqueue_ns, m.topics) == (7, 99, ["A", "Bee"])
    assert m.topic_idx.tolist() == [0, 1, 0] and m.queue_ids.tolist() == [-1, 3, 2]
    assert bytes(m.batch.buf) == batch.buf and m.batch.starts.tolist() == batch.starts.tolist()
    assert m.batch.key_records.tolist() == batch.key_records.tolist()
    for bad in (
        raw[:20],
        raw[:-1],
        raw.replace(b"\x01A\x03Bee", b"\x01A\x09Bee"),  # a name running past the table
        encode_send_multi(7, 99, 0, ["A"], np.array([0, 1, 0]), np.array([-1, 3, 2]), batch),
        encode_send_multi(7, 99, 0, ["A", "Bee"], np.array([0, 1, 0]), np.array([-2, 3, 2]), batch),
    ):
        with pytest.raises(CorruptFrameError):
            decode_send_multi(bad)
    r = SendMultiResultFrame(
        7,
        123,
        9,
        np.array([SEND_OK, -16, SEND_OK]),
        np.array([0, 3, 2]),
        np.array([5, -1, 6]),
        np.array([100, -1, 300]),
        "not writable",
    )
    back = decode_send_multi_result(encode_send_multi_result(r))
    assert (back.req_id, back.store_timestamp, back.store_host, back.message) == (7, 123, 9, "not writable")
    assert back.statuses.tolist() == [0, -16, 0] and back.phys_offsets.tolist() == [100, -1, 300]
