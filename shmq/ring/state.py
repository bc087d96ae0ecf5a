"""The state segment: what the broker publishes for clients and the monitor to read.

The broker is the only writer; everyone else maps ``/shmq.<broker>.state`` read-only and
never slows the broker down. Fixed-capacity numpy structured tables follow a header::

    0    magic u64, version u32, header bytes u32, the six table capacities u32
    64   seq u64: the seqlock over every table (odd while the broker writes)
    128  broker pid, control-queue key, broker liveness key, start time, store dir
    704  flags u32 (bit 0: ``shm_gid`` is set), shm_gid u32: the ``shmGroup`` whose members may
         trust objects of this broker that their group owns
    712  bell_gen u64: generation of the broker's doorbell (``broker_bell_name``), raised when
         a flood makes it rotate; a client reads it to nudge the broker before it has a channel
    720  meta_gen u64: raised inside every seqlock section that rewrites topic rows or groups and
         members (never by the per-pass max-offset stores): a consumer that read the same value
         before knows its cached topic rows, queue counts, perms and members are current

Readers copy what they need between two loads of an even, unchanged ``seq`` and retry
otherwise, so multi-word entries are never seen torn. A lone aligned 8-byte field (a queue's
max offset) is atomic on its own and may be read without the seqlock. Rows have a ``used``
flag; names are NUL-padded UTF-8. ``StateLayout`` and ``StateView`` are pure and work over any
buffer; ``StateWriter`` and ``StateReader`` add the mapping.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import posix_ipc

from shmq.errors import BrokerGoneError, BrokerNotFoundError, StateLayoutError
from shmq.ring.owner import Trust, foreign_segment
from shmq.ring.shm import Segment, ipc_name, unlink_segment

MAGIC = 0x4554415453514D53  # b"SMQSTATE" as little-endian
VERSION = 4  # 2: the stats row gained the broker health fields (role, disk, backlogs, replicas); 3: meta_gen;
# 4: the stats row gained pop_inflight and pop_revived, group rows inflight
HEADER_BYTES = 1024
_SEQ = 8
SEQ_WORD = _SEQ  # the seqlock as a native 8-byte word of the header (``StateReader.words``)
META_GEN_WORD = 720 // 8  # ``meta_gen`` as a native 8-byte word of the header
FLAG_SHM_GID = 1
_SEQ_MASK = (1 << 64) - 1  # the sequence wraps like the u64 it is stored in
NAME = "S128"

HEADER = np.dtype(
    {
        "names": [
            "magic",
            "version",
            "header_bytes",
            "topics",
            "queues",
            "groups",
            "members",
            "offsets",
            "clients",
            "seq",
            "broker_pid",
            "control_key",
            "alive_key",
            "started_ms",
            "store_dir",
            "flags",
            "shm_gid",
            "bell_gen",
            "meta_gen",
        ],
        "formats": [
            "<u8",
            "<u4",
            "<u4",
            "<u4",
            "<u4",
            "<u4",
            "<u4",
            "<u4",
            "<u4",
            "<u8",
            "<u4",
            "<u4",
            "<u4",
            "<u8",
            "S512",
            "<u4",
            "<u4",
            "<u8",
            "<u8",
        ],
        "offsets": [0, 8, 12, 16, 20, 24, 28, 32, 36, 64, 128, 132, 136, 144, 192, 704, 708, 712, 720],
        "itemsize": HEADER_BYTES,
    }
)
TOPIC = np.dtype(
    [
        ("used", "u1"),
        ("perm", "u1"),
        ("read_queues", "<u2"),
        ("write_queues", "<u2"),
        ("queue_base", "<u4"),
        ("msgs_in", "<u8"),
        ("bytes_in", "<u8"),
        ("msgs_out", "<u8"),
        ("bytes_out", "<u8"),
        ("name", NAME),
    ],
    align=True,
)
QUEUE = np.dtype([("topic", "<u4"), ("queue_id", "<u4"), ("min_offset", "<i8"), ("max_offset", "<i8")], align=True)
GROUP = np.dtype(
    [("used", "u1"), ("model", "u1"), ("members", "<u4"), ("version", "<u8"), ("name", NAME), ("inflight", "<u8")],
    align=True,
)
MEMBER = np.dtype([("used", "u1"), ("group", "<u4"), ("client_id", "<u8")], align=True)
OFFSET = np.dtype([("used", "u1"), ("group", "<u4"), ("queue", "<u4"), ("offset", "<i8")], align=True)
CLIENT = np.dtype(
    [
        ("used", "u1"),
        ("role", "u1"),
        ("pid", "<u4"),
        ("alive_key", "<u4"),
        ("group", "<i4"),
        ("client_id", "<u8"),
        ("attached_ms", "<u8"),
        ("request_fill", "<u4"),
        ("response_fill", "<u4"),
    ],
    align=True,
)
STATS = np.dtype(
    [
        ("msgs_in", "<u8"),
        ("bytes_in", "<u8"),
        ("msgs_out", "<u8"),
        ("bytes_out", "<u8"),
        ("busy_rejections", "<u8"),
        ("max_phy_offset", "<i8"),
        ("flush_offset", "<i8"),
        ("replica_offset", "<i8"),
        # health, published once a second (BrokerHealth): what `shmq top` and the exporter show
        ("health_ms", "<u8"),
        ("role", "u1"),
        ("version", "S15"),
        ("min_phy_offset", "<i8"),
        ("disk_used_ratio", "<f8"),
        ("disk_warning_ratio", "<f8"),
        ("disk_clean_ratio", "<f8"),
        ("delay_backlog", "<u8"),
        ("timer_backlog", "<u8"),
        ("half_backlog", "<u8"),
        ("dlq_messages", "<u8"),
        ("replicas", "<u4"),
        ("replicas_in_sync", "<u4"),
        ("master_offset", "<i8"),
        ("pop_inflight", "<u8"),
        ("pop_revived", "<u8"),
    ],
    align=True,
)
"""``replica_offset``: on a master the best in-sync replica's acked offset (-1: none); on a replica
its own log end, with ``master_offset`` the master's as last heard (-1: never)."""
QUEUE_WORDS = QUEUE.itemsize // 8  # a queue row as native 8-byte words
MIN_WORD = QUEUE.fields["min_offset"][1] // 8  # type: ignore[index]  # a structured dtype has fields
MAX_WORD = QUEUE.fields["max_offset"][1] // 8  # type: ignore[index]
MAX_PHY_WORD = STATS.fields["max_phy_offset"][1] // 8  # type: ignore[index]
_TABLES = (
    ("topics", TOPIC),
    ("queues", QUEUE),
    ("groups", GROUP),
    ("members", MEMBER),
    ("offsets", OFFSET),
    ("clients", CLIENT),
)

