"""Pure ring framing: writes, reads, wraps, batches, reservations and corrupt input."""

from __future__ import annotations

import struct
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq.errors import CorruptFrameError
from shmq.ring.framing import (
    CONSUMER,
    FIRST_USER_KIND,
    HEADER_BYTES,
    KIND_WRAP,
    PRODUCER,
    Ring,
    RingLayout,
    frame_bytes,
)


def make(capacity: int = 256) -> tuple[Ring, Ring, np.ndarray]:
    buf = np.zeros(RingLayout(capacity).size, np.uint8)
    producer = Ring.create(memoryview(buf), RingLayout(capacity))
    return producer, Ring(memoryview(buf)), buf


def test_layout_rejects_bad_capacity():
    with pytest.raises(ValueError):
        RingLayout(100)
    with pytest.raises(ValueError):
        RingLayout(32)
    assert RingLayout(1024).size == HEADER_BYTES + 1024
    assert RingLayout(1024).max_payload == 504


def test_write_read_release():
    p, c, _ = make()
    assert c.read() is None
    assert p.try_write(16, b"hello")
    assert p.used() == frame_bytes(5) == 16
    kind, view = c.read()
    assert (kind, bytes(view)) == (16, b"hello")
    assert c.read() is None
    assert p.free_space() == 256 - 16
    c.release()
    assert p.free_space() == 256 and c.used() == 0


def test_full_ring_refuses_then_accepts_after_release():
    p, c, _ = make(256)
    written = p.write_batch([(20, bytes([i]) * 24) for i in range(100)])
    assert written == 256 // 32
    assert not p.try_write(20, b"x")
    frames = c.read_batch(3)
    assert [bytes(v) for _, v in frames] == [bytes([i]) * 24 for i in range(3)]
    assert not p.try_write(20, b"x")
    c.release()
    assert p.try_write(20, b"x")


def test_wrap_marker_skips_rest_of_area():
    p, c, buf = make(256)
    assert p.write_batch([(16, b"a" * 56)] * 3) == 3
    c.read_batch(3)
    c.release()
    assert p.try_write(17, b"b" * 100)
    off = HEADER_BYTES + 3 * frame_bytes(56)
    assert struct.unpack_from("<II", buf, off) == (0, KIND_WRAP)
    kind, view = c.read()
    assert (kind, bytes(view)) == (17, b"b" * 100)
    assert c.read() is None


def test_payload_limits():
    p, _, _ = make(256)
    with pytest.raises(ValueError):
        p.try_write(16, b"x" * 121)
    with pytest.raises(ValueError):
        p.try_write(KIND_WRAP, b"")
    assert p.try_write(16, b"x" * 120)


def test_reserve_commit_zero_copy_and_shrink():
    p, c, _ = make()
    view = p.reserve(30, 64)
    view[:5] = b"abcde"
    assert c.read() is None
    with pytest.raises(RuntimeError):
        p.reserve(30, 8)
    p.commit(5)
    assert p.used() == frame_bytes(5)
    kind, got = c.read()
    assert (kind, bytes(got)) == (30, b"abcde")
    with pytest.raises(RuntimeError):
        p.commit()


def test_parked_flags():
    p, c, _ = make()
    assert not p.parked(CONSUMER) and not p.parked(PRODUCER)
    c.set_parked(CONSUMER, True)
    assert p.parked(CONSUMER) and not p.parked(PRODUCER)
    c.set_parked(CONSUMER, False)
    assert not p.parked(CONSUMER)


def test_attach_to_unformatted_buffer_is_corrupt():
    with pytest.raises(CorruptFrameError, match="magic"):
        Ring(memoryview(np.zeros(RingLayout(256).size, np.uint8)))


def _raw_frame(buf: np.ndarray, at: int, length: int, kind: int, head: int) -> None:
    struct.pack_into("<II", buf, HEADER_BYTES + at, length, kind)
    buf[64:72].view("<u8")[0] = head


@pytest.mark.parametrize(
    "length,kind,head,reason",
    [
        (8, 0, 16, "unknown frame kind 0"),
        (8, 5, 16, "unknown frame kind 5"),
        (8, 0x10000, 16, "unknown frame kind"),
        (1000, 16, 256, "overruns the end of the data area"),
        (100, 16, 16, "overruns the written area"),
        (4, KIND_WRAP, 256, "wrap marker with length"),
        (8, 16, 12, "not 8-byte aligned"),
        (8, 16, 1024, "more than a ring ahead"),
    ],
)
def test_corrupt_frames_raise(length, kind, head, reason):
    _, c, buf = make(256)
    _raw_frame(buf, 0, length, kind, head)
    with pytest.raises(CorruptFrameError, match=reason):
        c.read()


