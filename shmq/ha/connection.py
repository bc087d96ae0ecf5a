"""One replica connection of the HA sender (RocketMQ's HAConnection), on a non-blocking socket.

The connection owns its protocol session, its slot in the HA segment and a bounded queue of
outgoing parts (frame headers, views of the log mappings, handshake and metadata bytes). The
sender's loop calls ``on_readable`` when the socket has bytes, ``fill`` to queue log frames up
to the published master offset, ``flush`` to hand the queue to the kernel, and ``check_timers``
now and then. Anything wrong raises, and the sender closes the connection logging the message as
the reason: HAProtocolError for what the protocol forbids, TimeoutError for a silent peer,
ConnectionError and other OSErrors from the socket, LookupError for a log offset that was
cleaned. No byte of log is queued before the replica proved the token (``streaming`` needs its
first report, which needs ``Authenticated``).
"""

from __future__ import annotations

import logging
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice

from shmq.config import BrokerConfig
from shmq.errors import HAProtocolError
from shmq.ha import protocol as P
from shmq.ha.log_reader import HALogReader
from shmq.ha.shared import STREAMING, HASegment

log = logging.getLogger("shmq.ha")
OUT_LIMIT = 1 << 20  # bytes queued per connection before the loop waits for the socket
METADATA_BACKLOG = 8 * OUT_LIMIT  # queued bytes past which a metadata frame closes the connection
IOV_MAX = 64  # parts handed to one sendmsg
RECV_SIZE = 65536
Part = bytes | memoryview


@dataclass(frozen=True, slots=True)
class Settings:
    """What every connection needs from the config, in the units the loop uses."""

    token: bytes
    segment_size: int
    batch: int
    heartbeat_ms: int
    housekeeping_ms: int
    connect_timeout_ms: int
    max_frame: int

    @classmethod
    def from_config(cls, config: BrokerConfig) -> Settings:
        return cls(
            config.ha_auth_token.encode(),
            config.mapped_file_size_commit_log,
            config.ha_transfer_batch_size,
            config.ha_send_heartbeat_interval,
            config.ha_housekeeping_interval,
            config.ha_connect_timeout,
            config.ha_max_frame_size,
        )


