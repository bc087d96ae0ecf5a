"""The HA sender: RocketMQ's HAService + AcceptSocketService in one non-blocking selectors loop.

It listens on ``haListenAddress:haListenPort``, gives each replica a slot of the HA segment
(at most ``SLOTS``; more are refused busy), and streams the commitlog from each replica's
reported offset up to the ``master_offset`` the broker publishes, as fast as each socket
takes it. When no connection can take more, it sets ``sender_parked``, looks at
``master_offset`` once more (a broker that published just before the flag was visible is
caught here), and sleeps in ``select`` on the sockets and the wake-up datagram socket that
the broker writes to only while the flag is set. A report that advances a replica's acked
offset rings the broker's doorbell while the broker waits on SYNC_MASTER answers.
"""

from __future__ import annotations

import logging
import selectors
import socket
import time
from collections.abc import Callable

from shmq.config import BrokerConfig
from shmq.errors import HAProtocolError
from shmq.ha import protocol as P
from shmq.ha.connection import ReplicaConnection, Settings
from shmq.ha.log_reader import HALogReader
from shmq.ha.metadata import MetadataWatcher, load_epochs
from shmq.ha.shared import HASegment, wake_address
from shmq.ring.framing import full_fence

log = logging.getLogger("shmq.ha")
MAX_SLEEP_MS = 100  # beat and the broker's liveness are checked at least this often
TICK_MS = 50  # timers of the connections are looked at this often while busy
SLOW_MS = 1000  # metadata files and cleaned segments are looked at this often
BIND_RETRY_MS = 1000
BIND_LOG_MS = 10_000
CLOSING = (HAProtocolError, OSError, LookupError)  # what closes one connection, logged as its reason


def _reason(e: BaseException) -> str:
    """A socket error's text, else the message the connection raised."""
    return f"socket error: {e.strerror}" if isinstance(e, OSError) and e.strerror else str(e)


def _ms() -> int:
    return time.monotonic_ns() // 1_000_000


