"""The HA segment ``/shmq.<broker>.ha``: where the broker and its HA sender meet.

The broker creates it (a master always has one) and writes the header words of its own; the
HA sender maps it read-write and writes its words and one slot per replica connection; the
monitor maps it read-only. Every field has one writer, and every field read across processes
is a lone aligned 8-byte (or 4-byte) word, atomic on x86-64, so no lock is needed::

    0    magic u64 b"SHMQHA01", version u32, slots u32
    64   (broker) master_offset i64: commitlog max offset, written after every pass that wrote
         broker_waiting u32: 1 while SYNC_MASTER answers wait (the sender then rings the broker's bell)
    128  (sender) sender_pid u32, sender_parked u32, sender_beat_ms i64, listen_port u32
    256  slot i at 256 + 128 * i (sender): state u32 (0 free, 1 handshake, 2 streaming), seq u32,
         acked_offset i64, report_ms i64, connected_ms i64, sent_offset i64, addr S48, name S32

A slot's ``seq`` rises each time it is given to a new connection, so a reader that sees the
same seq twice knows both reads were of one connection.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

import numpy as np
import posix_ipc

from shmq.errors import BrokerNotFoundError, StateLayoutError
from shmq.ring.owner import Trust
from shmq.ring.shm import MODE, Segment, ipc_name, unlink_segment

MAGIC = 0x31304148514D4853  # b"SHMQHA01" as little-endian
VERSION = 1
SLOTS = 16
SIZE = 4096
FREE, HANDSHAKE, STREAMING = 0, 1, 2

HEADER = np.dtype(
    {
        "names": [
            "magic",
            "version",
            "slots",
            "master_offset",
            "broker_waiting",
            "sender_pid",
            "sender_parked",
            "sender_beat_ms",
            "listen_port",
        ],
        "formats": ["<u8", "<u4", "<u4", "<i8", "<u4", "<u4", "<u4", "<i8", "<u4"],
        "offsets": [0, 8, 12, 64, 72, 128, 132, 136, 144],
        "itemsize": 256,
    }
)
SLOT = np.dtype(
    {
        "names": ["state", "seq", "acked_offset", "report_ms", "connected_ms", "sent_offset", "addr", "name"],
        "formats": ["<u4", "<u4", "<i8", "<i8", "<i8", "<i8", "S48", "S32"],
        "offsets": [0, 4, 8, 16, 24, 32, 40, 88],
        "itemsize": 128,
    }
)
assert HEADER.itemsize + SLOTS * SLOT.itemsize <= SIZE


def ha_name(broker: str) -> str:
    return ipc_name(broker, "ha")


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """One replica connection as the HA segment shows it."""

    slot: int
    state: int
    seq: int
    acked_offset: int
    report_ms: int
    connected_ms: int
    sent_offset: int
    addr: str
    name: str


class HASegment:
    """A mapping of the HA segment; ``header`` and ``slot_table`` are numpy views of it."""

    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.header = np.frombuffer(segment.buf, HEADER, 1, 0)
        self.slot_table = np.frombuffer(segment.buf, SLOT, SLOTS, HEADER.itemsize)
        h = self.header[0]
        if int(h["magic"]) != MAGIC or int(h["version"]) != VERSION or int(h["slots"]) != SLOTS:
            raise StateLayoutError(f"{segment.name} is not an HA segment of version {VERSION}")

    @classmethod
    def create(cls, broker: str, shm_gid: int | None = None) -> HASegment:
        """The broker's: a fresh segment (a dead predecessor's is removed first by reclaim)."""
        name = ha_name(broker)
        segment = Segment.create(name, SIZE, MODE if shm_gid is None else 0o660)
        try:
            if shm_gid is not None:
                fd = os.open(f"/dev/shm{name}", os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    os.fchown(fd, -1, shm_gid)
                    os.fchmod(fd, 0o660)
                finally:
                    os.close(fd)
            h = np.frombuffer(segment.buf, HEADER, 1, 0)
            h["version"], h["slots"] = VERSION, SLOTS
            h["magic"] = MAGIC  # last: a reader that sees it sees a formatted segment
            del h
            return cls(segment)
        except BaseException:
            segment.close()
            unlink_segment(name)
            raise

    @classmethod
    def open(cls, broker: str, read_only: bool = False) -> HASegment:
        """The sender's (read-write) or the monitor's (read-only) mapping; BrokerNotFoundError if
        the broker has none (not running, or not a master); ForeignOwnerError for another user's."""
        try:
            segment = Segment.open(ha_name(broker), read_only=read_only)
        except posix_ipc.ExistentialError:
            raise BrokerNotFoundError(f"broker {broker!r} has no HA segment (not running, or not a master)") from None
        try:
            Trust.client(segment.owner[1]).check(f"HA segment {segment.name}", *segment.owner)
            return cls(segment)
        except BaseException:
            segment.close()
            raise

    # ------------------------------------------------------------------ broker side

    def publish_master_offset(self, offset: int) -> None:
        self.header["master_offset"] = offset

    def set_broker_waiting(self, waiting: bool) -> None:
        self.header["broker_waiting"] = 1 if waiting else 0

    def best_acked(self, master_offset: int, max_gap: int) -> int:
        """The highest offset a streaming replica in sync (at most ``max_gap`` behind
        ``master_offset``) has acknowledged; -1 if no replica is in sync (RocketMQ's isSlaveOK)."""
        t = self.slot_table
        live = t["state"] == STREAMING
        if not live.any():
            return -1
        acked = t["acked_offset"][live]
        best = int(acked.max())
        return best if master_offset - best <= max_gap else -1

    # ------------------------------------------------------------------ sender side

    def claim_slot(self, addr: str, now_ms: int) -> int:
        """A free slot for a new connection (-1 if all are taken), marked HANDSHAKE."""
        t = self.slot_table
        free = np.flatnonzero(t["state"] == FREE)
        if not len(free):
            return -1
        i = int(free[0])
        row = t[i : i + 1]
        row["acked_offset"], row["sent_offset"], row["report_ms"] = -1, -1, 0
        row["connected_ms"] = now_ms
        row["addr"], row["name"] = addr.encode()[:48], b""
        row["seq"] = (int(row["seq"][0]) + 1) & 0xFFFFFFFF
        row["state"] = HANDSHAKE
        return i

    def release_slot(self, i: int) -> None:
        self.slot_table["state"][i] = FREE

    def reset_slots(self) -> None:
        """A sender starting: slots of a dead predecessor's connections are stale."""
        self.slot_table["state"] = FREE

    def beat(self) -> None:
        self.header["sender_beat_ms"] = int(time.time() * 1000)

    # ------------------------------------------------------------------ readers

    def replicas(self) -> list[ReplicaInfo]:
        """Every connection in a slot, copied out."""
        out = []
        for i, row in enumerate(self.slot_table.copy()):
            if int(row["state"]) != FREE:
                out.append(
                    ReplicaInfo(
                        i,
                        int(row["state"]),
                        int(row["seq"]),
                        int(row["acked_offset"]),
                        int(row["report_ms"]),
                        int(row["connected_ms"]),
                        int(row["sent_offset"]),
                        bytes(row["addr"]).decode(errors="replace"),
                        bytes(row["name"]).decode(errors="replace"),
                    )
                )
        return out

    @property
    def master_offset(self) -> int:
        return int(self.header["master_offset"][0])

    def close(self) -> None:
        self.header = self.slot_table = None  # type: ignore[assignment]
        self.segment.close()

    def unlink(self) -> None:
        unlink_segment(self.segment.name)


def wake_address(broker: str) -> str:
    """The sender's wake-up socket: an abstract unix datagram name (no file, gone with the sender)."""
    return f"\0shmq.{broker}.ha"


class SenderWaker:
    """The broker's side of the wake-up: one datagram when the sender is parked and the log grew.

    A datagram to an abstract socket costs one system call and needs no file; a sender that is
    not there (not started, restarting) simply misses it and reads ``master_offset`` when it
    comes back."""

    def __init__(self, broker: str) -> None:
        self._addr = wake_address(broker)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)

    def wake(self) -> None:
        try:
            self._sock.sendto(b"\0", self._addr)
        except OSError:  # no sender listening, or its queue is full (it is awake then)
            pass

    def close(self) -> None:
        self._sock.close()
