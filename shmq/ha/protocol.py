"""The HA wire protocol, pure: bytes in, events and bytes out, no sockets (the h11 way).

RocketMQ's replication frames sit behind a handshake of three messages::

    master -> replica  HELLO    b"SQHM" u16 version u16 flags  nonce_m(32) u32 0
    replica -> master  AUTH     b"SQHR" u16 version u16 n  nonce_r(32) mac_r(32) u32 0  name(n)
    master -> replica  WELCOME  b"SQHW" u16 version u16 k  mac_m(32) u64 segment size
                                i64 min offset  i64 max offset  k x (u64 epoch i64 start id(16))
    either side        REFUSE   b"SQHX" u16 version u16 code u16 n  reason(n)

``mac_r = HMAC-SHA256(haAuthToken, b"shmq-ha-1 replica" + nonce_m + nonce_r)`` proves the token
without sending it, and ``mac_m`` (the same over ``b"shmq-ha-1 master" + nonce_r + nonce_m``)
proves it back, so a fake master cannot feed a replica either. Fresh nonces on both sides
make a recorded handshake worthless. Neither session takes an empty token: an HMAC keyed with
nothing is one anybody can compute, so it would prove nothing (``shmq.ha.token`` says where a
side's token comes from). Then, as in RocketMQ: the replica sends its max
commitlog offset (i64) after connecting, after each append and every heartbeat interval; the
master sends ``i64 offset | u32 size | bytes`` frames of raw commitlog, size 0 as heartbeat.
Offset -1 marks a metadata frame (u8 kind + a config file's JSON) so that topic config and
consumer offsets follow the log without a second connection. Integers are big-endian.

Epochs: every start of a master opens an epoch (number, first offset, random id). A replica
adopts its master's list; comparing lists tells how much of a store two brokers share
(``consistent_offset``), so a former master that comes back as a replica cuts exactly the
tail it wrote alone instead of silently diverging.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import struct
from dataclasses import dataclass

from shmq.errors import HADivergedError, HAProtocolError

VERSION = 1
NONCE = 32
MAC = 32
MAX_NAME = 64
MAX_EPOCHS = 1024
MAX_REASON = 1024
METADATA_OFFSET = -1
META_TOPICS = 1  # config/topics.json
META_OFFSETS = 2  # config/consumerOffset.json
# the master's timed services' progress, kept verbatim by a replica for the day it is promoted
META_DELAY_OFFSETS = 3  # config/delayOffset.json
META_TIMER_CHECKPOINT = 4  # config/timerCheckpoint.json
META_TRANSACTION_CHECK = 5  # config/transactionCheck.json
META_DLQ_RESEND = 6  # config/dlqResend.json
PROGRESS_FILES = {
    META_DELAY_OFFSETS: "delayOffset.json",
    META_TIMER_CHECKPOINT: "timerCheckpoint.json",
    META_TRANSACTION_CHECK: "transactionCheck.json",
    META_DLQ_RESEND: "dlqResend.json",
}
META_KINDS = (META_TOPICS, META_OFFSETS, *PROGRESS_FILES)

# REFUSE codes
REFUSE_VERSION = 1
REFUSE_AUTH = 2
REFUSE_SEGMENT_SIZE = 3
REFUSE_OFFSET = 4  # a report the master cannot serve (below its min offset, past its max)
REFUSE_BUSY = 5  # too many replicas

HELLO = struct.Struct(">4sHH32sI")
AUTH = struct.Struct(">4sHH32s32sI")
WELCOME = struct.Struct(">4sHH32sQqq")
EPOCH = struct.Struct(">Qq16s")
REFUSE = struct.Struct(">4sHHH")
REPORT = struct.Struct(">q")
FRAME = struct.Struct(">qI")
_MAGIC_HELLO, _MAGIC_AUTH, _MAGIC_WELCOME, _MAGIC_REFUSE = b"SQHM", b"SQHR", b"SQHW", b"SQHX"


@dataclass(frozen=True, slots=True)
class Epoch:
    """A stretch of the log written by one master start: from ``start_offset`` to the next epoch's."""

    epoch: int
    start_offset: int
    id: bytes  # 16 random bytes: two masters that opened the same number at the same offset differ

    def to_json(self) -> dict[str, object]:
        return {"epoch": self.epoch, "startOffset": self.start_offset, "id": self.id.hex()}

    @classmethod
    def from_json(cls, value: object) -> Epoch:
        """Raises ValueError for anything but a well-formed entry."""
        if not isinstance(value, dict) or set(value) != {"epoch", "startOffset", "id"}:
            raise ValueError(f"an epoch entry has keys epoch, startOffset, id; got {value!r}")
        epoch, start, id_ = value["epoch"], value["startOffset"], value["id"]
        if type(epoch) is not int or type(start) is not int or not isinstance(id_, str):
            raise ValueError(f"bad epoch entry {value!r}")
        if not 0 < epoch < 1 << 63 or not 0 <= start < 1 << 63 or len(id_) != 32:
            raise ValueError(f"epoch entry out of range: {value!r}")
        return cls(epoch, start, bytes.fromhex(id_))

    @classmethod
    def new(cls, epoch: int, start_offset: int) -> Epoch:
        return cls(epoch, start_offset, os.urandom(16))


