"""The control plane: attach / detach / admin requests over one SysV message queue.

Clients send requests with message type 1 (the broker); the broker answers with message
type = the client's id (ids are >= 2), so each client receives only its own replies, and a
request id lets it drop replies to requests it already gave up on.

The queue key is a stable hash of the store directory's real path (``sysv_key``), not
``ftok``: ftok keeps only the low bits of the inode plus 8 bits of id, so two stores can
collide, and it changes when the directory is recreated. Any process that knows the store
path can compute the key.

Wire format (little-endian): ``u8 op, u8 version, u16 status, u16 chunk, u16 last chunk,
u64 client id, u64 request id`` then UTF-8 JSON. A message is at most ``MAX_MESSAGE`` bytes
(the kernel's default msgmax). A reply larger than that is cut into chunks of its JSON text,
sent in order (chunk 0..last; requests are one chunk), so a reply of any size up to
``MAX_REPLY_BYTES`` works although the whole queue holds only 16 KiB by default.

Anyone on the machine who can open the queue can send anything: ``decode_request`` checks
every field's type and range, so the broker sees only well-formed requests (limits that depend
on the broker's state and config are checked there).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sysv_ipc

from shmq.errors import BrokerGoneError, BrokerNotFoundError, ControlProtocolError, ControlTimeoutError
from shmq.ring.shm import MODE

VERSION = 2
MAX_MESSAGE = 8192
MAX_REPLY_BYTES = 16 * 1024 * 1024
BROKER_TYPE = 1
OP_ATTACH = 1
OP_DETACH = 2
OP_ADMIN = 3
OP_REPLY = 0x80
STATUS_OK = 0
STATUS_ERROR = 1
ROLES = ("producer", "consumer", "transaction_producer")  # the last answers transaction checks
MAX_PID = 2**22  # Linux's pid_max ceiling (PID_MAX_LIMIT)
MAX_COMMAND = 64
MAX_GROUP_CHARS = 127  # the state segment's name fields hold 128 bytes
_HEAD = struct.Struct("<BBHHHQQ")
CHUNK_BYTES = MAX_MESSAGE - _HEAD.size
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


def id_pid(client_id: int) -> int:
    """The pid ``new_client_id`` put into ``client_id`` (a hint only: the sender chose the id)."""
    return client_id >> 8


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
    """Give the channel back (clean shutdown); ``secret`` is the one in the channel's header."""

    client_id: int
    req_id: int
    secret: int = 0


@dataclass(frozen=True)
class Admin:
    """An admin command (create topic, list groups, ...) with JSON arguments.

    ``secret`` proves that an attached client sent it (commands acting as that client, like
    join_group, need it); an admin without a channel sends 0."""

    client_id: int
    req_id: int
    command: str
    args: dict[str, Any] = field(default_factory=dict)
    secret: int = 0


@dataclass(frozen=True)
class Reply:
    """The broker's answer to request ``req_id``; ``body`` holds results or an error message."""

    client_id: int
    req_id: int
    ok: bool
    body: dict[str, Any] = field(default_factory=dict)


Request = Attach | Detach | Admin


def _check_client_id(client_id: int) -> None:
    if not 2 <= client_id < 2**31:
        raise ValueError(f"client id must be in 2..2**31-1, got {client_id}")


