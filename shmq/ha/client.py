"""The replica's HA client: one thread that follows the master's commitlog (RocketMQ's HAClient).

It connects to ``haMasterAddress``, answers the master's HELLO with proof of ``haAuthToken``,
checks the master's proof, segment size and epoch history (``protocol.consistent_offset``),
cuts a tail the master never had (kept in DIR/diverged/), adopts the master's epoch list, and
then appends every data frame verbatim through ``ReplicaAppender`` (which checks and
dispatches the records) and reports its max offset after each run of frames and at least every
``haSendHeartbeatInterval``. Whatever breaks a connection (a refused or garbled frame, silence
over ``haHousekeepingInterval``, the master going away) is logged once and followed by a
reconnect after a delay that doubles from ``haReconnectInterval`` up to ten times that, for as
long as the replica runs. A store whose history the master does not share (HADivergedError) is
never followed: that is logged as an error and the replica keeps serving what it has.

The store is written here, under ``commitlog.put_lock`` (the appender takes it); the broker loop
learns about new entries through ``Sink`` (queues touched, metadata files), which hands them
over thread-safely and rings the broker's doorbell.
"""
from __future__ import annotations

import logging
import select
import socket
import threading
import time
from typing import Protocol

from shmq.config import BrokerConfig, split_address
from shmq.errors import CorruptRecordError, DiskFullError, HADivergedError, HAProtocolError, MetadataError, ShmqError
from shmq.ha import protocol
from shmq.store.epochs import EpochFile
from shmq.store.replicated import ReplicaAppender

log = logging.getLogger("shmq.ha.client")

RECV_BYTES = 1 << 20
DRAIN_CHUNKS = 16  # recv calls per run before reporting: a busy stream still gets its report out
POLL_S = 0.2  # longest wait on the socket: how soon a stop is seen


class Sink(Protocol):
    """Where the client hands what the broker loop must act on (``procs.replica.ReplicaInbox``)."""

    def touched(self, queues: list[tuple[str, int]]) -> None: ...

    def truncated(self) -> None: ...

    def metadata(self, kind: int, text: bytes) -> None: ...

    def wake(self) -> None: ...


class _Closed(Exception):
    """End of one connection; the message says why (logged once per kind of reason)."""

    def __init__(self, state: str, reason: str) -> None:
        super().__init__(reason)
        self.state = state