def check_epochs(epochs: list[Epoch]) -> None:
    """Numbers strictly rising, start offsets never falling: what any list we write obeys."""
    for a, b in itertools.pairwise(epochs):
        if b.epoch <= a.epoch or b.start_offset < a.start_offset:
            raise ValueError(f"epochs out of order: {a} then {b}")


def consistent_offset(replica: list[Epoch], replica_max: int, master: list[Epoch], master_max: int) -> int:
    """How much of its log a replica shares with the master: it keeps ``[0, result)``.

    The longest common prefix of the two epoch lists (entries equal in number, start and id)
    holds what both wrote under the same masters; the shared log ends where either side's next
    epoch starts (or at its max offset). A replica with data but no epoch in common has
    history the master never had: HADivergedError. A replica with no epochs and no data
    shares everything it has (nothing).

    Epochs at the replica's end under which it holds no byte are left out first: a master
    killed before its first write is restarted with a new epoch at the same offset in place of
    the empty one, and a replica that had adopted the empty epoch shares every byte it has.
    """
    while replica and replica[-1].start_offset >= replica_max:
        replica = replica[:-1]
    if not replica:
        if replica_max > 0:
            raise HADivergedError(
                f"the replica's store holds {replica_max} bytes of log but no epoch history "
                "(config/epochs.json): it cannot prove it shares them with this master; "
                "wipe the store or start it as a master"
            )
        return 0
    common = 0
    for a, b in zip(replica, master):
        if a != b:
            break
        common += 1
    if common == 0:
        raise HADivergedError(
            f"the replica's history (epoch {replica[0].epoch} from offset "
            f"{replica[0].start_offset}) shares no epoch with the master's (epoch "
            f"{master[0].epoch if master else '-'}): it was written by another master; "
            "wipe the store or start it as a master"
        )
    end_r = replica[common].start_offset if common < len(replica) else replica_max
    end_m = master[common].start_offset if common < len(master) else master_max
    return min(end_r, end_m, replica_max)


# ---------------------------------------------------------------------- MACs


def _check_token(token: bytes) -> bytes:
    if not token:
        raise ValueError("HA needs a non-empty haAuthToken: a MAC keyed with an empty token proves nothing")
    return token


def replica_mac(token: bytes, nonce_m: bytes, nonce_r: bytes) -> bytes:
    return hmac.new(token, b"shmq-ha-1 replica" + nonce_m + nonce_r, hashlib.sha256).digest()


def master_mac(token: bytes, nonce_m: bytes, nonce_r: bytes) -> bytes:
    return hmac.new(token, b"shmq-ha-1 master" + nonce_r + nonce_m, hashlib.sha256).digest()


