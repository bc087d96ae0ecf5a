"""The control plane: attach / detach / admin requests over one SysV message queue.

Clients send requests with message type 1 (the broker); the broker answers with message
type = the client's id (ids are >= 2), so each client receives only its own replies, and a
request id lets it drop replies to requests it already gave up on.

The queue key is a stable hash of the store directory's real path (``sysv_key``), not
``ftok``: ftok keeps only the low bits of the inode plus 8 bits of id, so two stores can
collide, and it changes when the directory is recreated. Any process that knows the store
path can compute the key.

Wire format (little-endian): ``u8 op, u8 version, u16 status, u32 reserved, u64 client id,
u64 request id`` then a UTF-8 JSON object. A message is at most ``MAX_MESSAGE`` bytes (the
kernel's default msgmax).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Union

import sysv_ipc

from shmq.errors import BrokerGoneError, BrokerNotFoundError, ControlProtocolError, ControlTimeoutError
from shmq.ring.shm import MODE

VERSION = 1
MAX_MESSAGE = 8192
BROKER_TYPE = 1
OP_ATTACH = 1
OP_DETACH = 2
OP_ADMIN = 3
OP_REPLY = 0x80
STATUS_OK = 0
STATUS_ERROR = 1
_HEAD = struct.Struct("<BBHIQQ")
_POLL_MIN = 20e-6
_POLL_MAX = 2e-3
_ids = itertools.count(1)


def sysv_key(store_dir: str, what: str) -> int:
    """Stable SysV IPC key (1..2**31-1) for object ``what`` of the store at ``store_dir``."""
    path = os.path.realpath(store_dir)
    digest = hashlib.blake2b(f"shmq\0{path}\0{what}".encode(), digest_size=4).digest()
    return (int.from_bytes(digest, "little") & 0x7FFFFFFF) or 1


def new_client_id() -> int:
    """An id no other live process uses: pid (22 bits) above an 8-bit per-process counter.

    Message types are C ints in sysv_ipc, so ids stay below 2**31; the counter wraps after
    256 clients in one process, and the broker refuses an id that is still attached.
    """
    return (os.getpid() << 8) | (next(_ids) & 0xFF)


@dataclass(frozen=True)
class Attach:
    """Ask for a channel; ``alive_key`` is the client's liveness semaphore."""

    client_id: int
    req_id: int
    pid: int
    alive_key: int
    ring_bytes: int
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Detach:
    """Give the channel back (clean shutdown)."""

    client_id: int
    req_id: int


@dataclass(frozen=True)
class Admin:
    """An admin command (create topic, list groups, ...) with JSON arguments."""

    client_id: int
    req_id: int
    command: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """The broker's answer to request ``req_id``; ``body`` holds results or an error message."""

    client_id: int
    req_id: int
    ok: bool
    body: dict[str, Any] = field(default_factory=dict)


Request = Union[Attach, Detach, Admin]