T = TypeVar("T")


def _align64(n: int) -> int:
    return (n + 63) & ~63


@dataclass(frozen=True)
class StateLayout:
    """Table capacities, and from them where each table sits in the segment."""

    topics: int = 4096
    queues: int = 65536
    groups: int = 256
    members: int = 2048
    offsets: int = 131072
    clients: int = 1024

    def places(self) -> dict[str, tuple[np.dtype, int, int]]:
        """Table name -> (row dtype, rows, byte offset); ``stats`` is one row at the end."""
        out = {}
        pos = HEADER_BYTES
        for name, dtype in _TABLES:
            rows = getattr(self, name)
            out[name] = (dtype, rows, pos)
            pos = _align64(pos + dtype.itemsize * rows)
        out["stats"] = (STATS, 1, pos)
        return out

    @property
    def size(self) -> int:
        """Segment bytes."""
        _, _, pos = self.places()["stats"]
        return _align64(pos + STATS.itemsize)


class StateView:
    """The header and tables as numpy arrays over a buffer (the segment or a copy of it)."""

    def __init__(self, buf: Any, layout: StateLayout) -> None:
        self.layout = layout
        self.header = np.frombuffer(buf, HEADER, 1, 0)
        places = layout.places()
        self.topics, self.queues, self.groups, self.members, self.offsets, self.clients, stats = (
            np.frombuffer(buf, dtype, rows, pos) for dtype, rows, pos in places.values()
        )
        self.stats = stats

    def topic_slot(self, name: str) -> int | None:
        """Row of topic ``name``, or None."""
        hits = np.flatnonzero((self.topics["used"] != 0) & (self.topics["name"] == name.encode()))
        return int(hits[0]) if len(hits) else None

    def group_slot(self, name: str) -> int | None:
        """Row of consumer group ``name``, or None."""
        hits = np.flatnonzero((self.groups["used"] != 0) & (self.groups["name"] == name.encode()))
        return int(hits[0]) if len(hits) else None

    def group_members(self, group: int) -> list[int]:
        """Sorted client ids of the live members of group row ``group``."""
        rows = self.members[(self.members["used"] != 0) & (self.members["group"] == group)]
        return sorted(int(c) for c in rows["client_id"])

    def topic_queues(self, slot: int) -> np.ndarray:
        """The queue rows of topic row ``slot`` (a view)."""
        t = self.topics[slot]
        count = max(int(t["read_queues"]), int(t["write_queues"]))
        base = int(t["queue_base"])
        return self.queues[base : base + count]


