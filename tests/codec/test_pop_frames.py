"""POP, ACK, CHANGE_INVISIBLE and their answers: every field survives a round trip, and a frame a
buggy or hostile client wrote is refused with CorruptFrameError, never another exception."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from shmq.codec import pop_frames as F
from shmq.errors import CorruptFrameError


def test_pop_round_trip_and_bounds() -> None:
    raw = F.encode_pop(7, 123, "wg", 15_000, 5_000, 32, F.FLAG_FIFO, 16)
    assert F.decode_pop(raw) == F.Pop(7, 123, "wg", 15_000, 5_000, 32, F.FLAG_FIFO, 16)
    for kwargs, reason in (
        ({"invisible_ms": 0}, "invisible time 0"),
        ({"invisible_ms": F.MAX_INVISIBLE_MS + 1}, "invisible time"),
        ({"max_nums": 0}, "asks for 0"),
        ({"max_nums": F.MAX_POP_NUMS + 1}, "asks for"),
        ({"await_ms": F.MAX_AWAIT_MS + 1}, "await time"),
        ({"max_attempts": 0}, "attempts 0"),
        ({"flags": 0x8}, "unknown bits"),
    ):
        args = {"invisible_ms": 1000, "await_ms": 0, "max_nums": 1, "flags": 0, "max_attempts": 16, **kwargs}
        with pytest.raises(CorruptFrameError, match=reason):
            F.decode_pop(F.encode_pop(1, 0, "wg", **args))


def test_pop_result_round_trip() -> None:
    cols = [np.arange(3, dtype=np.int64) * k for k in range(1, 8)]
    cols[0] = np.array([0, 1, 0], np.int64)
    r = F.PopResult(9, 1000, 15_000, ["Jobs", "%RETRY%wg"], *cols)
    back = F.decode_pop_result(F.encode_pop_result(r))
    assert back.topics == ["Jobs", "%RETRY%wg"] and back.req_id == 9 and back.pop_time_ms == 1000
    for a, b in zip(back[4:], r[4:]):
        assert a.tolist() == b.tolist()
    empty = F.decode_pop_result(F.encode_pop_result(F.empty_pop_result(3, 5, 6)))
    assert len(empty.tokens) == 0 and empty.topics == []
    rows = F.encode_pop_result_rows(9, 1000, 15_000, r.topics, np.column_stack(cols))
    assert rows == F.encode_pop_result(r), "the broker's table encoding is the same frame"
    none = F.encode_pop_result_rows(3, 5, 6, [], np.zeros((0, 7), np.int64))
    assert none == F.encode_pop_result(F.empty_pop_result(3, 5, 6))
    with pytest.raises(ValueError, match="not"):
        F.encode_pop_result_rows(3, 5, 6, [], np.zeros((2, 6), np.int64))


def test_a_negative_topic_index_is_refused() -> None:
    ack = bytearray(F.encode_receipts(1, 2, "wg", ["A"], [0], [3], [10], [100]))
    ack[-32:-24] = (-1).to_bytes(8, "little", signed=True)  # the topic index column (one receipt)
    with pytest.raises(CorruptFrameError, match="topic index"):
        F.decode_receipts(bytes(ack), False)


def test_receipts_round_trip_for_ack_and_change() -> None:
    ack = F.decode_receipts(F.encode_receipts(1, 2, "wg", ["A", "B"], [1, 0], [3, 4], [10, 11], [100, 101]), False)
    assert ack.topics == ["A", "B"] and ack.tokens.tolist() == [100, 101] and ack.invisible_ms is None
    ch = F.decode_receipts(F.encode_receipts(1, 2, "wg", ["A"], [0], [0], [5], [6], [60_000]), True)
    assert ch.invisible_ms is not None and ch.invisible_ms.tolist() == [60_000]
    res = F.ReceiptResult(4, np.array([0, F.RECEIPT_STALE]), np.array([77, 0]), "receipt is stale")
    back = F.decode_receipt_result(F.encode_receipt_result(res))
    assert back.statuses.tolist() == [0, 2] and back.tokens.tolist() == [77, 0] and back.message == "receipt is stale"


@pytest.mark.parametrize(
    "kind, payload",
    [
        ("pop", b"\x00" * 8),
        ("pop", F.encode_pop(1, 0, "wg", 1000, 0, 1)[:-8]),
        ("pop", F.encode_pop(1, 0, "wg", 1000, 0, 1) + b"\x00" * 8),
        ("pop", struct.pack("<QqqIHHHH4x", 1, 0, 1000, 0, 1, 0, 16, 0)),
        ("result", F.encode_pop_result(F.empty_pop_result(1, 0, 0))[:10]),
        ("ack", F.encode_receipts(1, 2, "wg", ["A"], [0], [0], [5], [6])[:-1]),
        ("ack", F.encode_receipts(1, 2, "wg", ["A"], [3], [0], [5], [6])),
        ("change", F.encode_receipts(1, 2, "wg", ["A"], [0], [0], [5], [6])),
        ("ack", F.encode_receipts(1, 2, "wg", ["A"], [0], [0], [5], [6]).replace(b"wg", b"w\xff", 1)),
    ],
)
def test_malformed_frames_are_refused(kind: str, payload: bytes) -> None:
    decode = {
        "pop": F.decode_pop,
        "result": F.decode_pop_result,
        "ack": lambda p: F.decode_receipts(p, False),
        "change": lambda p: F.decode_receipts(p, True),
    }[kind]
    with pytest.raises(CorruptFrameError):
        decode(payload)


def test_random_bytes_never_raise_anything_but_corrupt_frame() -> None:
    rng = np.random.default_rng(5)
    good = [
        F.encode_pop(1, 0, "wg", 1000, 0, 1),
        F.encode_receipts(1, 2, "wg", ["A"], [0], [0], [5], [6]),
        F.encode_pop_result(F.PopResult(1, 0, 0, ["A"], *[np.zeros(2, np.int64)] * 7)),
    ]
    decoders = [F.decode_pop, lambda p: F.decode_receipts(p, False), F.decode_pop_result]
    for _ in range(2000):
        i = int(rng.integers(3))
        raw = bytearray(good[i])
        for _ in range(int(rng.integers(1, 4))):
            raw[int(rng.integers(len(raw)))] = int(rng.integers(256))
        try:
            decoders[i](bytes(raw[: int(rng.integers(len(raw) + 1))]))
        except CorruptFrameError:
            pass
