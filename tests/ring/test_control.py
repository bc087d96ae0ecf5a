"""Control-queue codecs and request/reply between processes."""
from __future__ import annotations

import multiprocessing as mp
import threading

import pytest
import sysv_ipc

from shmq.errors import BrokerGoneError, BrokerNotFoundError, ControlProtocolError, ControlTimeoutError
from shmq.ring import control
from shmq.ring.control import Admin, Attach, ControlQueue, Detach, Reply

ctx = mp.get_context("fork")


@pytest.mark.parametrize("req", [
    Attach(5, 1, 1234, 99, 65536, {"role": "producer", "group": "pg"}),
    Detach(2**31 - 1, 2),
    Admin(300, 3, "create_topic", {"topic": "Orders", "queues": 4}),
])
def test_request_roundtrip(req):
    assert control.decode_request(control.encode_request(req)) == req


def test_reply_roundtrip():
    reply = Reply(77, 9, False, {"error": "no such topic"})
    assert control.decode_reply(control.encode_reply(reply)) == reply


@pytest.mark.parametrize("data,reason", [
    (b"\x01\x01", "shorter"),
    (b"\x01\x02" + bytes(22) + b"{}", "version"),
    (b"\x09\x01" + bytes(22) + b"{}", "unknown control request op"),
    (b"\x01\x01" + bytes(22) + b"{nope", "not JSON"),
    (b"\x01\x01" + bytes(22) + b"[1]", "not a JSON object"),
    (b"\x01\x01" + bytes(22) + b"{}", "bad fields"),
])
def test_bad_requests(data, reason):
    with pytest.raises(ControlProtocolError, match=reason):
        control.decode_request(data)


def test_limits():
    with pytest.raises(ValueError):
        control.encode_request(Detach(1, 1))
    with pytest.raises(ValueError):
        control.encode_request(Admin(5, 1, "x", {"blob": "a" * 9000}))
    with pytest.raises(ControlProtocolError):
        control.decode_reply(control.encode_request(Detach(5, 1)))


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
            q.send_reply(Reply(req.client_id, req.req_id, True, {**req.args, "cmd": req.command}))
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
        q.send_reply(Reply(500, 1, True, {"old": True}))
        q.send_reply(Reply(500, 2, True, {"new": True}))
        assert q.recv_reply(500, 2, 1.0).body == {"new": True}
        with pytest.raises(ControlTimeoutError):
            q.call(Detach(500, 3), timeout=0.05)
        assert isinstance(q.recv_request(), Detach)
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
