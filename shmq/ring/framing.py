"""Single-producer single-consumer byte ring over any writable buffer (pure, no I/O).

Layout (offsets in bytes from the start of the ring's buffer)::

    0    meta line: magic u64, capacity u64
    64   head: bytes ever written by the producer (u64, only the producer stores it)
    128  tail: bytes ever released by the consumer (u64, only the consumer stores it)
    192  consumer-parked flag (u64)
    256  producer-parked flag (u64)
    320  data area, ``capacity`` bytes, a power of two

Each counter sits on its own 64-byte cache line so the two sides never false-share.
Counters are native-endian u64 (little-endian on x86-64; rings live in memory only, never on
disk) stored through a ``memoryview.cast("Q")``: CPython packs a native item with one 8-byte
``memcpy`` that compiles to a single aligned store, so a peer never sees a torn counter
(``struct`` with ``"<Q"`` packs byte by byte and could tear).

Frames are 8-byte aligned: ``[u32 length][u32 kind]`` little-endian, then ``length`` payload
bytes padded to 8. A frame never straddles the end of the data area: when it does not fit, a
WRAP marker (kind 1, length 0) is written and the rest of the area is skipped. Kinds below
``FIRST_USER_KIND`` are reserved for the ring itself.

Every counter is in memory the peer can write. A side trusts only its private copies of its
own positions: the consumer checks each head it loads (aligned, not backwards, at most a ring
ahead), the producer each tail (aligned, not past its head, not more than a ring behind), and
``used()`` is clamped; a counter that fails a check raises ``CorruptFrameError``.

Memory ordering: the producer copies the payload, then stores the head; the consumer loads
the head, then reads the payload. x86-64 (TSO) keeps stores in order and loads in order, so
that is enough there. A port to a weakly ordered CPU (ARM, POWER) must put a release barrier
before the head/tail stores and an acquire barrier after their loads (``full_fence`` works).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from shmq.errors import CorruptFrameError

MAGIC = 0x31474E4952514D53  # b"SMQRING1" read as little-endian u64
HEADER_BYTES = 320
FRAME_HEADER = 8
KIND_WRAP = 1
FIRST_USER_KIND = 16
KIND_MAX = 0xFFFF

CONSUMER = 24  # word index of the consumer-parked flag
PRODUCER = 32  # word index of the producer-parked flag
_HEAD = 8
_TAIL = 16
_FRAME = struct.Struct("<II")


def _align8(n: int) -> int:
    return (n + 7) & ~7


def frame_bytes(payload_len: int) -> int:
    """Bytes a frame with this payload takes in the data area."""
    return FRAME_HEADER + _align8(payload_len)


_FENCE_LOCK = threading.Lock()


def full_fence() -> None:
    """Full memory barrier (orders a store before a later load, which TSO alone does not).

    Parking is Dekker's pattern: one side stores its parked flag then loads the counter, the
    other stores the counter then loads the flag. Taking an uncontended lock executes a
    locked read-modify-write instruction (glibc ``sem_trywait``/``sem_post``), a full barrier
    on x86-64, for ~50 ns and no system call.
    """
    _FENCE_LOCK.acquire()
    _FENCE_LOCK.release()


@dataclass(frozen=True)
class RingLayout:
    """Where a ring of ``capacity`` data bytes lives inside its buffer."""

    capacity: int

    def __post_init__(self) -> None:
        if self.capacity < 64 or self.capacity & (self.capacity - 1):
            raise ValueError(f"ring capacity must be a power of two >= 64, got {self.capacity}")

    @property
    def size(self) -> int:
        """Total bytes (header + data) the ring needs."""
        return HEADER_BYTES + self.capacity

    @property
    def max_payload(self) -> int:
        """Largest payload a frame may carry: half the area, so it fits even after a wrap."""
        return self.capacity // 2 - FRAME_HEADER


class Ring:
    """One side's handle on a ring; the producer uses the write half, the consumer the read half.

    Readers get zero-copy ``memoryview``s into the ring that stay valid until ``release()``.
    A hostile producer can still change bytes after validation, so a consumer that trusts
    payload contents must copy them first.
    """

    def __init__(self, buf: memoryview, layout: RingLayout | None = None) -> None:
        mv = memoryview(buf).cast("B")
        counters = mv[:HEADER_BYTES].cast("Q")
        if counters[0] != MAGIC:
            raise CorruptFrameError("ring header has no magic: not a formatted ring")
        capacity = counters[1]
        if layout is not None and layout.capacity != capacity:
            raise CorruptFrameError(f"ring capacity {capacity} != expected {layout.capacity}")
        self.layout = RingLayout(capacity)
        if len(mv) < self.layout.size:
            raise ValueError(f"buffer of {len(mv)} bytes is smaller than the ring ({self.layout.size})")
        self._c = counters
        self._data = mv[HEADER_BYTES : HEADER_BYTES + capacity]
        self._cap = capacity
        self._mask = capacity - 1
        self._max_payload = self.layout.max_payload
        self._head = counters[_HEAD]
        self._tail_seen = counters[_TAIL]
        self._pending: tuple[int, int, int] | None = None
        self._rpos = counters[_TAIL]
        self._released = self._rpos
        self._head_seen = self._rpos

    @classmethod
    def create(cls, buf: memoryview, layout: RingLayout) -> Ring:
        """Format a fresh (empty) ring in ``buf`` and attach to it."""
        mv = memoryview(buf).cast("B")
        if len(mv) < layout.size:
            raise ValueError(f"buffer of {len(mv)} bytes is smaller than the ring ({layout.size})")
        mv[:HEADER_BYTES] = bytes(HEADER_BYTES)
        counters = mv[:HEADER_BYTES].cast("Q")
        counters[1] = layout.capacity
        counters[0] = MAGIC
        counters.release()
        ring = cls(mv, layout)
        # the positions of a fresh ring are 0, whatever a peer wrote since the format
        ring._head = ring._tail_seen = ring._rpos = ring._released = ring._head_seen = 0
        return ring

    def close(self) -> None:
        """Drop this handle's views of the buffer so the mapping can be closed."""
        self._data.release()
        self._c.release()

    # -- producer ---------------------------------------------------------------------

    def _place(self, kind: int, n: int) -> int:
        """Write the frame header (and a WRAP marker if needed); return payload offset or -1."""
        if n > self._max_payload:
            raise ValueError(f"payload of {n} bytes exceeds the ring's limit of {self._max_payload}")
        if not FIRST_USER_KIND <= kind <= KIND_MAX:
            raise ValueError(f"frame kind {kind} is outside {FIRST_USER_KIND}..{KIND_MAX}")
        size = FRAME_HEADER + ((n + 7) & ~7)
        head = self._head
        off = head & self._mask
        room = self._cap - off
        need = size if size <= room else room + size
        if need > self._cap - (head - self._tail_seen):
            self._load_tail()
            if need > self._cap - (head - self._tail_seen):
                return -1
        if size > room:
            _FRAME.pack_into(self._data, off, 0, KIND_WRAP)
            head += room
            off = 0
        _FRAME.pack_into(self._data, off, n, kind)
        self._head = head + size
        return off + FRAME_HEADER

    def try_write(self, kind: int, payload: bytes | memoryview) -> bool:
        """Copy one frame in and publish it; False when the ring has no room now."""
        n = len(payload)
        pos = self._place(kind, n)
        if pos < 0:
            return False
        self._data[pos : pos + n] = payload
        self._c[_HEAD] = self._head
        return True

    def write_batch(self, frames: Iterable[tuple[int, bytes | memoryview]]) -> int:
        """Copy frames in order until one does not fit, publish them at once; return how many."""
        count = 0
        data = self._data
        for kind, payload in frames:
            n = len(payload)
            pos = self._place(kind, n)
            if pos < 0:
                break
            data[pos : pos + n] = payload
            count += 1
        if count:
            self._c[_HEAD] = self._head
        return count

    def write_packed(self, frames: bytes | memoryview, frame_size: int) -> int:
        """Copy pre-framed frames of ``frame_size`` bytes each (headers included) in as few copies as
        the wrap allows, publish them at once; return how many fit.

        ``frames`` must hold whole frames ``[u32 length][u32 kind] payload pad8`` of a user kind,
        each exactly ``frame_size`` bytes (a multiple of 8); the caller vouches for their headers.
        """
        if frame_size < FRAME_HEADER or frame_size & 7 or frame_size - FRAME_HEADER > self._max_payload:
            raise ValueError(f"bad packed frame size {frame_size}")
        total = len(frames) - len(frames) % frame_size
        data, cap, mask = self._data, self._cap, self._mask
        head = self._head
        pos = 0
        while pos < total:
            free = cap - (head - self._tail_seen)
            off = head & mask
            room = cap - off
            need = frame_size if frame_size <= room else room + frame_size
            if need > free:
                self._load_tail()
                free = cap - (head - self._tail_seen)
                if need > free:
                    break
            if frame_size > room:
                _FRAME.pack_into(data, off, 0, KIND_WRAP)
                head += room
                free -= room
                off, room = 0, cap
            k = min(room, free, total - pos) // frame_size * frame_size
            data[off : off + k] = frames[pos : pos + k]
            head += k
            pos += k
        if pos:
            self._head = head
            self._c[_HEAD] = head
        return pos // frame_size

    def reserve(self, kind: int, size: int) -> memoryview | None:
        """Room for one frame of up to ``size`` bytes to encode into in place; None if full.

        Nothing is visible to the consumer until ``commit()``.
        """
        if self._pending is not None:
            raise RuntimeError("commit() the previous reservation first")
        pos = self._place(kind, size)
        if pos < 0:
            return None
        self._pending = (pos, kind, size)
        return self._data[pos : pos + size]

    def commit(self, length: int | None = None) -> None:
        """Publish the reserved frame, shrunk to ``length`` bytes if given."""
        if self._pending is None:
            raise RuntimeError("nothing reserved")
        pos, kind, size = self._pending
        self._pending = None
        if length is not None and length != size:
            if not 0 <= length <= size:
                raise ValueError(f"commit length {length} is outside 0..{size}")
            _FRAME.pack_into(self._data, pos - FRAME_HEADER, length, kind)
            self._head -= _align8(size) - _align8(length)
        self._c[_HEAD] = self._head

    def free_space(self) -> int:
        """Bytes the producer may still fill (frames also pay headers, padding and wraps)."""
        self._load_tail()
        return self._cap - (self._head - self._tail_seen)

    def _load_tail(self) -> None:
        """Take the consumer's tail, checked: the consumer may only release whole frames the
        producer wrote (a bad tail would let the producer overwrite unread frames or count
        room that is not there)."""
        tail = self._c[_TAIL]
        if tail & 7 or tail > self._head or self._head - tail > self._cap or tail < self._tail_seen:
            raise CorruptFrameError(
                f"tail {tail} is not a position the consumer may release to "
                f"(head {self._head}, last tail {self._tail_seen}, capacity {self._cap})"
            )
        self._tail_seen = tail

    def writable(self, payload_len: int) -> bool:
        """Whether a frame with this payload would fit right now, counting a possible wrap."""
        size = frame_bytes(payload_len)
        room = self._cap - (self._head & self._mask)
        need = size if size <= room else room + size
        return need <= self.free_space()

    # -- consumer ---------------------------------------------------------------------

    def _corrupt(self, reason: str) -> CorruptFrameError:
        return CorruptFrameError(f"{reason} (read position {self._rpos}, head {self._head_seen}, capacity {self._cap})")

    def _corrupt_at(self, rpos: int, reason: str) -> CorruptFrameError:
        self._rpos = rpos
        return self._corrupt(reason)

    def _load_head(self) -> int:
        head = self._c[_HEAD]
        if head & 7:
            raise self._corrupt(f"head {head} is not 8-byte aligned")
        if head < self._rpos:
            raise self._corrupt(f"head {head} went backwards")
        if head - self._released > self._cap:
            raise self._corrupt(f"head {head} is more than a ring ahead of the tail")
        self._head_seen = head
        return head

    def has_data(self) -> bool:
        """Whether unread frames (or a wrap marker) are waiting."""
        return self._rpos != self._c[_HEAD]

    def read(self) -> tuple[int, memoryview] | None:
        """Next frame as (kind, payload view), or None when empty; views live until release()."""
        data = self._data
        while True:
            avail = self._head_seen - self._rpos
            if avail == 0:
                avail = self._load_head() - self._rpos
                if avail == 0:
                    return None
            off = self._rpos & self._mask
            length, kind = _FRAME.unpack_from(data, off)
            if kind == KIND_WRAP:
                if length:
                    raise self._corrupt(f"wrap marker with length {length}")
                skip = self._cap - off
                if skip > avail:
                    raise self._corrupt("wrap marker beyond the written area")
                self._rpos += skip
                continue
            if not FIRST_USER_KIND <= kind <= KIND_MAX:
                raise self._corrupt(f"unknown frame kind {kind}")
            size = FRAME_HEADER + ((length + 7) & ~7)
            if size > self._cap - off:
                raise self._corrupt(f"frame of {length} bytes overruns the end of the data area")
            if size > avail:
                raise self._corrupt(f"frame of {length} bytes overruns the written area ({avail} bytes)")
            self._rpos += size
            start = off + FRAME_HEADER
            return kind, data[start : start + length]

    def read_batch(self, max_frames: int) -> list[tuple[int, memoryview]]:
        """Up to ``max_frames`` frames (see ``read``), with the same checks, in one loop.

        The head is loaded once up front and again only when the frames it covered run out.
        """
        out: list[tuple[int, memoryview]] = []
        append = out.append
        data, cap, mask, unpack = self._data, self._cap, self._mask, _FRAME.unpack_from
        rpos = self._rpos
        avail = self._head_seen - rpos
        try:
            while len(out) < max_frames:
                if avail == 0:
                    self._rpos = rpos
                    avail = self._load_head() - rpos
                    if avail == 0:
                        break
                off = rpos & mask
                length, kind = unpack(data, off)
                if kind == KIND_WRAP:
                    if length:
                        raise self._corrupt_at(rpos, f"wrap marker with length {length}")
                    skip = cap - off
                    if skip > avail:
                        raise self._corrupt_at(rpos, "wrap marker beyond the written area")
                    rpos += skip
                    avail -= skip
                    continue
                if not FIRST_USER_KIND <= kind <= KIND_MAX:
                    raise self._corrupt_at(rpos, f"unknown frame kind {kind}")
                size = FRAME_HEADER + ((length + 7) & ~7)
                if size > cap - off:
                    raise self._corrupt_at(rpos, f"frame of {length} bytes overruns the end of the data area")
                if size > avail:
                    raise self._corrupt_at(rpos, f"frame of {length} bytes overruns the written area ({avail} bytes)")
                rpos += size
                avail -= size
                start = off + FRAME_HEADER
                append((kind, data[start : start + length]))
        finally:
            self._rpos = rpos
        return out

    def release(self) -> None:
        """Hand every frame read so far back to the producer; their views become invalid."""
        self._released = self._rpos
        self._c[_TAIL] = self._rpos

    def used(self) -> int:
        """Bytes written and not yet released, as the shared counters say, clamped to
        0..capacity (the peer's counter may hold anything)."""
        return min(max(self._c[_HEAD] - self._c[_TAIL], 0), self._cap)

    # -- parking flags ----------------------------------------------------------------

    def parked(self, side: int) -> bool:
        """Whether ``side`` (CONSUMER or PRODUCER) says it is waiting on its doorbell."""
        return self._c[side] != 0

    def set_parked(self, side: int, value: bool) -> None:
        """Raise or clear ``side``'s parked flag."""
        self._c[side] = 1 if value else 0