# ---------------------------------------------------------------------- encoders


def encode_refuse(code: int, reason: str) -> bytes:
    raw = reason.encode()[:MAX_REASON]
    return REFUSE.pack(_MAGIC_REFUSE, VERSION, code, len(raw)) + raw


def encode_report(offset: int) -> bytes:
    return REPORT.pack(offset)


def frame_header(offset: int, size: int) -> bytes:
    """The 12 bytes before a data frame's ``size`` bytes (or a heartbeat's none)."""
    return FRAME.pack(offset, size)


def encode_metadata(kind: int, text: bytes) -> bytes:
    """A whole metadata frame: header at offset -1, then the kind byte and the file's bytes."""
    return FRAME.pack(METADATA_OFFSET, 1 + len(text)) + bytes((kind,)) + text


# ---------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Authenticated:
    """Master side: the replica proved the token."""

    name: str


@dataclass(frozen=True, slots=True)
class Report:
    """Master side: the replica's max offset."""

    offset: int


@dataclass(frozen=True, slots=True)
class Welcome:
    """Replica side: the master proved the token; where its log stands."""

    segment_size: int
    min_offset: int
    max_offset: int
    epochs: list[Epoch]


@dataclass(frozen=True, slots=True)
class Refused:
    """The peer refused the connection (and closes it)."""

    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class Data:
    """Replica side: raw commitlog bytes at ``offset`` (empty: a heartbeat); a view of the
    bytes given to ``ReplicaSession.receive`` when the frame lay whole in them."""

    offset: int
    data: bytes | memoryview


@dataclass(frozen=True, slots=True)
class Metadata:
    """Replica side: a config file of the master (``kind`` one of META_KINDS)."""

    kind: int
    text: bytes


Event = Authenticated | Report | Welcome | Refused | Data | Metadata


def _refused_or_none(buf: bytearray) -> tuple[Refused | None, int]:
    """A REFUSE at the start of ``buf``: (event, bytes used), (None, 0) if incomplete."""
    if len(buf) < REFUSE.size:
        return None, 0
    _, _, code, n = REFUSE.unpack_from(buf)
    if n > MAX_REASON:
        raise HAProtocolError(f"refusal reason of {n} bytes")
    if len(buf) < REFUSE.size + n:
        return None, 0
    return Refused(code, bytes(buf[REFUSE.size : REFUSE.size + n]).decode(errors="replace")), REFUSE.size + n


def _check_version(magic: bytes, version: int, what: str) -> None:
    if version != VERSION:
        raise HAProtocolError(f"{what} speaks HA protocol version {version}, this side {VERSION}")


# ---------------------------------------------------------------------- sessions