def format_state(
    buf: Any,
    layout: StateLayout,
    store_dir: str,
    control_key: int,
    alive_key: int,
    broker_pid: int,
    shm_gid: int | None = None,
) -> None:
    """Write a fresh header (tables zero) into ``buf``."""
    if len(store_dir.encode()) > HEADER["store_dir"].itemsize:
        raise ValueError(f"store path too long for the state segment: {store_dir}")
    header = np.frombuffer(buf, HEADER, 1, 0)
    header[0] = (
        0,
        VERSION,
        HEADER_BYTES,
        layout.topics,
        layout.queues,
        layout.groups,
        layout.members,
        layout.offsets,
        layout.clients,
        0,
        broker_pid,
        control_key,
        alive_key,
        int(time.time() * 1000),
        store_dir.encode(),
        FLAG_SHM_GID if shm_gid is not None else 0,
        shm_gid or 0,
        0,
        0,
    )
    header["magic"] = MAGIC


def read_layout(buf: Any) -> StateLayout:
    """The layout a state buffer declares; ``StateLayoutError`` if it is not ours."""
    if len(buf) < HEADER_BYTES:
        raise StateLayoutError("state segment is shorter than its header")
    h = np.frombuffer(buf, HEADER, 1, 0)[0]
    if int(h["magic"]) != MAGIC:
        raise StateLayoutError("state segment has a wrong magic (not shmq, or not initialised)")
    if int(h["version"]) != VERSION or int(h["header_bytes"]) != HEADER_BYTES:
        raise StateLayoutError(f"state segment version {int(h['version'])}, this shmq reads {VERSION}")
    layout = StateLayout(*(int(h[name]) for name, _ in _TABLES))
    if len(buf) < layout.size:
        raise StateLayoutError(f"state segment of {len(buf)} bytes is smaller than its layout ({layout.size})")
    return layout


def state_name(broker: str) -> str:
    """Name of ``broker``'s state segment."""
    return ipc_name(broker, "state")


class StateWriter:
    """The broker's read-write mapping; change tables only inside ``with writer.update()``."""

    def __init__(self, segment: Segment, layout: StateLayout) -> None:
        self.segment = segment
        self.view = StateView(segment.buf, layout)
        self._seq = segment.buf[:HEADER_BYTES].cast("Q")
        # the sequence is kept here and only stored: a process that can write the segment must
        # not make the broker's next store overflow (or break the parity readers rely on)
        self._seq_now = self._seq[_SEQ] & ~1
        self._meta_now = self._seq[META_GEN_WORD]
        _, rows, pos = layout.places()["queues"]
        # the queue table as native 8-byte words: lone aligned stores of a max offset (hot path)
        self.queue_words = segment.buf[pos : pos + rows * QUEUE.itemsize].cast("q")
        _, _, pos = layout.places()["stats"]
        # the stats row as native 8-byte words: the commitlog end published after each pass of puts
        self.stats_words = segment.buf[pos : pos + STATS.itemsize].cast("q")

    def begin(self) -> int:
        """Open a seqlock write section without a context manager (hot path); pass the result to ``end``."""
        seq = self._seq_now
        self._seq[_SEQ] = seq + 1
        return seq

    def end(self, seq: int) -> None:
        """Close the section ``begin`` opened."""
        self._seq_now = (seq + 2) & _SEQ_MASK
        self._seq[_SEQ] = self._seq_now

    @classmethod
    def create(
        cls,
        broker: str,
        store_dir: str,
        control_key: int,
        alive_key: int,
        layout: StateLayout | None = None,
        shm_gid: int | None = None,
    ) -> StateWriter:
        """Create and format ``/shmq.<broker>.state`` (removed again if formatting fails)."""
        layout = layout or StateLayout()
        segment = Segment.create(state_name(broker), layout.size)
        try:
            format_state(segment.buf, layout, store_dir, control_key, alive_key, os.getpid(), shm_gid)
        except BaseException:
            segment.close()
            unlink_segment(segment.name)
            raise
        return cls(segment, layout)

    @contextmanager
    def update(self, meta: bool = False) -> Iterator[StateView]:
        """Seqlock write section: ``seq`` is odd inside, bumped to the next even on exit.

        ``meta``: the section rewrites topic rows or groups/members, so ``meta_gen`` is raised
        inside it (consumers compare that one word instead of re-reading the tables)."""
        seq = self.begin()
        try:
            if meta:
                self._meta_now = (self._meta_now + 1) & _SEQ_MASK
                self._seq[META_GEN_WORD] = self._meta_now
            yield self.view
        finally:
            self.end(seq)

    def close(self) -> None:
        """Unmap (the name stays)."""
        self._seq.release()
        self.queue_words.release()
        self.stats_words.release()
        self.view = None  # type: ignore[assignment]
        self.segment.close()

    def unlink(self) -> None:
        """Remove the segment name."""
        unlink_segment(self.segment.name)