def _pack(op: int, status: int, client_id: int, req_id: int, body: dict[str, Any]) -> bytes:
    _check_client_id(client_id)
    data = _HEAD.pack(op, VERSION, status, 0, 0, client_id, req_id) + json.dumps(body, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"control message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    return data


def _head(data: bytes) -> tuple[int, int, int, int, int, int]:
    if len(data) < _HEAD.size:
        raise ControlProtocolError(f"control message of {len(data)} bytes is shorter than its header")
    op, version, status, chunk, last, client_id, req_id = _HEAD.unpack_from(data)
    if version != VERSION:
        raise ControlProtocolError(f"control protocol version {version}, expected {VERSION}")
    return op, status, chunk, last, client_id, req_id


def _json(text: bytes) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ControlProtocolError(f"control message body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise ControlProtocolError("control message body is not a JSON object")
    return body


def _int(body: dict[str, Any], key: str, lo: int, hi: int, default: int | None = None) -> int:
    """``body[key]`` as an int in lo..hi (a JSON bool or float is not an int)."""
    v = body.get(key, default)
    if type(v) is not int or not lo <= v <= hi:
        raise ControlProtocolError(f"{key} must be an integer in {lo}..{hi}, got {v!r}")
    return v


def _info(v: Any) -> dict[str, Any]:
    """An attach's ``info``: a role and an optional group name, nothing else."""
    if not isinstance(v, dict) or set(v) - {"role", "group"}:
        raise ControlProtocolError(f"info must be an object with role and group only, got {v!r}")
    role, group = v.get("role", "producer"), v.get("group")
    if role not in ROLES:
        raise ControlProtocolError(f"role must be one of {ROLES}, got {role!r}")
    if group is not None and (not isinstance(group, str) or len(group) > MAX_GROUP_CHARS):
        raise ControlProtocolError(f"group must be a string of at most {MAX_GROUP_CHARS} characters")
    return v


def encode_request(req: Request) -> bytes:
    """Bytes of a request."""
    if isinstance(req, Attach):
        body = {"pid": req.pid, "alive_key": req.alive_key, "ring_bytes": req.ring_bytes, "info": req.info}
        return _pack(OP_ATTACH, 0, req.client_id, req.req_id, body)
    if isinstance(req, Detach):
        return _pack(OP_DETACH, 0, req.client_id, req.req_id, {"secret": req.secret})
    return _pack(
        OP_ADMIN, 0, req.client_id, req.req_id, {"command": req.command, "args": req.args, "secret": req.secret}
    )


def decode_request(data: bytes) -> Request:
    """Parse and check a request; ``ControlProtocolError`` says what is wrong with it."""
    op, _, _, _, client_id, req_id = _head(data)
    if not 2 <= client_id < 2**31:
        raise ControlProtocolError(f"client id must be in 2..2**31-1, got {client_id}")
    body = _json(bytes(data[_HEAD.size :]))
    if op == OP_ATTACH:
        return Attach(
            client_id,
            req_id,
            _int(body, "pid", 1, MAX_PID),
            _int(body, "alive_key", 1, 2**31 - 1),
            _int(body, "ring_bytes", 1, 2**40),
            _info(body.get("info", {})),
        )
    if op == OP_DETACH:
        return Detach(client_id, req_id, _int(body, "secret", 0, 2**64 - 1, 0))
    if op == OP_ADMIN:
        command, args = body.get("command"), body.get("args", {})
        if not isinstance(command, str) or not 0 < len(command) <= MAX_COMMAND:
            raise ControlProtocolError(f"command must be a string of 1..{MAX_COMMAND} characters")
        if not isinstance(args, dict):
            raise ControlProtocolError("args must be a JSON object")
        return Admin(client_id, req_id, command, args, _int(body, "secret", 0, 2**64 - 1, 0))
    raise ControlProtocolError(f"unknown control request op {op}")


def encode_reply(reply: Reply) -> list[bytes]:
    """The messages of a reply: one, or chunks of its JSON text when it is larger than a message.

    ``ValueError`` past ``MAX_REPLY_BYTES``."""
    _check_client_id(reply.client_id)
    text = json.dumps(reply.body, separators=(",", ":")).encode()
    if len(text) > MAX_REPLY_BYTES:
        raise ValueError(f"reply of {len(text)} bytes exceeds {MAX_REPLY_BYTES}")
    status = STATUS_OK if reply.ok else STATUS_ERROR
    pieces = [text[i : i + CHUNK_BYTES] for i in range(0, len(text), CHUNK_BYTES)] or [b""]
    last = len(pieces) - 1
    return [
        _HEAD.pack(OP_REPLY, VERSION, status, i, last, reply.client_id, reply.req_id) + piece
        for i, piece in enumerate(pieces)
    ]


@dataclass(frozen=True)
class ReplyChunk:
    """One message of a reply: chunk ``index`` of ``0..last``."""

    client_id: int
    req_id: int
    ok: bool
    index: int
    last: int
    piece: bytes


def decode_reply_chunk(data: bytes) -> ReplyChunk:
    """Parse one reply message; ``ControlProtocolError`` if it is not one."""
    op, status, index, last, client_id, req_id = _head(data)
    if op != OP_REPLY:
        raise ControlProtocolError(f"expected a reply, got op {op}")
    if index > last or last * CHUNK_BYTES > MAX_REPLY_BYTES:
        raise ControlProtocolError(f"reply chunk {index} of 0..{last} (at most {MAX_REPLY_BYTES} bytes)")
    return ReplyChunk(client_id, req_id, status == STATUS_OK, index, last, bytes(data[_HEAD.size :]))


def decode_reply(chunks: list[ReplyChunk]) -> Reply:
    """The reply the chunks of one request make up (0..last, in order)."""
    first = chunks[0]
    if len(chunks) != first.last + 1:
        raise ControlProtocolError(f"reply to request {first.req_id}: {len(chunks)} chunks of {first.last + 1}")
    for i, c in enumerate(chunks):
        if c.req_id != first.req_id or c.index != i or c.last != first.last:
            raise ControlProtocolError(f"reply chunks of request {first.req_id} are out of order")
    return Reply(first.client_id, first.req_id, first.ok, _json(b"".join(c.piece for c in chunks)))


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
                answer: bytes | None = self._mq.receive(block=False, type=mtype)[0]
                return answer
            except sysv_ipc.BusyError:
                nxt = _backoff(deadline, delay)
                if nxt is None:
                    return None
                delay = nxt
            except sysv_ipc.ExistentialError:
                raise BrokerGoneError("the broker's control queue was removed") from None

    def send_request(self, req: Request, timeout: float | None = None) -> None:
        """Client side: queue a request for the broker, after dropping replies of this id that
        nobody read (earlier requests given up on): they would fill the queue for everyone."""
        self.drain(req.client_id)
        self._send(encode_request(req), BROKER_TYPE, timeout)

    def recv_request(self, timeout: float | None = 0.0) -> Request | None:
        """Broker side: next request, None if none came in ``timeout`` (0: do not wait).

        A malformed message is consumed and reported as ``ControlProtocolError``.
        """
        data = self._receive(BROKER_TYPE, timeout)
        return None if data is None else decode_request(data)

    def try_send(self, data: bytes, mtype: int) -> bool:
        """Broker side: queue one message without waiting; False if the queue is full."""
        try:
            self._mq.send(data, block=False, type=mtype)
        except sysv_ipc.BusyError:
            return False
        return True

    def drain(self, mtype: int) -> int:
        """Remove every queued message of type ``mtype`` (replies nobody will read); how many."""
        n = 0
        while True:
            try:
                self._mq.receive(block=False, type=mtype)
            except sysv_ipc.BusyError:
                return n
            except sysv_ipc.ExistentialError:
                raise BrokerGoneError("the broker's control queue was removed") from None
            n += 1

    def recv_reply(
        self, client_id: int, req_id: int, timeout: float | None, nudge: Callable[[], None] | None = None
    ) -> Reply:
        """Client side: the reply to ``req_id``, dropping stale replies to earlier requests.

        ``nudge`` runs after each chunk of a long reply (ring the broker's doorbell: it sends
        the next chunks once the queue has room, and may be parked)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks: list[ReplyChunk] = []
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            data = self._receive(client_id, remaining)
            if data is None:
                raise ControlTimeoutError(f"no reply from the broker to request {req_id} within {timeout} s")
            chunk = decode_reply_chunk(data)
            if chunk.req_id != req_id:
                continue
            if chunk.index == 0:
                chunks = []  # a first chunk starts the reply over (an earlier one was cut short)
            chunks.append(chunk)
            if chunk.index == chunk.last:
                return decode_reply(chunks)
            if nudge is not None:
                nudge()

    def call(self, req: Request, timeout: float, nudge: Callable[[], None] | None = None) -> Reply:
        """Client side: send ``req`` and wait for its reply, all within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        self.send_request(req, timeout)
        if nudge is not None:
            nudge()
        return self.recv_reply(req.client_id, req.req_id, max(0.0, deadline - time.monotonic()), nudge)

    def remove(self) -> None:
        """Broker side: delete the queue (waiting clients get ``BrokerGoneError``)."""
        try:
            self._mq.remove()
        except sysv_ipc.ExistentialError:
            pass