def test_head_going_backwards_is_corrupt():
    p, c, buf = make(256)
    p.try_write(16, b"x" * 8)
    c.read()
    buf[64:72].view("<u8")[0] = 0
    with pytest.raises(CorruptFrameError, match="backwards"):
        c.read()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 130)),
        st.tuples(st.just("batch"), st.lists(st.integers(0, 60), max_size=6)),
        st.tuples(st.just("reserve"), st.integers(0, 120), st.integers(0, 120)),
        st.tuples(st.just("read"), st.integers(1, 5)),
        st.tuples(
            st.just("release"),
        ),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_matches_reference_queue(ops):
    """Any interleaving of writes and reads delivers exactly the written frames, in order,
    and frames read stay intact until released."""
    p, c, _ = make(256)
    pending: deque[tuple[int, bytes]] = deque()
    unreleased: list[tuple[int, bytes, memoryview]] = []
    counter = 0

    def payload(n: int) -> tuple[int, bytes]:
        nonlocal counter
        counter += 1
        return FIRST_USER_KIND + counter % 50, bytes((counter + i) % 251 for i in range(n))

    for op in ops:
        if op[0] == "write":
            kind, data = payload(op[1])
            empty = c.used() == 0 and not unreleased
            if op[1] > p.layout.max_payload:
                with pytest.raises(ValueError):
                    p.try_write(kind, data)
                continue
            ok = p.try_write(kind, data)
            assert ok or not empty
            if ok:
                pending.append((kind, data))
        elif op[0] == "batch":
            frames = [payload(n) for n in op[1]]
            done = p.write_batch(frames)
            pending.extend(frames[:done])
        elif op[0] == "reserve":
            kind, data = payload(op[2])
            view = p.reserve(kind, max(op[1], op[2]))
            if view is not None:
                view[: len(data)] = data
                p.commit(len(data))
                pending.append((kind, data))
        elif op[0] == "read":
            for kind, view in c.read_batch(op[1]):
                want = pending.popleft()
                assert (kind, bytes(view)) == want
                unreleased.append((kind, want[1], view))
        else:
            for _, data, view in unreleased:
                assert bytes(view) == data
            unreleased.clear()
            c.release()
        assert 0 <= p.used() <= 256
        assert p.free_space() == 256 - p.used()
    for kind, view in c.read_batch(1000):
        assert (kind, bytes(view)) == pending.popleft()
    assert not pending


def _packed(kind: int, payload_len: int, count: int, seed: int) -> bytes:
    size = frame_bytes(payload_len)
    out = bytearray()
    for i in range(count):
        frame = bytearray(size)
        struct.pack_into("<II", frame, 0, payload_len, kind)
        frame[8 : 8 + payload_len] = bytes((seed + i + j) % 251 for j in range(payload_len))
        out += frame
    return bytes(out)


def test_write_packed_wraps_and_stops_when_full():
    p, c, _ = make(256)
    assert p.write_batch([(16, b"a" * 40)]) == 1  # 48 bytes: packed frames of 64 then wrap at 240
    c.read_batch(1)
    c.release()
    frames = _packed(17, 56, 10, 0)
    assert p.write_packed(frames, 64) == 3  # 48..240 holds 3, the 4th needs a wrap and room
    got = c.read_batch(10)
    assert [(k, bytes(v)) for k, v in got] == [(17, frames[i * 64 + 8 : (i + 1) * 64]) for i in range(3)]
    c.release()
    assert p.write_packed(frames[192:], 64) == 3  # wrap marker (16 bytes), then 3 frames from offset 0
    got = c.read_batch(10)
    assert [bytes(v) for _, v in got] == [frames[i * 64 + 8 : (i + 1) * 64] for i in range(3, 6)]
    with pytest.raises(ValueError):
        p.write_packed(frames, 60)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("packed"), st.integers(0, 6), st.sampled_from([0, 8, 24, 56])),
            st.tuples(st.just("write"), st.integers(0, 60)),
            st.tuples(st.just("read"), st.integers(1, 8)),
        ),
        max_size=80,
    )
)
def test_write_packed_matches_reference_queue(ops):
    p, c, _ = make(256)
    pending: deque[tuple[int, bytes]] = deque()
    for seed, op in enumerate(ops, 1):
        if op[0] == "packed":
            _, count, n = op
            frames = _packed(20, n, count, seed)
            size = frame_bytes(n)
            done = p.write_packed(frames, size)
            pending.extend((20, frames[i * size + 8 : i * size + 8 + n]) for i in range(done))
        elif op[0] == "write":
            data = bytes((seed + j) % 251 for j in range(op[1]))
            if p.try_write(21, data):
                pending.append((21, data))
        else:
            for kind, view in c.read_batch(op[1]):
                assert (kind, bytes(view)) == pending.popleft()
            c.release()
        assert 0 <= p.used() <= 256
    for kind, view in c.read_batch(1000):
        assert (kind, bytes(view)) == pending.popleft()
    assert not pending