class HASender:
    """The service; ``serve`` runs until ``stop()`` or ``broker_alive()`` turns false."""

    def __init__(
        self,
        store_dir: str,
        name: str,
        config: BrokerConfig,
        ha: HASegment,
        broker_alive: Callable[[], bool],
        ring_broker: Callable[[], None],
    ) -> None:
        self.store_dir = store_dir
        self.name = name
        self.config = config
        self.ha = ha
        self._alive = broker_alive
        self._ring_broker = ring_broker
        self.settings = Settings.from_config(config)
        self.reader = HALogReader(store_dir, self.settings.segment_size)
        self.meta = MetadataWatcher(store_dir, self.settings.max_frame)
        self.meta.check()
        self.conns: dict[socket.socket, ReplicaConnection] = {}
        self._events: dict[socket.socket, int] = {}
        self.selector = selectors.DefaultSelector()
        self.wake = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.wake.setblocking(False)
        self.wake.bind(wake_address(name))  # EADDRINUSE: another sender of this broker lives
        self.selector.register(self.wake, selectors.EVENT_READ)
        self.listener: socket.socket | None = None
        self._bind_at = 0
        self._bind_logged = -BIND_LOG_MS
        self._stopping = False

    def stop(self, *_: object) -> None:
        """Signal handler: leave the loop after this pass."""
        self._stopping = True

    # ------------------------------------------------------------------ listening

    def _try_listen(self, now: int) -> None:
        """Bind the listen address; a port in use is retried every second and logged every 10 s."""
        self._bind_at = now + BIND_RETRY_MS
        host, port = self.config.ha_listen_address, self.config.ha_listen_port
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(64)
            sock.setblocking(False)
        except OSError as e:
            sock.close()
            if now - self._bind_logged >= BIND_LOG_MS:
                self._bind_logged = now
                log.warning("cannot listen on %s:%d (%s); retrying every second", host, port, e.strerror or e)
            return
        self.listener = sock
        self.selector.register(sock, selectors.EVENT_READ)
        bound = sock.getsockname()[1]
        self.ha.header["listen_port"] = bound
        log.info("listening for replicas on %s:%d", host, bound)

    def _accept(self) -> None:
        assert self.listener is not None
        while True:
            try:
                sock, peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # EMFILE and friends: the listener stays, the peer is dropped
                log.warning("accept failed: %s", e.strerror or e)
                return
            addr = f"{peer[0]}:{peer[1]}"
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            slot = self.ha.claim_slot(addr, int(time.time() * 1000))
            if slot < 0:
                try:
                    sock.send(
                        P.encode_refuse(P.REFUSE_BUSY, f"this master serves at most {len(self.ha.slot_table)} replicas")
                    )
                except OSError:
                    pass
                sock.close()
                log.warning("refused replica at %s: every slot is taken", addr)
                continue
            conn = ReplicaConnection(sock, addr, slot, self.ha, self.reader, self.settings, self._welcome_info)
            self.conns[sock] = conn
            self._events[sock] = selectors.EVENT_READ | selectors.EVENT_WRITE
            self.selector.register(sock, self._events[sock])
            log.info("connection from %s (slot %d)", addr, slot)

    def _welcome_info(self) -> tuple[int, int, list[P.Epoch], list[bytes]]:
        """Fields of a WELCOME; the config files are looked at now, not at the last slow round, so
        a replica never starts from a topic table up to a second old (it would serve the queues
        its log shows with the default count until the next round)."""
        self._pass_metadata(self.meta.check())
        return (
            self.reader.min_offset,
            self.ha.master_offset,
            load_epochs(self.store_dir),
            list(self.meta.frames.values()),
        )

    # ------------------------------------------------------------------ the loop

    def serve(self) -> None:
        """Stream until stopped or the broker is gone."""
        ha = self.ha
        header = ha.header
        conns = self.conns
        select = self.selector.select
        tick = slow = 0
        while not self._stopping:
            now = _ms()
            if now >= tick:
                tick = now + TICK_MS
                ha.beat()
                if not self._alive():
                    log.info("broker %r is gone: stopping", self.name)
                    return
                if self.listener is None and now >= self._bind_at:
                    self._try_listen(now)
                if now >= slow:
                    slow = now + SLOW_MS
                    self._slow_work()
                self._timers(now)
            master = int(header["master_offset"][0])
            busy = False
            for sock, conn in list(conns.items()):
                try:
                    conn.fill(master)
                    conn.flush()
                except CLOSING as e:
                    self._close(conn, _reason(e))
                    continue
                busy |= conn.can_fill(master)
                self._want(sock, conn.wants_write)
            timeout = 0.0
            parked = False
            if not busy:
                if any(c.caught_up(master) for c in conns.values()):
                    header["sender_parked"] = 1  # the broker wakes us from now on ...
                    parked = True
                    full_fence()  # the flag's store before the offset's load (Dekker, as ring.doorbell)
                    if int(header["master_offset"][0]) != master:  # ... and this catches what it published before
                        header["sender_parked"] = 0
                        parked = False
                        continue
                timeout = max(0, min(tick, self._next_deadline()) - _ms()) / 1000
            events = select(timeout)
            if parked:
                header["sender_parked"] = 0
            for key, mask in events:
                self._handle(key.fileobj, mask)  # type: ignore[arg-type]

    def _next_deadline(self) -> int:
        at = _ms() + MAX_SLEEP_MS
        for conn in self.conns.values():
            at = min(at, conn.next_deadline_ms())
        return at

    def _handle(self, sock: socket.socket, mask: int) -> None:
        if sock is self.wake:
            self._drain_wake()
        elif sock is self.listener:
            self._accept()
        elif mask & selectors.EVENT_READ:
            conn = self.conns.get(sock)
            if conn is None:
                return
            try:
                if conn.on_readable(int(self.ha.header["master_offset"][0])) and self.ha.header["broker_waiting"][0]:
                    self._ring_broker()
            except CLOSING as e:
                self._close(conn, _reason(e))
            except Exception as e:  # a bug must not take every replica down: this one goes, logged
                log.exception("replica %s: unexpected error", conn.addr)
                self._close(conn, f"unexpected error: {type(e).__name__}: {e}")

    def _drain_wake(self) -> None:
        while True:
            try:
                self.wake.recv(64)
            except (BlockingIOError, InterruptedError):
                return

    def _want(self, sock: socket.socket, write: bool) -> None:
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if write else 0)
        if self._events.get(sock) != events:
            self._events[sock] = events
            self.selector.modify(sock, events)

    def _timers(self, now: int) -> None:
        for conn in list(self.conns.values()):
            try:
                conn.check_timers(now)
            except CLOSING as e:
                self._close(conn, _reason(e))

    def _slow_work(self) -> None:
        """Once a second: let go of cleaned segments, pass changed config files on."""
        self.reader.refresh()
        self._pass_metadata(self.meta.check())

    def _pass_metadata(self, frames: list[bytes]) -> None:
        """Changed config files to every replica already welcomed."""
        for frame in frames:
            for conn in list(self.conns.values()):
                if conn.welcomed:  # a newer one got them with its WELCOME
                    try:
                        conn.queue_metadata(frame)
                    except HAProtocolError as e:
                        self._close(conn, _reason(e))

    def _close(self, conn: ReplicaConnection, reason: str, level: int = logging.WARNING) -> None:
        log.log(level, "closing replica %s%s: %s", conn.addr, f" ({conn.name})" if conn.name else "", reason)
        self.conns.pop(conn.sock, None)
        self._events.pop(conn.sock, None)
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.close()

    def close(self) -> None:
        """Close every connection (slots released), the listener and the wake-up socket."""
        for conn in list(self.conns.values()):
            self._close(conn, "the sender stops", logging.INFO)
        for sock in (self.listener, self.wake):
            if sock is not None:
                self.selector.unregister(sock)
                sock.close()
        self.listener = None
        self.selector.close()
        self.reader.close()
        self.ha.header["listen_port"] = 0
