"""END_TRANSACTION / CHECK_TRANSACTION codecs: round trips, and nothing but CorruptFrameError
out of any bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from shmq.codec import record as fmt
from shmq.codec.transaction_frames import (
    CheckTransaction,
    EndTransaction,
    decode_check_transaction,
    decode_end_transaction,
    encode_check_transaction,
    encode_end_transaction,
)
from shmq.errors import CorruptFrameError


def test_round_trips():
    e = EndTransaction(7, 4096, 12, 1, fmt.TRANSACTION_ROLLBACK, True, "ABC123")
    assert decode_end_transaction(encode_end_transaction(e)) == e
    rec = fmt.encode_message("RMQ_SYS_TRANS_HALF_TOPIC", b"body")
    c = decode_check_transaction(encode_check_transaction(CheckTransaction(0, 4096, 12, 3, rec)))
    assert (c.req_id, c.half_phys_offset, c.half_queue_offset, c.check_times, bytes(c.record)) == (0, 4096, 12, 3, rec)


def test_bad_fields_are_refused():
    good = encode_end_transaction(EndTransaction(7, 1, 2, 0, fmt.TRANSACTION_COMMIT, False, "id"))
    for bad, why in (
        (good[:10], "shorter"),
        (good + b"x", "fields say"),
        (good[:28] + b"\x05" + good[29:], "type"),
        (good[:29] + b"\x02" + good[30:], "from_check"),
        (good[:-2] + b"\xff\xfe", "ASCII"),
    ):
        with pytest.raises(CorruptFrameError, match=why):
            decode_end_transaction(bad)
    with pytest.raises(ValueError):
        encode_end_transaction(EndTransaction(7, 1, 2, 0, fmt.TRANSACTION_COMMIT, False, "x" * 129))
    with pytest.raises(CorruptFrameError):
        decode_check_transaction(encode_check_transaction(CheckTransaction(0, 1, 2, 3, b"abc"))[:-1])


@given(hs.binary(max_size=80))
def test_any_bytes_decode_or_raise_corrupt_frame(data):
    for decode in (decode_end_transaction, decode_check_transaction):
        try:
            decode(data)
        except CorruptFrameError:
            pass
