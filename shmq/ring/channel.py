"""A client's channel: one segment with a request ring and a response ring, plus doorbells.

Segment ``/shmq.<broker>.ch.<client id>``: a 64-byte header (magic, client id, ring
capacity, secret, dropped flag, broker-bell generation), the request ring (client -> broker),
the response ring (broker -> client). The segment is 0600 and only its client and the broker map it, so the
random ``secret`` the broker writes there at attach proves that a control request comes from
the channel's owner; the broker raises ``dropped`` before it lets a channel go, so the client
knows to attach again.
The client sleeps on its own doorbell ``/shmq.<broker>.ch.<client id>.bell``; the broker
sleeps on one doorbell shared by all channels, since it can only wait on one semaphore, and
parks with its flag raised in every ring it serves. That doorbell rotates when it is flooded
(``RotatingBell``): ``/shmq.<broker>.bell``, then ``/shmq.<broker>.bell.<gen>``; the broker
writes the generation into every channel header (and the state segment, for clients not yet
attached), and the client follows it when it posts (``FollowingBell``).

The client can write the whole segment at any time, so the broker never reads the header back:
it keeps the rings it formatted, and every counter it reads later is checked by the ring.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import posix_ipc

from shmq.errors import BrokerGoneError, CorruptFrameError
from shmq.ring.doorbell import Doorbell, FollowingBell
from shmq.ring.framing import Ring, RingLayout
from shmq.ring.shm import Segment, ipc_name, unlink_segment

CHANNEL_MAGIC = 0x314E4843514D53  # b"SMQCHN1" as little-endian
_HEADER = struct.Struct("<QQQQ")
_DROPPED = struct.Struct("<Q")
_DROPPED_AT = _HEADER.size
_BELL_GEN_AT = _DROPPED_AT + 8
_HEADER_BYTES = 64


def channel_name(broker: str, client_id: int) -> str:
    """Name of the channel segment of ``client_id``."""
    return ipc_name(broker, f"ch.{client_id}")


def client_bell_name(broker: str, client_id: int) -> str:
    """Name of the doorbell the client sleeps on."""
    return ipc_name(broker, f"ch.{client_id}.bell")


def broker_bell_name(broker: str, gen: int = 0) -> str:
    """Name of generation ``gen`` of the one doorbell the broker sleeps on."""
    return ipc_name(broker, "bell" if gen == 0 else f"bell.{gen}")


def follow_broker_bell(
    broker: str, gen_of: Callable[[], int], check: Callable[[str], None] | None = None
) -> FollowingBell:
    """Open the broker's bell at the generation ``gen_of()`` loads (a channel header, or the
    state segment for a client without a channel), following later rotations; ``check(name)``
    vets each later generation's owner. ``posix_ipc.ExistentialError`` if there is none."""
    return FollowingBell.open(lambda gen: broker_bell_name(broker, gen), gen_of, check)


def channel_size(ring_bytes: int) -> int:
    """Segment bytes for two rings of ``ring_bytes`` data each."""
    return _HEADER_BYTES + 2 * RingLayout(ring_bytes).size