class HAClient(threading.Thread):
    """Follows the master at ``config.ha_master_address`` until ``stop()``."""

    def __init__(self, appender: ReplicaAppender, config: BrokerConfig, name: str, sink: Sink) -> None:
        super().__init__(name=f"shmq-ha-client-{name}", daemon=True)
        assert config.ha_master_address is not None
        self.address = split_address(config.ha_master_address)
        self.appender = appender
        self.epochs = EpochFile(appender.store.store_dir)
        self.config = config
        self.broker_name = name
        self.sink = sink
        self.segment_size = appender.store.commitlog.segment_size
        self._stop_event = threading.Event()
        self._sock: socket.socket | None = None
        self._state = ""
        self._floor = 0  # an empty store follows from the master's min offset (older segments were cleaned)
        self.diverged: str | None = None  # why following stopped for good
        self.stats = {"bytes": 0, "frames": 0, "connects": 0, "reconnects": 0, "last_report": -1,
                      "master_max": -1}

    # ------------------------------------------------------------------ thread

    def stop(self, timeout: float = 5.0) -> None:
        """End the connection and the thread (the broker's shutdown, before the store closes)."""
        self._stop_event.set()
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        base = self.config.ha_reconnect_interval / 1000
        delay = base
        host, port = self.address
        while not self._stop_event.is_set():
            streamed = False
            try:
                sock = socket.create_connection((host, port), timeout=self.config.ha_connect_timeout / 1000)
            except OSError as e:
                self._note("unreachable", f"master {host}:{port} unreachable ({e}); retrying every "
                                          f"{base:g}-{10 * base:g} s")
            else:
                self._sock = sock
                self.stats["connects"] += 1
                try:
                    streamed = self._follow(sock)
                except _Closed as e:
                    streamed = e.state == "closed"
                    self._note(e.state, f"connection to master {host}:{port} closed: {e}")
                except HADivergedError as e:
                    self.diverged = str(e)
                    log.error("stopped following master %s:%d: %s. The replica keeps serving its consumers what "
                              "it has", host, port, e)
                    return
                except (ShmqError, OSError) as e:
                    self._note(type(e).__name__, f"connection to master {host}:{port} failed: {e}")
                finally:
                    self._sock = None
                    sock.close()
            if self._stop_event.is_set():
                break
            self.stats["reconnects"] += 1
            delay = base if streamed else min(delay * 2, 10 * base)
            self._stop_event.wait(delay)
        log.info("HA client stopped: %d bytes in %d frames over %d connections, last report %d",
                 self.stats["bytes"], self.stats["frames"], self.stats["connects"], self.stats["last_report"])

    def _note(self, state: str, message: str) -> None:
        """Log a state once, not once per retry."""
        if state != self._state:
            self._state = state
            log.warning("%s", message)

    # ------------------------------------------------------------------ one connection

    def _follow(self, sock: socket.socket) -> bool:
        """Handshake, then append frames until the connection ends (``_Closed``); True if it streamed."""
        cfg = self.config
        session = protocol.ReplicaSession(cfg.ha_auth_token.encode(), self.broker_name, cfg.ha_max_frame_size)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        heartbeat = cfg.ha_send_heartbeat_interval / 1000
        silence = cfg.ha_housekeeping_interval / 1000
        last_rx = time.monotonic()
        next_report = float("inf")
        streaming = False
        while not self._stop_event.is_set():
            now = time.monotonic()
            wait = min(POLL_S, max(0.0, next_report - now), max(0.0, last_rx + silence - now))
            readable, _, _ = select.select([sock], [], [], wait)
            now = time.monotonic()
            if not readable:
                if now - last_rx > silence:
                    raise _Closed("silent", f"the master said nothing for {silence:g} s (haHousekeepingInterval)")
                if streaming and now >= next_report:
                    self._report(sock)
                    next_report = now + heartbeat
                continue
            chunks = self._drain(sock)
            last_rx = now
            appended = False
            for chunk in chunks:
                try:
                    events = session.receive(chunk)
                except HAProtocolError as e:
                    raise _Closed("protocol", str(e)) from None
                out = session.take_output()
                if out:
                    sock.sendall(out)
                for ev in events:
                    if isinstance(ev, protocol.Data):
                        appended |= self._append(ev)
                    elif isinstance(ev, protocol.Metadata):
                        self.sink.metadata(ev.kind, ev.text)
                    elif isinstance(ev, protocol.Welcome):
                        self._welcome(ev)
                        self._report(sock)
                        next_report = time.monotonic() + heartbeat
                        streaming = True
                        self._note("streaming", f"following master {self.address[0]}:{self.address[1]} from "
                                                f"offset {self.appender.max_offset} (its max {ev.max_offset})")
                    elif isinstance(ev, protocol.Refused):
                        raise _Closed(f"refused{ev.code}", f"the master refused (code {ev.code}): {ev.reason}")
            if appended:
                self._report(sock)
                next_report = time.monotonic() + heartbeat
            self.sink.wake()
        return streaming

    def _drain(self, sock: socket.socket) -> list[bytes]:
        """What the socket holds now (at least one recv, which select said will not block)."""
        data = sock.recv(RECV_BYTES)
        if not data:
            raise _Closed("closed", "the master closed the connection")
        chunks = [data]
        for _ in range(DRAIN_CHUNKS - 1):
            try:
                more = sock.recv(RECV_BYTES, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            if not more:
                break  # the close is seen by the next recv, after these frames are kept
            chunks.append(more)
        return chunks

    def _report(self, sock: socket.socket) -> None:
        offset = max(self.appender.max_offset, self._floor)
        sock.sendall(protocol.encode_report(offset))
        self.stats["last_report"] = offset

    def _welcome(self, w: protocol.Welcome) -> None:
        """Check the master's segment size and history; cut what it does not share; adopt its epochs."""
        if w.segment_size != self.segment_size:
            log.error("master %s:%d uses commitlog segments of %d bytes, this replica %d "
                      "(mappedFileSizeCommitLog must be equal on both): not following it",
                      *self.address, w.segment_size, self.segment_size)
            raise _Closed("segment", "segment size differs")
        try:
            own = self.epochs.entries
        except MetadataError as e:
            raise HADivergedError(f"the replica's epoch history is unreadable: {e}") from None
        mine = self.appender.max_offset
        self._floor = w.min_offset if mine == 0 else 0
        keep = protocol.consistent_offset(own, mine, w.epochs, w.max_offset)
        if keep < mine:
            cut = self.appender.truncate(keep)
            log.warning("the replica held %d bytes the master never had (offsets %d..%d): cut, kept in %s",
                        cut, keep, mine, self.appender.diverged_path(keep))
            self.sink.truncated()
        self.epochs.save(w.epochs)
        self.stats["master_max"] = w.max_offset

    def _append(self, ev: protocol.Data) -> bool:
        """Append one data frame (True) or a heartbeat (False); ``_Closed`` for a frame refused."""
        if not ev.data:
            return False
        expected = max(self.appender.max_offset, self._floor)
        if ev.offset != expected:
            raise _Closed("offset", f"frame at offset {ev.offset}, but the replica's log ends at {expected}")
        try:
            touched = self.appender.append(ev.offset, ev.data)
        except (ValueError, CorruptRecordError) as e:
            raise _Closed("record", f"frame at offset {ev.offset} refused: {e}") from None
        except DiskFullError as e:
            raise _Closed("disk", f"frame at offset {ev.offset} not written: {e}") from None
        self.stats["bytes"] += len(ev.data)
        self.stats["frames"] += 1
        if touched:
            self.sink.touched(touched)
        return True