class MasterSession:
    """The master's side of one replica connection: ``hello()`` first, then ``receive`` whatever
    the socket gave; after ``Authenticated`` the owner sends ``welcome(...)`` and streams frames."""

    def __init__(self, token: bytes, nonce: bytes | None = None) -> None:
        self.token = _check_token(token)
        self.nonce = nonce or os.urandom(NONCE)
        self._nonce_r = b""
        self.authenticated = False
        self.last_report = -1
        self._buf = bytearray()

    def hello(self) -> bytes:
        return HELLO.pack(_MAGIC_HELLO, VERSION, 0, self.nonce, 0)

    def welcome(self, segment_size: int, min_offset: int, max_offset: int, epochs: list[Epoch]) -> bytes:
        if len(epochs) > MAX_EPOCHS:
            epochs = epochs[-MAX_EPOCHS:]
        mac = master_mac(self.token, self.nonce, self._nonce_r)
        return WELCOME.pack(_MAGIC_WELCOME, VERSION, len(epochs), mac, segment_size, min_offset, max_offset) + b"".join(
            EPOCH.pack(e.epoch, e.start_offset, e.id) for e in epochs
        )

    def receive(self, data: bytes) -> list[Event]:
        """Events in ``data`` (with what earlier calls left); HAProtocolError for anything the
        protocol does not allow: the caller closes the connection."""
        buf = self._buf
        buf += data
        events: list[Event] = []
        pos = 0
        if not self.authenticated:
            if len(buf) < 4:
                return events
            magic = bytes(buf[:4])
            if magic == _MAGIC_REFUSE:
                ev, used = _refused_or_none(buf)
                if ev is not None:
                    events.append(ev)
                    del buf[:used]
                return events
            if magic != _MAGIC_AUTH:
                raise HAProtocolError(f"expected the replica's AUTH, got {magic!r}")
            if len(buf) < AUTH.size:
                return events
            _, version, n, nonce_r, mac, _ = AUTH.unpack_from(buf)
            _check_version(magic, version, "the replica")
            if n > MAX_NAME:
                raise HAProtocolError(f"replica name of {n} bytes (at most {MAX_NAME})")
            if len(buf) < AUTH.size + n:
                return events
            if not hmac.compare_digest(mac, replica_mac(self.token, self.nonce, nonce_r)):
                raise HAProtocolError("the replica did not prove haAuthToken")
            name = bytes(buf[AUTH.size : AUTH.size + n]).decode(errors="replace")
            self._nonce_r = nonce_r
            self.authenticated = True
            pos = AUTH.size + n
            events.append(Authenticated(name))
        end = len(buf)
        while end - pos >= REPORT.size:
            (offset,) = REPORT.unpack_from(buf, pos)
            pos += REPORT.size
            if offset < 0 or offset < self.last_report:
                raise HAProtocolError(f"replica reported offset {offset} after {self.last_report}")
            self.last_report = offset
            events.append(Report(offset))
        del buf[:pos]
        return events


