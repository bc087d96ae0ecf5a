"""Control-queue codecs and request/reply between processes."""

from __future__ import annotations

import json
import multiprocessing as mp
import struct
import threading

import pytest
import sysv_ipc

from shmq.errors import BrokerGoneError, BrokerNotFoundError, ControlProtocolError, ControlTimeoutError
from shmq.ring import control
from shmq.ring.control import Admin, Attach, ControlQueue, Detach, Reply

ctx = mp.get_context("fork")


@pytest.mark.parametrize(
    "req",
    [
        Attach(5, 1, 1234, 99, 65536, {"role": "producer", "group": "pg"}),
        Detach(2**31 - 1, 2, 2**64 - 1),
        Admin(300, 3, "create_topic", {"topic": "Orders", "queues": 4}, 12345),
    ],
)
def test_request_roundtrip(req):
    assert control.decode_request(control.encode_request(req)) == req


def _decode(messages: list[bytes]) -> Reply:
    return control.decode_reply([control.decode_reply_chunk(m) for m in messages])


def test_reply_roundtrip():
    reply = Reply(77, 9, False, {"error": "no such topic"})
    assert _decode(control.encode_reply(reply)) == reply


def test_long_reply_in_chunks():
    reply = Reply(77, 9, True, {"topics": {f"T{i}": {"readQueueNums": i} for i in range(2000)}})
    messages = control.encode_reply(reply)
    assert len(messages) > 4 and all(len(m) <= control.MAX_MESSAGE for m in messages)
    assert _decode(messages) == reply
    with pytest.raises(ControlProtocolError, match="chunks of"):
        _decode(messages[1:])
    with pytest.raises(ControlProtocolError, match="out of order"):
        _decode([messages[0], messages[2], messages[1], *messages[3:]])
    with pytest.raises(ValueError, match="exceeds"):
        control.encode_reply(Reply(77, 9, True, {"x": "a" * control.MAX_REPLY_BYTES}))


def _request(op: int, body: dict, client_id: int = 300) -> bytes:
    return struct.pack("<BBHHHQQ", op, control.VERSION, 0, 0, 0, client_id, 1) + json.dumps(body).encode()


_ATTACH = {"pid": 1234, "alive_key": 99, "ring_bytes": 65536, "info": {"role": "producer"}}


@pytest.mark.parametrize(
    "data,reason",
    [
        (_request(control.OP_ATTACH, {**_ATTACH, "pid": 2**40}), "pid"),
        (_request(control.OP_ATTACH, {**_ATTACH, "pid": "1"}), "pid"),
        (_request(control.OP_ATTACH, {**_ATTACH, "alive_key": True}), "alive_key"),
        (_request(control.OP_ATTACH, {**_ATTACH, "ring_bytes": 1.5}), "ring_bytes"),
        (_request(control.OP_ATTACH, {**_ATTACH, "info": {"role": "admin"}}), "role"),
        (_request(control.OP_ATTACH, {**_ATTACH, "info": {"group": 7}}), "group"),
        (_request(control.OP_ATTACH, {**_ATTACH, "info": {"x": 1}}), "info"),
        (_request(control.OP_ATTACH, {**_ATTACH, "info": []}), "info"),
        (_request(control.OP_DETACH, {"secret": 2**70}), "secret"),
        (_request(control.OP_DETACH, {}, client_id=2**40), "client id"),
        (_request(control.OP_ADMIN, {"command": 5}), "command"),
        (_request(control.OP_ADMIN, {"command": "x" * 65}), "command"),
        (_request(control.OP_ADMIN, {"command": "list_topics", "args": [1]}), "args"),
        (_request(control.OP_ADMIN, {"command": "list_topics", "secret": -1}), "secret"),
    ],
)
def test_request_fields_checked(data, reason):
    with pytest.raises(ControlProtocolError, match=reason):
        control.decode_request(data)