def _ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ReplicaConnection:
    """One accepted socket; ``welcome_info()`` gives the WELCOME's fields and first metadata frames."""

    def __init__(
        self,
        sock: socket.socket,
        addr: str,
        slot: int,
        ha: HASegment,
        reader: HALogReader,
        settings: Settings,
        welcome_info: Callable[[], tuple[int, int, list[P.Epoch], list[bytes]]],
    ) -> None:
        self.sock = sock
        self.addr = addr
        self.slot = slot
        self.name = ""
        self._ha = ha
        self._reader = reader
        self._settings = settings
        self._welcome_info = welcome_info
        self._session = P.MasterSession(settings.token)
        self._head = b""  # the first bytes received: a refusal says "version" when they carry another
        self.welcomed = False  # WELCOME queued: metadata frames may follow
        self.streaming = False
        self.next_offset = -1  # where the next data frame starts (from the first report on)
        self.acked = -1
        self._sent = -1
        self._out: deque[tuple[Part, int]] = deque()  # (part, log offset once it is out, or -1)
        self.out_bytes = 0
        now = _ms()
        self._opened_ms = self._heard_ms = self._queued_ms = now
        self.queue(self._session.hello())

    # ------------------------------------------------------------------ output

    def queue(self, data: Part, end_offset: int = -1) -> None:
        self._out.append((data, end_offset))
        self.out_bytes += len(data)
        self._queued_ms = _ms()

    def queue_metadata(self, frame: bytes) -> None:
        """A changed config file; HAProtocolError if the replica has left far too much unread (it reports
        but does not read: the queue would otherwise grow with every change)."""
        if self.out_bytes >= METADATA_BACKLOG:
            raise HAProtocolError(f"the replica reads nothing: {self.out_bytes} bytes wait to be sent")
        self.queue(frame)

    def can_fill(self, master_offset: int) -> bool:
        """More log to queue and room to queue it: the loop must not sleep."""
        return self.streaming and self.next_offset < master_offset and self.out_bytes < OUT_LIMIT

    def caught_up(self, master_offset: int) -> bool:
        """Everything published is out: this connection waits for the log to grow."""
        return self.streaming and self.next_offset >= master_offset and not self._out

    def fill(self, master_offset: int) -> None:
        """Queue frames of at most ``batch`` bytes from ``next_offset`` up to ``master_offset``."""
        if not self.can_fill(master_offset):
            return
        reader, batch, offset = self._reader, self._settings.batch, self.next_offset
        out, queued = self._out, self.out_bytes
        try:
            while offset < master_offset and queued < OUT_LIMIT:
                view = reader.chunk(offset, master_offset, batch)
                size = len(view)
                out.append((P.FRAME.pack(offset, size), -1))
                offset += size
                out.append((view, offset))
                queued += size + P.FRAME.size
        finally:
            self.next_offset, self.out_bytes = offset, queued
        self._queued_ms = _ms()

    def flush(self) -> None:
        """Hand queued parts to the kernel until it takes no more; partial sends keep the rest."""
        out = self._out
        sent_any = False
        while out:
            try:
                n = self.sock.sendmsg([p for p, _ in islice(out, IOV_MAX)])
            except (BlockingIOError, InterruptedError):
                break
            sent_any = True
            self.out_bytes -= n
            while n:
                part, end = out[0]
                size = len(part)
                if n >= size:
                    n -= size
                    out.popleft()
                    if end >= 0:
                        self._sent = end
                else:
                    out[0] = (memoryview(part)[n:], end)
                    n = 0
        if sent_any and self.streaming:
            self._ha.slot_table["sent_offset"][self.slot] = self._sent

    @property
    def wants_write(self) -> bool:
        return bool(self._out)

    # ------------------------------------------------------------------ input

    def on_readable(self, master_offset: int) -> bool:
        """Read what the socket has; True if the replica's acked offset advanced."""
        try:
            data = self.sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return False
        if not data:
            raise ConnectionError("the replica closed the connection" if self.streaming else "EOF during the handshake")
        self._heard_ms = _ms()
        if len(self._head) < 6:
            self._head += data[: 6 - len(self._head)]
        try:
            events = self._session.receive(data)
        except HAProtocolError as e:
            if not self._session.authenticated:
                self._refuse(P.REFUSE_VERSION if self._wrong_version() else P.REFUSE_AUTH, str(e))
            raise
        advanced = False
        for ev in events:
            if isinstance(ev, P.Authenticated):
                self._authenticated(ev.name)
            elif isinstance(ev, P.Report):
                advanced |= self._report(ev.offset, master_offset)
            elif isinstance(ev, P.Refused):
                raise HAProtocolError(f"the replica refused: code {ev.code}: {ev.reason}")
        return advanced

    def _wrong_version(self) -> bool:
        head = self._head
        return len(head) >= 6 and head[:4] == b"SQHR" and int.from_bytes(head[4:6], "big") != P.VERSION

    def _refuse(self, code: int, reason: str) -> None:
        """Best effort: the refusal goes out if the socket takes it now; the connection closes anyway."""
        try:
            self.sock.send(P.encode_refuse(code, reason))
        except OSError:
            pass

    def _authenticated(self, name: str) -> None:
        self.name = name
        self._ha.slot_table["name"][self.slot] = name.encode()[:32]
        min_offset, max_offset, epochs, metadata = self._welcome_info()
        self.queue(self._session.welcome(self._settings.segment_size, min_offset, max_offset, epochs))
        self.welcomed = True
        for frame in metadata:
            self.queue(frame)
        log.info(
            "replica %r at %s proved the token (log %d..%d, %d epochs)",
            name,
            self.addr,
            min_offset,
            max_offset,
            len(epochs),
        )

    def _report(self, offset: int, master_offset: int) -> bool:
        if offset > master_offset:
            raise HAProtocolError(f"reported offset {offset} past the master's end {master_offset}")
        table = self._ha.slot_table
        i = self.slot
        if not self.streaming:
            low = self._reader.min_offset
            if offset < low:
                raise HAProtocolError(
                    f"reported offset {offset} below the master's min offset {low} (cleaned): "
                    "the replica cannot catch up from this master; wipe its store"
                )
            self.next_offset = self._sent = offset
            table["sent_offset"][i] = offset
            log.info("replica %r at %s streams from offset %d", self.name, self.addr, offset)
        elif offset > self.next_offset:
            raise HAProtocolError(f"reported offset {offset} past what was sent ({self.next_offset})")
        advanced = offset > self.acked
        self.acked = offset
        table["acked_offset"][i] = offset
        table["report_ms"][i] = int(time.time() * 1000)
        if not self.streaming:
            table["state"][i] = STREAMING  # after acked_offset: a reader sees a streaming slot's real ack
            self.streaming = True
        return advanced

    # ------------------------------------------------------------------ timers

    def check_timers(self, now_ms: int) -> None:
        """Close a handshake that takes too long or a silent replica; heartbeat when idle."""
        s = self._settings
        if not self._session.authenticated and now_ms - self._opened_ms >= s.connect_timeout_ms:
            self._refuse(P.REFUSE_AUTH, "handshake not done in time")
            raise TimeoutError(f"handshake not done within haConnectTimeout={s.connect_timeout_ms} ms")
        if now_ms - self._heard_ms >= s.housekeeping_ms:
            raise TimeoutError(f"silent for haHousekeepingInterval={s.housekeeping_ms} ms")
        if self.streaming and not self._out and now_ms - self._queued_ms >= s.heartbeat_ms:
            self.queue(P.frame_header(self.next_offset, 0))

    def next_deadline_ms(self) -> int:
        """The earliest time ``check_timers`` may have something to do."""
        s = self._settings
        at = self._heard_ms + s.housekeeping_ms
        if not self._session.authenticated:
            at = min(at, self._opened_ms + s.connect_timeout_ms)
        if self.streaming:
            at = min(at, self._queued_ms + s.heartbeat_ms)
        return at

    def close(self) -> None:
        """Release the slot and the socket (views of the log go with the queue)."""
        self._out.clear()
        self.out_bytes = 0
        self._ha.release_slot(self.slot)
        self.sock.close()