class ReplicaSession:
    """The replica's side: ``receive`` bytes from the master; answer HELLO with the returned AUTH
    (``pending_output``), then check WELCOME and frames. ``max_frame`` bounds a frame's size
    (a 4 GiB length closes the connection instead of allocating it)."""

    def __init__(self, token: bytes, name: str, max_frame: int, nonce: bytes | None = None) -> None:
        self.token = _check_token(token)
        self.name = name.encode()[:MAX_NAME]
        self.nonce = nonce or os.urandom(NONCE)
        self.max_frame = max_frame
        self._nonce_m = b""
        self.state = "hello"  # hello -> welcome -> frames
        self.pending_output = bytearray()
        self._buf = bytearray()

    def receive(self, data: bytes | bytearray | memoryview) -> list[Event]:
        """Events in ``data`` (with what earlier calls left). Once streaming, a ``Data`` or
        ``Metadata`` frame that lies whole inside ``data`` is a view of it, not a copy (a
        catch-up moves every byte of the log through here): the caller uses the events before
        it reuses the buffer ``data`` views."""
        if self.state == "frames":
            return self._frames(memoryview(data))
        events = self._handshake(data)
        if self.state != "frames" or not self._buf:
            return events
        rest = bytes(self._buf)  # frames right behind the WELCOME
        self._buf.clear()
        return events + self._frames(memoryview(rest))

    def _frames(self, mv: memoryview) -> list[Event]:
        """Frames of ``mv``: a frame begun by an earlier call is completed in ``_buf`` (a copy),
        the whole frames after it are views of ``mv``, an incomplete tail is kept in ``_buf``."""
        events: list[Event] = []
        buf, n, pos = self._buf, len(mv), 0
        if buf:
            if len(buf) < FRAME.size:
                pos = min(FRAME.size - len(buf), n)
                buf += mv[:pos]
                if len(buf) < FRAME.size:
                    return events
            offset, size = FRAME.unpack_from(buf)
            self._check_size(offset, size)
            take = min(FRAME.size + size - len(buf), n - pos)
            buf += mv[pos : pos + take]
            pos += take
            if len(buf) < FRAME.size + size:
                return events
            events.append(self._frame(offset, bytes(memoryview(buf)[FRAME.size :])))
            buf.clear()
        while n - pos >= FRAME.size:
            offset, size = FRAME.unpack_from(mv, pos)
            self._check_size(offset, size)
            if n - pos - FRAME.size < size:
                break
            events.append(self._frame(offset, mv[pos + FRAME.size : pos + FRAME.size + size]))
            pos += FRAME.size + size
        buf += mv[pos:]
        return events

    def _check_size(self, offset: int, size: int) -> None:
        if size > self.max_frame:
            raise HAProtocolError(f"frame of {size} bytes at offset {offset} (at most {self.max_frame})")

    @staticmethod
    def _frame(offset: int, body: bytes | memoryview) -> Event:
        if offset == METADATA_OFFSET:
            if not body or body[0] not in META_KINDS:
                raise HAProtocolError(f"metadata frame of unknown kind {bytes(body[:1])!r}")
            return Metadata(body[0], bytes(body[1:]))
        if offset < 0:
            raise HAProtocolError(f"frame at negative offset {offset}")
        return Data(offset, body)

    def _handshake(self, data: bytes | bytearray | memoryview) -> list[Event]:
        """HELLO, then WELCOME (or a REFUSE); what follows the WELCOME stays in ``_buf``."""
        buf = self._buf
        buf += data
        events: list[Event] = []
        pos = 0
        while self.state != "frames":
            avail = len(buf) - pos
            if avail < 4:
                break
            magic = bytes(buf[pos : pos + 4])
            if magic == _MAGIC_REFUSE:
                ev, used = _refused_or_none(buf[pos:])
                if ev is None:
                    break
                events.append(ev)
                pos += used
                self.state = "refused"
                break
            if self.state == "hello":
                if magic != _MAGIC_HELLO:
                    raise HAProtocolError(f"expected the master's HELLO, got {magic!r}")
                if avail < HELLO.size:
                    break
                _, version, _, nonce_m, _ = HELLO.unpack_from(buf, pos)
                _check_version(magic, version, "the master")
                self._nonce_m = nonce_m
                pos += HELLO.size
                self.pending_output += (
                    AUTH.pack(
                        _MAGIC_AUTH,
                        VERSION,
                        len(self.name),
                        self.nonce,
                        replica_mac(self.token, nonce_m, self.nonce),
                        0,
                    )
                    + self.name
                )
                self.state = "welcome"
            elif self.state == "welcome":
                if magic != _MAGIC_WELCOME:
                    raise HAProtocolError(f"expected the master's WELCOME, got {magic!r}")
                if avail < WELCOME.size:
                    break
                _, version, k, mac, seg, lo, hi = WELCOME.unpack_from(buf, pos)
                _check_version(magic, version, "the master")
                if k > MAX_EPOCHS:
                    raise HAProtocolError(f"WELCOME with {k} epochs (at most {MAX_EPOCHS})")
                if avail < WELCOME.size + k * EPOCH.size:
                    break
                if not hmac.compare_digest(mac, master_mac(self.token, self._nonce_m, self.nonce)):
                    raise HAProtocolError("the master did not prove haAuthToken")
                epochs = [Epoch(*EPOCH.unpack_from(buf, pos + WELCOME.size + i * EPOCH.size)) for i in range(k)]
                try:
                    check_epochs(epochs)
                except ValueError as e:
                    raise HAProtocolError(f"master's epoch list: {e}") from None
                if not 0 <= lo <= hi or seg <= 0:
                    raise HAProtocolError(f"master's WELCOME has offsets {lo}..{hi}, segment size {seg}")
                pos += WELCOME.size + k * EPOCH.size
                events.append(Welcome(seg, lo, hi, epochs))
                self.state = "frames"
            else:  # refused: nothing more is read
                pos = len(buf)
                break
        del buf[:pos]
        return events

    def take_output(self) -> bytes:
        out = bytes(self.pending_output)
        self.pending_output.clear()
        return out
