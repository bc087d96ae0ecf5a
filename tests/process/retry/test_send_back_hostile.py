"""SEND_BACK frames a buggy or hostile client writes: each gets an error, the broker serves on."""

from __future__ import annotations

import struct
import time

import shmq
from shmq import Message, Producer
from shmq.codec import frames as P
from shmq.codec.send_back import encode_send_back
from shmq.store.read.reader import CommitLogReader
from tests.process.broker.rawclient import RawClient
from tests.waiting import wait_for

from .test_retry import _queue


def _answer(c: RawClient, kind: int, payload: bytes):
    c.write(kind, payload)
    return c.read()


def test_hostile_send_backs_are_answered_with_errors(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        good = p.send(Message("T", b"x"))
        parked = p.send(Message("T", b"later", delay_level=18))  # stored under SCHEDULE_TOPIC_XXXX
        c = RawClient(broker_name)
        reader = CommitLogReader(store_dir)
        try:
            phys = good.phys_offsets[0]
            size = reader.record(phys).total_size
            kind, r = _answer(c, P.SEND_BACK, encode_send_back(6, 0, "g", 16, [phys], [size], [0]))
            assert kind == P.SEND_MULTI_RESULT and r.statuses.tolist() == [P.SEND_OK]  # the honest one
            parked_phys = parked.phys_offsets[0]
            cases = [
                ([phys + 1], [size]),  # inside a record
                ([phys], [size + 8]),  # the right offset, a wrong size
                ([-5], [100]),  # before the log
                ([1 << 40], [100]),  # past the log
                ([phys], [1 << 30]),  # a size no record has
                ([parked_phys], [reader.record(parked_phys).total_size]),  # a system topic's record
            ]
            for offsets, sizes in cases:
                kind, r = _answer(c, P.SEND_BACK, encode_send_back(7, 0, "g", 16, offsets, sizes, [0]))
                assert kind == P.SEND_MULTI_RESULT and r.req_id == 7, (offsets, sizes, r)
                assert r.statuses.tolist() == [-P.MESSAGE_ILLEGAL] and r.message, (offsets, sizes)
            # a bad group, garbage and a truncated frame: ERROR for the frame, the channel stays
            bad_group = encode_send_back(8, 0, "no group!", 16, [phys], [size], [0])
            for req_id, payload in (
                (8, bad_group),
                (9, struct.pack("<Q", 9) + b"\xff" * 40),
                (10, encode_send_back(10, 0, "g", 16, [phys], [size], [0])[:-3]),
            ):
                kind, r = _answer(c, P.SEND_BACK, payload)
                assert kind == P.ERROR and r.req_id == req_id and r.code == P.MESSAGE_ILLEGAL, r
            # the broker is fine: it stores and serves as before
            assert p.send(Message("T", b"after")).status is shmq.SendStatus.SEND_OK
            assert wait_for(lambda: len(_queue(broker_name, "%RETRY%g")) == 1, 30)
            time.sleep(0.3)  # level 18 is 360 ms: the parked one was never copied
            assert [m.body for m in _queue(broker_name, "%RETRY%g")] == [b"x"]  # only the honest one
        finally:
            reader.files.close()
            c.close()
