"""The replica's HA client: one thread that follows the master's commitlog (RocketMQ's HAClient).

It connects to ``haMasterAddress``, answers the master's HELLO with proof of the HA token,
checks the master's proof (a master that cannot prove it feeds nothing), segment size and epoch
history (``protocol.consistent_offset``), cuts a tail the master never had (kept in
DIR/diverged/), adopts the master's epoch list, and then appends every data frame verbatim
through ``ReplicaAppender`` (which checks and dispatches the records) and reports its max
offset after each burst of frames (what one wakeup finds in the socket, up to BURST_BYTES,
checked and dispatched before the report) and at least every ``haSendHeartbeatInterval``.
Whatever breaks a connection (a refused or garbled frame, silence over
``haHousekeepingInterval``, the master going away) is logged once and followed by a
reconnect after a delay that doubles from ``haReconnectInterval`` up to ten times that, for as
long as the replica runs. A store whose history the master does not share (HADivergedError) is
never followed: that is logged as an error and the replica keeps serving what it has.

The store is written here, under ``commitlog.put_lock`` (the appender takes it); the broker loop
learns about new entries through ``Sink`` (queues touched, metadata files), which hands them
over thread-safely and rings the broker's doorbell.
"""

from __future__ import annotations

import contextlib
import logging
import re
import select
import socket
import threading
import time
from typing import Protocol

from shmq.config import BrokerConfig, split_address
from shmq.errors import CorruptRecordError, DiskFullError, HADivergedError, HAProtocolError, MetadataError, ShmqError
from shmq.ha import protocol
from shmq.store.epochs import EpochFile
from shmq.store.write.replicated import ReplicaAppender

log = logging.getLogger("shmq.ha.client")
_DIGITS = re.compile(r"\d+")

RECV_BYTES = 1 << 20  # the receive buffer, reused by every recv_into
# bytes read before the replica checks, dispatches and reports: a busy stream still gets its report out
BURST_BYTES = 16 << 20
POLL_S = 0.2  # longest wait on the socket: how soon a stop is seen


class Sink(Protocol):
    """Where the client hands what the broker loop must act on (``procs.replica.ReplicaInbox``)."""

    def touched(self, queues: list[tuple[str, int]]) -> None: ...

    def truncated(self) -> None: ...

    def metadata(self, kind: int, text: bytes) -> None: ...

    def wake(self) -> None: ...