class Channel:
    """Both rings and doorbells of one client; the broker creates it, the client opens it."""

    def __init__(
        self,
        broker: str,
        client_id: int,
        segment: Segment,
        client_bell: Doorbell,
        broker_bell: Doorbell | FollowingBell,
        owns_broker_bell: bool,
        rings: tuple[Ring, Ring] | None = None,
        secret: int = 0,
    ) -> None:
        """``rings`` and ``secret``: the broker's freshly formatted (requests, responses) and the
        secret it wrote (never read back from memory the client can change); None: read the header."""
        self.broker = broker
        self.client_id = client_id
        self.segment = segment
        self.client_bell = client_bell
        self.broker_bell = broker_bell
        self._owns_broker_bell = owns_broker_bell
        if rings is not None:
            self.requests, self.responses = rings
            self.secret = secret
            return
        magic, cid, capacity, self.secret = _HEADER.unpack_from(segment.buf, 0)
        if magic != CHANNEL_MAGIC or cid != client_id:
            raise CorruptFrameError(f"{segment.name} is not the channel of client {client_id}")
        layout = RingLayout(capacity)
        self.requests = Ring(segment.buf[_HEADER_BYTES : _HEADER_BYTES + layout.size], layout)
        second = _HEADER_BYTES + layout.size
        self.responses = Ring(segment.buf[second : second + layout.size], layout)

    @classmethod
    def create(cls, broker: str, client_id: int, ring_bytes: int, broker_bell: Doorbell, secret: int) -> Channel:
        """Broker side: create the segment, format both rings and the header with ``secret``
        (a random u64), create the client's doorbell."""
        layout = RingLayout(ring_bytes)
        name = channel_name(broker, client_id)
        segment = Segment.create(name, channel_size(ring_bytes))
        rings: list[Ring] = []
        try:
            rings.append(Ring.create(segment.buf[_HEADER_BYTES : _HEADER_BYTES + layout.size], layout))
            second = _HEADER_BYTES + layout.size
            rings.append(Ring.create(segment.buf[second : second + layout.size], layout))
            _HEADER.pack_into(segment.buf, 0, CHANNEL_MAGIC, client_id, ring_bytes, secret)
            _DROPPED.pack_into(segment.buf, _BELL_GEN_AT, broker_bell.gen)
            bell = Doorbell.create(client_bell_name(broker, client_id))
        except BaseException:
            for ring in rings:
                ring.close()
            segment.close()
            unlink_segment(name)
            raise
        return cls(
            broker,
            client_id,
            segment,
            bell,
            broker_bell,
            owns_broker_bell=False,
            rings=(rings[0], rings[1]),
            secret=secret,
        )

    @classmethod
    def open(cls, broker: str, client_id: int, check_bell: Callable[[str], None] | None = None) -> Channel:
        """Client side: map the channel the broker made for ``client_id``; ``check_bell(name)``
        vets the owner of each later generation of the broker's bell (``FollowingBell``)."""
        try:
            segment = Segment.open(channel_name(broker, client_id))
        except posix_ipc.ExistentialError:
            raise BrokerGoneError(f"channel {channel_name(broker, client_id)} does not exist") from None
        buf = segment.buf
        try:
            client_bell = Doorbell.open(client_bell_name(broker, client_id))
            broker_bell = follow_broker_bell(broker, lambda: _DROPPED.unpack_from(buf, _BELL_GEN_AT)[0], check_bell)
        except posix_ipc.ExistentialError:
            segment.close()
            raise BrokerGoneError(f"doorbells of broker {broker!r} are gone") from None
        return cls(broker, client_id, segment, client_bell, broker_bell, owns_broker_bell=True)

    def mark_dropped(self) -> None:
        """Broker side, before letting the channel go: tell the client it must attach again."""
        _DROPPED.pack_into(self.segment.buf, _DROPPED_AT, 1)

    def set_bell_gen(self, gen: int) -> None:
        """Broker side: publish the generation of the broker's bell (``RotatingBell``)."""
        _DROPPED.pack_into(self.segment.buf, _BELL_GEN_AT, gen)

    def dropped(self) -> bool:
        """Client side: whether the broker let this channel go (detach by the broker, a drop)."""
        answer: bool = _DROPPED.unpack_from(self.segment.buf, _DROPPED_AT)[0] != 0
        return answer

    def close(self) -> None:
        """Unmap and close this side's handles (names stay until ``unlink``)."""
        self.requests.close()
        self.responses.close()
        self.segment.close()
        self.client_bell.close()
        if self._owns_broker_bell:
            self.broker_bell.close()

    def unlink(self) -> None:
        """Broker side: remove the segment and the client's doorbell names."""
        unlink_segment(self.segment.name)
        self.client_bell.unlink()