class StateReader:
    """A read-only mapping with seqlock-consistent reads."""

    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.layout = read_layout(segment.buf)
        self.view = StateView(segment.buf, self.layout)
        self._seq = segment.buf[:HEADER_BYTES].cast("Q")
        _, rows, pos = self.layout.places()["queues"]
        self.queue_words = segment.buf[pos : pos + rows * QUEUE.itemsize].cast("q")
        """The queue table as native 8-byte words (``QUEUE_WORDS`` a row): lone aligned loads of
        min/max offsets for hot-path readers, which bracket them with two loads of ``seq``."""
        h = self.view.header[0]
        self.trust = Trust.client(int(h["shm_gid"]) if int(h["flags"]) & FLAG_SHM_GID else None)
        """Whose objects this broker's clients accept: the reader's user, root, and the broker's
        ``shmGroup`` if the reader is a member."""

    @classmethod
    def open(cls, broker: str) -> StateReader:
        """Map ``broker``'s state read-only; ``BrokerNotFoundError`` if there is none.

        ``ForeignOwnerError`` if the segment belongs to a user this process does not trust
        (``Trust``): another user's broker of the same name, which must not get our messages.
        """
        name = state_name(broker)
        what = f"state segment {name} of broker {broker!r}"
        try:
            segment = Segment.open(name, read_only=True)
        except posix_ipc.ExistentialError:
            raise BrokerNotFoundError(f"no broker named {broker!r} is running (no state segment)") from None
        except posix_ipc.PermissionsError:  # another user's broker (a trusted owner would have let us read)
            raise foreign_segment(what, name) from None
        try:
            reader = cls._formatted(segment)
        except StateLayoutError:
            segment.close()
            Trust.client().check(what, *segment.owner)  # another user's garbage says so first
            raise
        if reader is None:
            segment.close()
            Trust.client().check(what, *segment.owner)
            raise BrokerNotFoundError(f"broker {broker!r} is still starting")
        try:
            reader.trust.check(what, *segment.owner)
        except BaseException:
            reader.close()
            raise
        return reader

    @classmethod
    def _formatted(cls, segment: Segment) -> StateReader | None:
        """The reader of ``segment``; None while its magic is 0 (the broker is between sizing
        the segment and writing its header, the magic last). The magic may appear just after
        the first look: then the header is read again."""
        try:
            return cls(segment)
        except StateLayoutError:
            if len(segment.buf) < HEADER_BYTES:
                raise
            magic = int(np.frombuffer(segment.buf, HEADER, 1, 0)[0]["magic"])
            if magic == MAGIC:
                return cls(segment)
            if magic == 0:
                return None
            raise

    @property
    def seq(self) -> int:
        """Current seqlock value (changes on every broker update)."""
        return self._seq[_SEQ]

    @property
    def words(self) -> memoryview:
        """The header as native 8-byte words (``seq`` at ``_SEQ``, ``meta_gen`` at ``META_GEN_WORD``):
        lone aligned loads for hot-path readers."""
        return self._seq

    def read(self, fn: Callable[[StateView], T], timeout: float = 1.0) -> T:
        """``fn(view)`` from one consistent moment; ``fn`` must copy what it returns.

        Retried while the broker writes; a sequence that stays at one odd value for
        ``timeout`` means the broker died mid-update (a live writer moves it on).
        """
        seqs = self._seq
        deadline = 0.0  # set on the first pass: no sequence value equals ``last`` then
        last: int | None = None
        while True:
            before = seqs[_SEQ]
            if not before & 1:
                try:
                    result = fn(self.view)
                except Exception:
                    if seqs[_SEQ] == before:
                        raise
                else:
                    if seqs[_SEQ] == before:
                        return result
            if before != last:
                last, deadline = before, time.monotonic() + timeout
            elif time.monotonic() > deadline:
                raise BrokerGoneError("state segment stuck mid-update: the broker died while writing it")
            time.sleep(0)

    def snapshot(self, timeout: float = 1.0) -> StateView:
        """A private consistent copy of the whole segment."""
        size = self.layout.size
        data = self.read(lambda _: bytes(self.segment.buf[:size]), timeout)
        return StateView(bytearray(data), self.layout)

    def close(self) -> None:
        """Unmap."""
        self._seq.release()
        self.queue_words.release()
        self.view = None  # type: ignore[assignment]
        self.segment.close()