class HAClient(threading.Thread):
    """Follows the master at ``config.ha_master_address`` until ``stop()``."""

    def __init__(self, appender: ReplicaAppender, config: BrokerConfig, name: str, token: str, sink: Sink) -> None:
        """``token``: the secret both sides prove (``shmq.ha.token.replica_token``), never empty."""
        super().__init__(name=f"shmq-ha-client-{name}", daemon=True)
        assert config.ha_master_address is not None
        self.token = token.encode()
        self.address = split_address(config.ha_master_address)
        self.appender = appender
        self.epochs = EpochFile(appender.writer.store_dir)
        self.config = config
        self.broker_name = name
        self.sink = sink
        self.segment_size = appender.writer.commitlog.segment_size
        self._stop_event = threading.Event()
        self._sock: socket.socket | None = None
        self._state = ""
        self._streamed = False  # the current connection got past the handshake
        self._recv_view = memoryview(bytearray(RECV_BYTES))
        self._next_report = float("inf")  # when the next heartbeat report is due
        self._wrote = False  # something was appended in this burst: report it
        self._floor = 0  # an empty store follows from the master's min offset (older segments were cleaned)
        self.diverged: str | None = None  # why following stopped for good
        self.stats = {"bytes": 0, "frames": 0, "connects": 0, "reconnects": 0, "last_report": -1, "master_max": -1}

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
            self._streamed = disk_full = False
            try:
                sock = socket.create_connection((host, port), timeout=self.config.ha_connect_timeout / 1000)
            except OSError as e:
                self._note(f"master {host}:{port} unreachable ({e}); retrying every {base:g}-{10 * base:g} s")
            else:
                self._sock = sock
                self.stats["connects"] += 1
                try:
                    self._note(f"connection to master {host}:{port} closed: {self._follow(sock)}")
                except HADivergedError as e:
                    self.diverged = str(e)
                    log.error(
                        "stopped following master %s:%d: %s. The replica keeps serving its consumers what it has",
                        host,
                        port,
                        e,
                    )
                    return
                except HAProtocolError as e:  # what the master sent was refused
                    self._note(f"connection to master {host}:{port} closed: {e}", logging.ERROR)
                except DiskFullError as e:  # local: reconnecting before the disk has room would only fail again
                    self._note(f"connection to master {host}:{port} closed: {e}; reconnecting once the disk has room")
                    disk_full = True
                except (ShmqError, OSError) as e:  # a full disk, a reset connection
                    self._note(f"connection to master {host}:{port} closed: {e}")
                except Exception:  # a bug must not end replication for good: logged in full, retried
                    log.exception("HA client failed; reconnecting")
                    self._state = ""
                finally:
                    self._sock = None
                    sock.close()
            if disk_full:
                self._wait_for_room(base)
            if self._stop_event.is_set():
                break
            self.stats["reconnects"] += 1
            delay = base if self._streamed else min(delay * 2, 10 * base)
            self._stop_event.wait(delay)
        log.info(
            "HA client stopped: %d bytes in %d frames over %d connections, last report %d",
            self.stats["bytes"],
            self.stats["frames"],
            self.stats["connects"],
            self.stats["last_report"],
        )

    def _wait_for_room(self, interval: float) -> None:
        """Until the store measures room again (it logs when it does) or the replica stops: each
        reconnect on a full disk would hand-shake, fail its first append and log both again."""
        space = self.appender.writer.space
        while not self._stop_event.wait(interval):
            space.recheck()
            if not space.full:
                return

    def _note(self, message: str, level: int = logging.WARNING) -> None:
        """Log a state once, not once per retry (messages differing only in numbers are one state)."""
        state = _DIGITS.sub("#", message)
        if state != self._state:
            self._state = state
            log.log(level, "%s", message)

    # ------------------------------------------------------------------ one connection

    def _follow(self, sock: socket.socket) -> str:
        """Handshake, then append frames until the connection ends: why it ended (the master closed
        it or fell silent, or we stop), or HAProtocolError for something of the master's refused;
        ``_streamed`` tells whether it got past the handshake."""
        cfg = self.config
        session = protocol.ReplicaSession(self.token, self.broker_name, cfg.ha_max_frame_size)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        silence = cfg.ha_housekeeping_interval / 1000
        last_rx = time.monotonic()
        self._next_report = float("inf")
        while not self._stop_event.is_set():
            now = time.monotonic()
            wait = min(POLL_S, max(0.0, self._next_report - now), max(0.0, last_rx + silence - now))
            readable, _, _ = select.select([sock], [], [], wait)
            now = time.monotonic()
            if not readable:
                if now - last_rx > silence:
                    return f"the master said nothing for {silence:g} s (haHousekeepingInterval)"
                if self._streamed and now >= self._next_report:  # a heartbeat report, whatever the master sends
                    self._report(sock)
                continue
            self._wrote = False
            try:
                got = self._burst(sock, session)
            except BaseException:
                with contextlib.suppress(HAProtocolError):  # the first fault is the one to tell
                    self._check()  # what was appended is checked (and cut if bad) whatever happens
                raise
            self._check()
            if not got:
                return "the master closed the connection"
            last_rx = now
            if self._wrote or (self._streamed and now >= self._next_report):
                self._report(sock)
            self.sink.wake()
        return "the replica stops"

    def _burst(self, sock: socket.socket, session: protocol.ReplicaSession) -> int:
        """Read what the socket holds now (the first recv_into, which select said will not block,
        then those that do not block, up to BURST_BYTES) and append its frames unchecked; the
        bytes read, 0 when the master closed the connection. The frames are views of the one
        receive buffer: each recv's events are used before the next recv overwrites it."""
        view = self._recv_view
        total, flags = 0, 0
        while total < BURST_BYTES:
            try:
                n = sock.recv_into(view, 0, flags)
            except (BlockingIOError, InterruptedError):
                break
            if not n:
                break  # a close after frames is seen by the next recv, after these frames are kept
            total += n
            flags = socket.MSG_DONTWAIT
            events = session.receive(view[:n])
            out = session.take_output()
            if out:
                sock.sendall(out)
            last = events[-1] if n < len(view) and events else None  # the socket is likely drained
            for ev in events:
                if isinstance(ev, protocol.Data):
                    self._take(ev, ev is last)
                    continue
                self._check()
                if isinstance(ev, protocol.Metadata):
                    self.sink.metadata(ev.kind, ev.text)
                elif isinstance(ev, protocol.Welcome):
                    self._welcome(ev)
                    self._report(sock)
                    self._streamed = True
                    self._note(
                        f"following master {self.address[0]}:{self.address[1]} from offset "
                        f"{self.appender.max_offset} (its max {ev.max_offset})",
                        logging.INFO,
                    )
                elif isinstance(ev, protocol.Refused):
                    raise HAProtocolError(f"the master refused (code {ev.code}): {ev.reason}")
        return total

    def _report(self, sock: socket.socket) -> None:
        offset = max(self.appender.max_offset, self._floor)
        sock.sendall(protocol.encode_report(offset))
        self.stats["last_report"] = offset
        self._next_report = time.monotonic() + self.config.ha_send_heartbeat_interval / 1000

    def _welcome(self, w: protocol.Welcome) -> None:
        """Check the master's segment size and history; cut what it does not share; adopt its epochs."""
        if w.segment_size != self.segment_size:
            raise HAProtocolError(
                f"the master uses commitlog segments of {w.segment_size} bytes, this replica "
                f"{self.segment_size} (mappedFileSizeCommitLog must be equal on both): not "
                "following it"
            )
        if not w.epochs and w.max_offset > 0:
            raise HAProtocolError(
                f"the master announces no epoch history for its {w.max_offset} bytes of log (its "
                "config/epochs.json is missing or unreadable): not following it, since this "
                "replica could not prove what it shares with it after a restart"
            )
        try:
            own = self.epochs.entries
        except MetadataError as e:
            raise HADivergedError(f"the replica's epoch history is unreadable: {e}") from None
        mine = self.appender.max_offset
        self._floor = w.min_offset if mine == 0 else 0
        keep = protocol.consistent_offset(own, mine, w.epochs, w.max_offset)
        if keep < mine:
            try:
                cut = self.appender.truncate(keep)
            except ValueError as e:  # not a record boundary here: the histories do not say what is shared
                raise HADivergedError(f"cannot cut the replica back to offset {keep}: {e}") from None
            log.warning(
                "the replica held %d bytes the master never had (offsets %d..%d): cut, kept in %s",
                cut,
                keep,
                mine,
                self.appender.diverged_path(keep),
            )
            self.sink.truncated()
        self.epochs.save(w.epochs)
        self.stats["master_max"] = w.max_offset

    def _take(self, ev: protocol.Data, last: bool) -> None:
        """Append a data frame unchecked (heartbeats are skipped): the appender writes it and checks
        and dispatches a MiB at a time, ``_check`` the rest at the burst's end; HAProtocolError
        for a frame that does not start where the log ends, after what came before is checked.
        The ``last`` frame of a burst is checked at once, before it is written (a frame that came
        alone, as SYNC_MASTER sends trickle in, then costs one appender call, not two)."""
        if not ev.data:
            return
        end = max(self.appender.max_offset, self._floor)
        if ev.offset != end:
            self._check()
            raise HAProtocolError(f"frame at offset {ev.offset}, but the replica's log ends at {end}")
        try:
            touched = self.appender.append(ev.offset, ev.data, dispatch=last)
        except (ValueError, CorruptRecordError) as e:
            raise HAProtocolError(f"frame at offset {ev.offset} refused: {e}") from None
        self.stats["bytes"] += len(ev.data)
        self.stats["frames"] += 1
        self._wrote = True
        if touched:
            self.sink.touched(touched)

    def _check(self) -> None:
        """Check and dispatch what ``_take`` appended unchecked (before any report: a replica
        never reports bytes it has not checked); HAProtocolError if a record fails (it is cut)."""
        try:
            touched = self.appender.dispatch()
        except CorruptRecordError as e:
            raise HAProtocolError(f"frames refused: {e}") from None
        if touched:
            self.sink.touched(touched)
