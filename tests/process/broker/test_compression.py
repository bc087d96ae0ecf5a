"""Compressed, skipped and uncompressed bodies round-trip through a real broker unchanged."""

from __future__ import annotations

import os

import shmq
from shmq import Message, Producer
from shmq.codec import record as fmt
from shmq.model.message_ext import MessageExt

from .conftest import open_store

TEXT = b"order shipped to warehouse 7, invoice paid " * 1500  # ~64 KiB, shrinks ~100x
RANDOM = os.urandom(64 * 1024)  # does not shrink


def test_bodies_round_trip_with_compression_on_off_and_skipped(store_dir, broker_name, config):
    with (
        shmq.Broker(store_dir, broker_name, config),
        Producer("pg", broker=broker_name) as on,
        Producer("pg2", broker=broker_name, compress_msg_body_over_howmuch=None) as off,
    ):
        sent = {
            "text-on": on.send(Message("Z", TEXT)),
            "random-on": on.send(Message("Z", RANDOM)),
            "text-off": off.send(Message("Z", TEXT)),
            "batch-on": on.send_batch([Message("Z", TEXT), Message("Z", RANDOM)]),
        }
    store = open_store(store_dir, config)
    try:

        def stored(phys: int):
            rec = store.look_message_by_offset(phys)
            return rec.sysflag & fmt.FLAG_COMPRESSED, MessageExt.from_record(rec).body

        assert stored(sent["text-on"].phys_offsets[0]) == (fmt.FLAG_COMPRESSED, TEXT)
        assert stored(sent["random-on"].phys_offsets[0]) == (0, RANDOM)  # skipped: would not shrink
        assert stored(sent["text-off"].phys_offsets[0]) == (0, TEXT)
        text_b, random_b = sent["batch-on"].phys_offsets
        assert stored(text_b) == (fmt.FLAG_COMPRESSED, TEXT) and stored(random_b) == (0, RANDOM)
    finally:
        store.shutdown()