def _pack(op: int, status: int, client_id: int, req_id: int, body: dict[str, Any]) -> bytes:
    if not 2 <= client_id < 2**31:
        raise ValueError(f"client id must be in 2..2**31-1, got {client_id}")
    data = _HEAD.pack(op, VERSION, status, 0, client_id, req_id) + json.dumps(body, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"control message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    return data


def _unpack(data: bytes) -> tuple[int, int, int, int, dict[str, Any]]:
    if len(data) < _HEAD.size:
        raise ControlProtocolError(f"control message of {len(data)} bytes is shorter than its header")
    op, version, status, _, client_id, req_id = _HEAD.unpack_from(data)
    if version != VERSION:
        raise ControlProtocolError(f"control protocol version {version}, expected {VERSION}")
    try:
        body = json.loads(bytes(data[_HEAD.size:]))
    except (UnicodeDecodeError, ValueError) as e:
        raise ControlProtocolError(f"control message body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise ControlProtocolError("control message body is not a JSON object")
    return op, status, client_id, req_id, body


def encode_request(req: Request) -> bytes:
    """Bytes of a request."""
    if isinstance(req, Attach):
        body = {"pid": req.pid, "alive_key": req.alive_key, "ring_bytes": req.ring_bytes, "info": req.info}
        return _pack(OP_ATTACH, 0, req.client_id, req.req_id, body)
    if isinstance(req, Detach):
        return _pack(OP_DETACH, 0, req.client_id, req.req_id, {})
    return _pack(OP_ADMIN, 0, req.client_id, req.req_id, {"command": req.command, "args": req.args})


def decode_request(data: bytes) -> Request:
    """Parse a request; ``ControlProtocolError`` says what is wrong with it."""
    op, _, client_id, req_id, body = _unpack(data)
    try:
        if op == OP_ATTACH:
            return Attach(client_id, req_id, int(body["pid"]), int(body["alive_key"]),
                          int(body["ring_bytes"]), dict(body.get("info", {})))
        if op == OP_DETACH:
            return Detach(client_id, req_id)
        if op == OP_ADMIN:
            return Admin(client_id, req_id, str(body["command"]), dict(body.get("args", {})))
    except (KeyError, TypeError, ValueError) as e:
        raise ControlProtocolError(f"bad fields in control request op {op}: {e!r}") from None
    raise ControlProtocolError(f"unknown control request op {op}")


def encode_reply(reply: Reply) -> bytes:
    """Bytes of a reply."""
    return _pack(OP_REPLY, STATUS_OK if reply.ok else STATUS_ERROR, reply.client_id, reply.req_id, reply.body)


def decode_reply(data: bytes) -> Reply:
    """Parse a reply; ``ControlProtocolError`` if it is not one."""
    op, status, client_id, req_id, body = _unpack(data)
    if op != OP_REPLY:
        raise ControlProtocolError(f"expected a reply, got op {op}")
    return Reply(client_id, req_id, status == STATUS_OK, body)


def _backoff(deadline: float | None, delay: float) -> float | None:
    """Sleep a growing poll interval; the next interval, or None once ``deadline`` passed."""
    now = time.monotonic()
    if deadline is not None and now >= deadline:
        return None
    time.sleep(delay if deadline is None else min(delay, deadline - now))
    return min(delay * 2, _POLL_MAX)


class ControlQueue:
    """The broker's control queue; sysv_ipc has no timed send/receive, so timeouts poll."""

    def __init__(self, mq: sysv_ipc.MessageQueue) -> None:
        self._mq = mq
        self.key: int = mq.key

    @classmethod
    def create(cls, key: int, mode: int = MODE) -> ControlQueue:
        """Broker side: create the queue (``sysv_ipc.ExistentialError`` if it exists)."""
        return cls(sysv_ipc.MessageQueue(key, sysv_ipc.IPC_CREX, mode=mode, max_message_size=MAX_MESSAGE))

    @classmethod
    def open(cls, key: int) -> ControlQueue:
        """Client side: open the queue; ``BrokerNotFoundError`` if no broker made it."""
        try:
            return cls(sysv_ipc.MessageQueue(key, max_message_size=MAX_MESSAGE))
        except sysv_ipc.ExistentialError:
            raise BrokerNotFoundError(f"no broker control queue with key {key:#x}") from None

    def _send(self, data: bytes, mtype: int, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = _POLL_MIN
        while True:
            try:
                self._mq.send(data, block=False, type=mtype)
                return
            except sysv_ipc.BusyError:
                nxt = _backoff(deadline, delay)
                if nxt is None:
                    raise ControlTimeoutError(f"the control queue stayed full for {timeout} s") from None
                delay = nxt
            except sysv_ipc.ExistentialError:
                raise BrokerGoneError("the broker's control queue was removed") from None

    def _receive(self, mtype: int, timeout: float | None) -> bytes | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = _POLL_MIN
        while True:
            try:
                return self._mq.receive(block=False, type=mtype)[0]
            except sysv_ipc.BusyError:
                nxt = _backoff(deadline, delay)
                if nxt is None:
                    return None
                delay = nxt
            except sysv_ipc.ExistentialError:
                raise BrokerGoneError("the broker's control queue was removed") from None

    def send_request(self, req: Request, timeout: float | None = None) -> None:
        """Client side: queue a request for the broker."""
        self._send(encode_request(req), BROKER_TYPE, timeout)

    def recv_request(self, timeout: float | None = 0.0) -> Request | None:
        """Broker side: next request, None if none came in ``timeout`` (0: do not wait).

        A malformed message is consumed and reported as ``ControlProtocolError``.
        """
        data = self._receive(BROKER_TYPE, timeout)
        return None if data is None else decode_request(data)

    def send_reply(self, reply: Reply, timeout: float | None = 1.0) -> None:
        """Broker side: answer a client."""
        self._send(encode_reply(reply), reply.client_id, timeout)

    def recv_reply(self, client_id: int, req_id: int, timeout: float | None) -> Reply:
        """Client side: the reply to ``req_id``, dropping stale replies to earlier requests."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            data = self._receive(client_id, remaining)
            if data is None:
                raise ControlTimeoutError(f"no reply from the broker to request {req_id} within {timeout} s")
            reply = decode_reply(data)
            if reply.req_id == req_id:
                return reply

    def call(self, req: Request, timeout: float) -> Reply:
        """Client side: send ``req`` and wait for its reply, all within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        self.send_request(req, timeout)
        return self.recv_reply(req.client_id, req.req_id, max(0.0, deadline - time.monotonic()))

    def remove(self) -> None:
        """Broker side: delete the queue (waiting clients get ``BrokerGoneError``)."""
        try:
            self._mq.remove()
        except sysv_ipc.ExistentialError:
            pass
