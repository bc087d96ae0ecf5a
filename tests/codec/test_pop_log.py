"""The pop log's records: round trip, and decoding that stops at the first record not sound."""

from __future__ import annotations

import numpy as np

from shmq.codec import pop_log as L


def _rows(*offsets: int) -> np.ndarray:
    rows = np.zeros(len(offsets), L.ROW)
    rows["queue_offset"] = offsets
    rows["token"] = [o + 100 for o in offsets]
    rows["flags"] = L.ROW_FIFO
    return rows


def _log() -> bytes:
    return L.MAGIC + b"".join(
        (
            L.encode(L.TOKEN, "", "", 0, 77),
            L.encode(L.CHECKPOINT, "wg", "Jobs", 3, 12, _rows(10, 11)),
            L.encode(L.SETTLE, "wg", "%RETRY%wg", 0, 0, L.settle_rows([5])),
        )
    )


def test_records_round_trip():
    d = L.decode(_log())
    assert d.problem is None and d.end == len(_log())
    tok, cp, st = d.records
    assert (tok.kind, tok.value) == (L.TOKEN, 77)
    assert (cp.kind, cp.group, cp.topic, cp.queue_id, cp.value) == (L.CHECKPOINT, "wg", "Jobs", 3, 12)
    assert cp.rows["queue_offset"].tolist() == [10, 11] and cp.rows["token"].tolist() == [110, 111]
    assert (st.kind, st.topic, st.rows["queue_offset"].tolist()) == (L.SETTLE, "%RETRY%wg", [5])
    assert all(len(L.encode(L.CHECKPOINT, "g", "t" * k, 0, 0)) % 8 == 0 for k in range(1, 20))


def test_a_torn_tail_ends_the_log_where_the_last_sound_record_ends():
    full = _log()
    last = len(L.encode(L.SETTLE, "wg", "%RETRY%wg", 0, 0, L.settle_rows([5])))
    for cut in (1, 7, 8, last - 1):
        d = L.decode(full[:-cut])
        assert len(d.records) == 2 and d.end == len(full) - last and d.problem, cut


def test_a_flipped_byte_fails_its_crc_and_keeps_the_records_before():
    data = bytearray(_log())
    first = len(L.MAGIC) + len(L.encode(L.TOKEN, "", "", 0, 77))
    data[first + 40] ^= 0xFF
    d = L.decode(bytes(data))
    assert len(d.records) == 1 and d.end == first and "CRC" in (d.problem or "")


def test_a_file_that_is_not_a_pop_log_has_no_records():
    assert L.decode(b"").records == [] and L.decode(b"").problem is None
    d = L.decode(b"NOTAPOPLOG" + bytes(64))
    assert d.records == [] and d.end == 0 and "magic" in (d.problem or "")
