"""`shmq admin msg`'s pure parts: times, body previews, rows."""

from __future__ import annotations

import argparse

import pytest

from shmq.cli.admin.msg import body_preview, max_num, message_detail, message_row, parse_time
from shmq.client.msg_lookup import CONSUMED, NOT_CONSUME_YET, MessageTrack, tracks_of
from shmq.model.message_ext import MessageExt


def test_times_in_epoch_ms_or_iso() -> None:
    assert parse_time("1700000000123") == 1700000000123
    assert parse_time("2023-11-14T22:13:20.123+00:00") == 1700000000123
    with pytest.raises(argparse.ArgumentTypeError):
        parse_time("yesterday")


def test_preview_text_hex_and_cut_characters() -> None:
    assert body_preview(b"hello") == {"encoding": "utf-8", "text": "hello", "size": 5, "truncated": False}
    assert body_preview(b"\xff\x00\x01")["text"] == "ff 00 01"
    cut = body_preview("é".encode() * 200, limit=255)  # 255 bytes end inside a 2-byte character
    assert cut["encoding"] == "utf-8" and cut["text"] == "é" * 127 and cut["truncated"]
    assert len(body_preview(bytes(1000))["text"].split()) == 256


def test_tracks_consumed_when_the_offset_is_past_the_message() -> None:
    got = tracks_of([("b", 5), ("a", 6)], 5)
    assert got == [MessageTrack("a", CONSUMED, 6), MessageTrack("b", NOT_CONSUME_YET, 5)]


def test_rows_and_detail() -> None:
    m = MessageExt(
        "T",
        b"xyz",
        tags="A",
        keys="k1",
        properties={"UNIQ_KEY": "ID", "TAGS": "A", "KEYS": "k1"},
        queue_id=1,
        queue_offset=7,
        store_timestamp=1700000000000,
        msg_id="ID",
        offset_msg_id="O",
    )
    row = message_row(m)
    assert (row["msg_id"], row["queue_offset"], row["tags"], row["keys"], row["body_size"]) == ("ID", 7, "A", "k1", 3)
    d = message_detail(m, [MessageTrack("g", CONSUMED, 8)])
    assert d["headers"]["topic"] == "T" and d["properties"]["UNIQ_KEY"] == "ID"
    assert d["body"]["text"] == "xyz"
    assert d["consumers"] == [{"consumer_group": "g", "track_type": CONSUMED, "committed_offset": 8}]


def test_max_is_checked_as_the_option_it_is() -> None:
    assert max_num("1000") == 1000
    for bad in ("0", "1001", "-3", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"1\.\.1000"):
            max_num(bad)
