"""The route segment: a name server's ``RouteTable`` in shared memory, read without a round trip.

The name server is the only writer. A fixed header is followed by the encoded table::

    0   magic u64 ("SMQROUTE"), version u32, capacity u32 (payload bytes)
    16  seq u64: the seqlock (odd while the server writes)
    24  server pid u32, control-queue key u32, server liveness key u32, pad u32
    40  incarnation u64: new for every name server process of this name
    48  payload length u32, payload crc32 u32
    64  payload: ``shmq.namesrv.routes.encode_table``

A reader copies the payload between two loads of an even, unchanged ``seq`` and checks its
length and CRC before decoding, so a torn or damaged table is never used; it decodes only
when ``seq`` moved. Clients keep their last good table while the server is down or the
segment holds garbage (they say so once), and leave out every broker whose liveness
semaphore is not held by the pid the table names: a route to a dead pid is never used.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import time
import zlib

import posix_ipc
import sysv_ipc

from shmq.errors import NameServerNotFoundError, RouteTableError, ShmqError
from shmq.namesrv.routes import BrokerData, RouteTable, check_namesrv_name, decode_table, encode_table
from shmq.ring.liveness import Liveness, Watch
from shmq.ring.owner import foreign_segment
from shmq.ring.shm import MODE, Segment, unlink_segment

log = logging.getLogger(__name__)

MAGIC = 0x4554554F52514D53  # b"SMQROUTE" as little-endian
VERSION = 1
HEADER_BYTES = 64
DEFAULT_CAPACITY = 4 << 20
_HEAD = struct.Struct("<QII")  # magic, version, capacity
_SEQ = struct.Struct("<Q")
_SERVER = struct.Struct("<IIII")  # pid, control key, alive key, pad
_INCARNATION = struct.Struct("<Q")
_PAYLOAD = struct.Struct("<II")  # length, crc32
_SEQ_AT, _SERVER_AT, _INCARNATION_AT, _PAYLOAD_AT = 16, 24, 40, 48
CHECK_S = 0.01  # how often a reader re-checks the liveness of the server and of the brokers
READ_TRIES = 1000


def routes_name(namesrv: str) -> str:
    """The POSIX shared-memory name of name server ``namesrv``'s route segment."""
    return f"/shmq.ns.{check_namesrv_name(namesrv)}.routes"


def namesrv_key(namesrv: str, what: str) -> int:
    """A stable SysV key (1..2**31-1) for object ``what`` of name server ``namesrv``: a
    restarted name server finds its predecessor's objects, any process can compute it."""
    digest = hashlib.blake2b(f"shmq\0namesrv\0{namesrv}\0{what}".encode(), digest_size=4).digest()
    return (int.from_bytes(digest, "little") & 0x7FFFFFFF) or 1


def broker_alive(b: BrokerData) -> bool:
    """Whether ``b``'s process lives: its liveness semaphore is held, by the pid the table names."""
    w = Watch(b.alive_key)
    return w.is_alive() and w.holder_pid() == b.pid


class RouteWriter:
    """The name server's side: creates the segment and publishes tables into it."""

    def __init__(self, segment: Segment, liveness: Liveness, control_key: int, incarnation: int) -> None:
        self.segment = segment
        self.liveness = liveness
        self.control_key = control_key
        self.incarnation = incarnation
        self.capacity = segment.size - HEADER_BYTES

    @classmethod
    def create(cls, namesrv: str, control_key: int, capacity: int = DEFAULT_CAPACITY) -> RouteWriter:
        """The segment of a new name server process; a dead predecessor's is replaced. A live
        one is a RouteTableError naming its pid, so two servers never share a name."""
        name = routes_name(namesrv)
        old = _read_server(name)
        if old is not None and Watch(old[1]).is_alive():
            raise RouteTableError(f"a name server named {namesrv!r} already serves (pid {old[0]})")
        unlink_segment(name)
        alive_key = namesrv_key(namesrv, "alive")
        try:
            Watch(alive_key).remove()  # the dead predecessor's: no holder, or none at all
            liveness = Liveness.hold(alive_key)
        except (sysv_ipc.Error, ShmqError) as e:
            raise RouteTableError(f"name server {namesrv!r} cannot take its liveness key: {e}") from None
        try:
            segment = Segment.create(name, HEADER_BYTES + capacity, MODE)
        except BaseException:
            liveness.release()
            raise
        incarnation = time.time_ns()
        buf = segment.buf
        _SERVER.pack_into(buf, _SERVER_AT, os.getpid(), control_key, alive_key, 0)
        _INCARNATION.pack_into(buf, _INCARNATION_AT, incarnation)
        _HEAD.pack_into(buf, 0, MAGIC, VERSION, capacity)  # last: readers wait for the magic
        writer = cls(segment, liveness, control_key, incarnation)
        writer.publish(RouteTable(namesrv, incarnation, 0, ()))
        return writer

    def publish(self, table: RouteTable) -> None:
        """Make ``table`` the one readers see; RouteTableError if it does not fit."""
        data = encode_table(table)
        if len(data) > self.capacity:
            raise RouteTableError(f"route table of {len(data)} bytes does not fit the segment's {self.capacity}")
        buf = self.segment.buf
        (seq,) = _SEQ.unpack_from(buf, _SEQ_AT)
        _SEQ.pack_into(buf, _SEQ_AT, seq + 1)  # odd: readers retry
        buf[HEADER_BYTES : HEADER_BYTES + len(data)] = data
        _PAYLOAD.pack_into(buf, _PAYLOAD_AT, len(data), zlib.crc32(data))
        _SEQ.pack_into(buf, _SEQ_AT, seq + 2)

    def close(self) -> None:
        """Unmap and give up liveness (readers see the server gone)."""
        self.segment.close()
        self.liveness.release()

    def unlink(self) -> None:
        """Remove the segment's name and the liveness semaphore (a clean stop)."""
        self.segment.unlink()
        Watch(self.liveness.key).remove()