@pytest.mark.parametrize(
    "data,reason",
    [
        (b"\x01\x02", "shorter"),
        (b"\x01\x01" + bytes(22) + b"{}", "version"),
        (_request(9, {}), "unknown control request op"),
        (_request(1, {})[:-2] + b"{nope", "not JSON"),
        (_request(1, {})[:-2] + b"[1]", "not a JSON object"),
        (_request(1, {}), "pid"),
    ],
)
def test_bad_requests(data, reason):
    with pytest.raises(ControlProtocolError, match=reason):
        control.decode_request(data)


def test_limits():
    with pytest.raises(ValueError):
        control.encode_request(Detach(1, 1))
    with pytest.raises(ValueError):
        control.encode_request(Admin(5, 1, "x", {"blob": "a" * 9000}))
    with pytest.raises(ControlProtocolError):
        control.decode_reply_chunk(control.encode_request(Detach(5, 1)))


def test_keys_and_ids(tmp_path):
    assert control.sysv_key(str(tmp_path), "control") == control.sysv_key(str(tmp_path) + "/.", "control")
    assert control.sysv_key(str(tmp_path), "control") != control.sysv_key(str(tmp_path), "alive")
    ids = {control.new_client_id() for _ in range(10)}
    assert len(ids) == 10 and all(2 <= i < 2**31 for i in ids)


def _client(key: int, n: int, out) -> None:
    q = ControlQueue.open(key)
    cid = control.new_client_id()
    for i in range(n):
        reply = q.call(Admin(cid, i, "echo", {"i": i}), timeout=5.0)
        assert reply.ok and reply.body == {"i": i, "cmd": "echo"}
    out.put(cid)


def test_request_reply_across_processes(store_dir):
    q = ControlQueue.create(control.sysv_key(store_dir, "control"))
    try:
        out = ctx.Queue()
        procs = [ctx.Process(target=_client, args=(q.key, 50, out)) for _ in range(3)]
        for p in procs:
            p.start()
        for _ in range(150):
            req = q.recv_request(timeout=5.0)
            assert isinstance(req, Admin)
            for m in control.encode_reply(Reply(req.client_id, req.req_id, True, {**req.args, "cmd": req.command})):
                assert q.try_send(m, req.client_id)
        for p in procs:
            p.join(10)
            assert p.exitcode == 0
        assert len({out.get(timeout=1) for _ in procs}) == 3
        assert q.recv_request(timeout=0) is None
    finally:
        q.remove()


def test_stale_replies_dropped_and_timeouts(store_dir):
    q = ControlQueue.create(control.sysv_key(store_dir, "control"))
    try:
        for i in (1, 2, 3):
            for m in control.encode_reply(Reply(500, i, True, {"n": i})):
                assert q.try_send(m, 500)
        assert q.recv_reply(500, 2, 1.0).body == {"n": 2}
        with pytest.raises(ControlTimeoutError):
            q.call(Detach(500, 4), timeout=0.05)  # drains the unread reply 3 before it sends
        assert isinstance(q.recv_request(), Detach)
        assert q.drain(500) == 0 and q.recv_request() is None
    finally:
        q.remove()


def test_full_queue_try_send_and_drain(store_dir):
    q = ControlQueue.create(control.sysv_key(store_dir, "control"))
    try:
        big = control.encode_reply(Reply(700, 1, True, {"x": "a" * 7000}))[0]
        sent = 0
        while q.try_send(big, 700):  # never blocks: False once the queue is full
            sent += 1
        assert sent >= 1
        assert q.drain(700) == sent and q.try_send(big, 701)
    finally:
        q.remove()


def test_malformed_message_is_consumed_and_reported(store_dir):
    q = ControlQueue.create(control.sysv_key(store_dir, "control"))
    try:
        sysv_ipc.MessageQueue(q.key).send(b"junk", type=1)
        with pytest.raises(ControlProtocolError):
            q.recv_request(timeout=1.0)
        assert q.recv_request() is None
    finally:
        q.remove()


def test_no_broker_and_broker_gone(store_dir):
    key = control.sysv_key(store_dir, "control")
    with pytest.raises(BrokerNotFoundError):
        ControlQueue.open(key)
    q = ControlQueue.create(key)
    client = ControlQueue.open(key)
    threading.Timer(0.05, q.remove).start()
    with pytest.raises(BrokerGoneError):
        client.recv_reply(600, 1, timeout=5.0)
