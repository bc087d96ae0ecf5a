"""A small HA master for replica tests: ``protocol.MasterSession`` over a real socket, streaming
the bytes of a real master store's commitlog segment files (read-only, as the sender does).

It serves one replica connection at a time from a thread; ``limit`` caps what it offers (a
master whose log ends earlier), ``epochs`` is the history it announces, and ``bad`` replaces
the stream after WELCOME by a hostile frame (for the replica's checks). It records every
offset the replica reported and how many connections it saw.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable

from shmq.codec import record as fmt
from shmq.errors import HAProtocolError
from shmq.ha import metadata, protocol
from shmq.ha.protocol import Epoch

BATCH = 32768
TOKEN = "fake-master-token"  # what replicas of the tests are given (conftest.REPLICA) unless a test says otherwise


class FakeMaster:
    def __init__(
        self,
        store_dir: str,
        segment_size: int,
        max_offset: Callable[[], int],
        token: bytes = TOKEN.encode(),
        epochs: list[Epoch] | None = None,
        limit: int | None = None,
        bad: Callable[[int], bytes] | None = None,
        close_after: int | None = None,
        port: int = 0,
        trust_any: bool = False,
    ) -> None:
        self.store_dir = store_dir
        self.segment_size = segment_size
        self.max_offset = max_offset
        self.token = token
        self.epochs = epochs if epochs is not None else [Epoch(1, 0, b"\x01" * 16)]
        self.limit = limit
        self.bad = bad
        self.close_after = close_after  # close the first connection once this many bytes were sent
        self.trust_any = trust_any  # a fake master: it takes any AUTH and streams (its WELCOME cannot prove the token)
        self.reports: list[int] = []
        self.connections = 0
        self.closed_by_replica = 0  # connections the replica ended (EOF while we were streaming)
        self._srv = socket.create_server(("127.0.0.1", port))
        self._srv.settimeout(0.1)
        self.port = self._srv.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def __enter__(self) -> FakeMaster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._srv.close()

    @property
    def last_report(self) -> int:
        return self.reports[-1] if self.reports else -1

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._srv.accept()
            except TimeoutError:
                continue
            self.connections += 1
            with conn:
                try:
                    self._session(conn)
                except (OSError, HAProtocolError):
                    pass

    def _session(self, conn: socket.socket) -> None:
        session = protocol.MasterSession(self.token or b"-")
        session.token = self.token  # an impostor may sign with an empty key, which a real session refuses to
        conn.sendall(session.hello())
        conn.settimeout(0.05)
        welcomed = False
        at = -1
        sent = 0
        while not self._stop.is_set():
            try:
                data = conn.recv(65536)
                if not data:
                    self.closed_by_replica += 1
                    return
            except TimeoutError:
                data = b""
            try:
                events = session.receive(data) if data else []
            except HAProtocolError:
                if not self.trust_any or welcomed:
                    raise
                session.authenticated = True  # pretend: what an impostor without the token does
                events = [protocol.Authenticated("?")]
                at = 0
            for ev in events:
                if isinstance(ev, protocol.Authenticated) and not welcomed:
                    end = self._end()
                    conn.sendall(session.welcome(self.segment_size, 0, end, self.epochs))
                    for kind, name in metadata.FILES:  # the config files a real sender passes on
                        path = os.path.join(self.store_dir, "config", name)
                        if os.path.exists(path):
                            with open(path, "rb") as f:
                                conn.sendall(protocol.encode_metadata(kind, f.read()))
                    welcomed = True
                    if at == 0:  # the impostor streams at once
                        break
                elif isinstance(ev, protocol.Report):
                    self.reports.append(ev.offset)
                    if at < 0:
                        at = ev.offset
                        if self.bad is not None:
                            conn.sendall(self.bad(at))
            if at < 0 or self.bad is not None:
                continue
            end = self._end()
            while at < end and not self._stop.is_set():
                n = min(BATCH, end - at, self.segment_size - at % self.segment_size)
                conn.sendall(protocol.frame_header(at, n) + self._read(at, n))
                at += n
                sent += n
                if self.close_after is not None and sent >= self.close_after and self.connections == 1:
                    return

    def _end(self) -> int:
        end = self.max_offset()
        return end if self.limit is None else min(end, self.limit)

    def _read(self, offset: int, n: int) -> bytes:
        base = offset - offset % self.segment_size
        path = os.path.join(self.store_dir, "commitlog", fmt.offset_file_name(base))
        with open(path, "rb") as f:
            f.seek(offset - base)
            return f.read(n)


def commitlog_bytes(store_dir: str, segment_size: int, end: int) -> bytes:
    """The first ``end`` bytes of a store's commitlog."""
    out = bytearray()
    base = 0
    while base < end:
        with open(os.path.join(store_dir, "commitlog", fmt.offset_file_name(base)), "rb") as f:
            out += f.read(min(segment_size, end - base))
        base += segment_size
    return bytes(out)


def topics_of(store_dir: str) -> dict:
    with open(os.path.join(store_dir, "config", "topics.json")) as f:
        return json.load(f)["topicConfigTable"]


def wait_reports(master: FakeMaster, offset: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if master.last_report >= offset:
            return True
        time.sleep(0.01)
    return master.last_report >= offset