def _read_server(name: str) -> tuple[int, int] | None:
    """(pid, liveness key) of the server of segment ``name``, None if it has none readable."""
    try:
        seg = Segment.open(name, read_only=True)
    except (posix_ipc.ExistentialError, posix_ipc.PermissionsError, ValueError):
        return None
    try:
        if seg.size < HEADER_BYTES or _HEAD.unpack_from(seg.buf, 0)[0] != MAGIC:
            return None
        pid, _control, alive, _pad = _SERVER.unpack_from(seg.buf, _SERVER_AT)
        return pid, alive
    finally:
        seg.close()


class RouteReader:
    """A client's view of name server ``namesrv``'s routes (see the module docstring).

    ``read`` is cheap when nothing changed: a clock read, and every ``CHECK_S`` a look at the
    sequence and the liveness semaphores. Not thread-safe: one per thread, or a lock around it.
    """

    def __init__(self, namesrv: str) -> None:
        self.namesrv = check_namesrv_name(namesrv)
        self._name = routes_name(namesrv)
        self._segment: Segment | None = None
        self._server: Watch | None = None
        self._control_key: int | None = None
        self._seq = -1
        self._incarnation = -1
        self._decoded: RouteTable | None = None  # the last good table as published
        self._table: RouteTable | None = None  # the same without dead brokers
        self._checked = 0.0
        self._warned: str | None = None

    def read(self) -> RouteTable:
        """The current routes (see the class docstring); NameServerNotFoundError only when no
        good table was ever read."""
        now = time.monotonic()
        if self._table is not None and now - self._checked < CHECK_S:
            return self._table
        self._checked = now
        self._refresh()
        if self._decoded is None:
            raise NameServerNotFoundError(
                f"no name server named {self.namesrv!r} is serving ({self._warned or 'no route segment'}); "
                f"start one with `shmq namesrv --name {self.namesrv}`"
            )
        self._table = self._decoded.without_dead(broker_alive)
        return self._table

    def server_alive(self) -> bool:
        """Whether the name server process of the mapped segment lives."""
        if self._server is None:
            self._refresh()
        return self._server is not None and self._server.is_alive()

    def control_key(self) -> int | None:
        """The name server's control-queue key (where brokers register), None if none serves."""
        if not self.server_alive():
            return None
        return self._control_key

    def close(self) -> None:
        """Unmap the segment (the reader may be used again: it maps it anew)."""
        if self._segment is not None:
            self._segment.close()
        self._segment, self._server, self._seq = None, None, -1

    # ------------------------------------------------------------------ internals

    def _refresh(self) -> None:
        if self._segment is not None and self._server is not None and not self._server.is_alive():
            self.close()  # a restarted server makes a new segment under the same name
        if self._segment is None and not self._map():
            return
        try:
            self._decode()
        except RouteTableError as e:
            self._warn(f"name server {self.namesrv!r}: ignoring its route segment: {e}")
            self.close()

    def _map(self) -> bool:
        try:
            seg = Segment.open(self._name, read_only=True)
        except posix_ipc.ExistentialError:
            self._note("no route segment")
            return False
        except posix_ipc.PermissionsError:
            self._warn(str(foreign_segment(f"name server {self.namesrv!r}'s route segment", self._name)))
            return False
        if seg.owner[0] not in (os.geteuid(), 0):
            seg.close()
            self._warn(str(foreign_segment(f"name server {self.namesrv!r}'s route segment", self._name)))
            return False
        if seg.size < HEADER_BYTES or _HEAD.unpack_from(seg.buf, 0)[:2] != (MAGIC, VERSION):
            seg.close()
            self._note("route segment not ready or of another version")
            return False
        _pid, control, alive, _pad = _SERVER.unpack_from(seg.buf, _SERVER_AT)
        self._segment, self._server, self._control_key = seg, Watch(alive), control
        return True

    def _decode(self) -> None:
        assert self._segment is not None
        buf = self._segment.buf
        capacity = _HEAD.unpack_from(buf, 0)[2]
        if capacity > self._segment.size - HEADER_BYTES:
            raise RouteTableError(f"header capacity {capacity} exceeds the segment")
        for _ in range(READ_TRIES):
            (seq,) = _SEQ.unpack_from(buf, _SEQ_AT)
            if seq & 1:
                time.sleep(0)
                continue
            (incarnation,) = _INCARNATION.unpack_from(buf, _INCARNATION_AT)
            if seq == self._seq and incarnation == self._incarnation:
                return
            length, crc = _PAYLOAD.unpack_from(buf, _PAYLOAD_AT)
            data = None if length > capacity else bytes(buf[HEADER_BYTES : HEADER_BYTES + length])
            if _SEQ.unpack_from(buf, _SEQ_AT)[0] != seq:
                continue
            if data is None:
                raise RouteTableError(f"payload length {length} exceeds capacity {capacity}")
            if zlib.crc32(data) != crc:
                raise RouteTableError("payload checksum does not match")
            table = decode_table(data)
            if table.namesrv != self.namesrv:
                raise RouteTableError(f"it names name server {table.namesrv!r}")
            self._decoded, self._seq, self._incarnation = table, seq, incarnation
            self._warned = None
            return
        raise RouteTableError("the sequence never settled (a writer died mid-update)")

    def _note(self, why: str) -> None:
        if self._decoded is None:
            self._warned = why

    def _warn(self, why: str) -> None:
        if why != self._warned:
            log.warning("%s", why)
        self._warned = why
