"""A real master (broker + `shmq ha` process) and a small real TCP replica for the sender's tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import shmq
from shmq.config import BrokerConfig
from shmq.ha import protocol as P
from shmq.ha.shared import HASegment
from tests.waiting import wait_for

TOKEN = "t0ken"
SEGMENT = 65536
MASTER_CONFIG = {
    "mappedFileSizeCommitLog": SEGMENT,
    "mappedFileSizeConsumeQueue": 20 * 4096,
    "maxHashSlotNum": 1009,
    "maxIndexNum": 40000,
    "haListenPort": 0,
    "maxMessageSize": 16384,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def conf_file(path: str, values: dict) -> str:
    """A broker config file (properties) holding `values`; its path."""
    with open(path, "w") as f:
        f.write(BrokerConfig.from_mapping(values).to_properties())
    return path


class Master:
    """A broker (which spawns no sender: haListenPort 0) and this test's `shmq ha` process."""

    def __init__(self, broker: shmq.Broker, sender: subprocess.Popen, port: int, log_path: str, ha: HASegment) -> None:
        self.broker = broker
        self.sender = sender
        self.port = port
        self.log_path = log_path
        self.ha = ha

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def commitlog(self, start: int, end: int) -> bytes:
        """The master's log bytes [start, end), read from its segment files."""
        out = bytearray()
        offset = start
        while offset < end:
            base = offset - offset % SEGMENT
            with open(os.path.join(self.broker.store_dir, "commitlog", f"{base:020d}"), "rb") as f:
                f.seek(offset - base)
                n = min(end, base + SEGMENT) - offset
                out += f.read(n)
            offset += n
        return bytes(out)


def sender_command(store: str, name: str, conf: str) -> list[str]:
    return [sys.executable, "-m", "shmq", "ha", "--store", store, "--name", name, "--config", conf]


@contextmanager
def running_master(store: str, name: str, tmp: str, extra: dict | None = None) -> Iterator[Master]:
    """Broker + sender; the sender's stderr goes to ``tmp/ha.log``. Both are gone afterwards."""
    port = free_port()
    conf = os.path.join(tmp, "ha.conf")
    values = {**MASTER_CONFIG, "haListenPort": port, "haAuthToken": TOKEN, **(extra or {})}
    with open(conf, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in values.items()))
    log_path = os.path.join(tmp, "ha.log")
    broker = shmq.Broker(store, name, MASTER_CONFIG)
    sender = None
    ha = None
    try:
        with open(log_path, "ab") as log:
            sender = subprocess.Popen(
                sender_command(store, name, conf), stdout=log, stderr=log, stdin=subprocess.DEVNULL
            )
        ha = HASegment.open(name, read_only=True)
        assert wait_for(lambda: int(ha.header["listen_port"][0]) == port or sender.poll() is not None, 15)
        assert sender.poll() is None, Path(log_path).read_text()
        yield Master(broker, sender, port, log_path, ha)
    finally:
        if sender is not None and sender.poll() is None:
            sender.send_signal(signal.SIGTERM)
            try:
                sender.wait(10)
            except subprocess.TimeoutExpired:
                sender.kill()
                sender.wait()
        if ha is not None:
            ha.close()
        broker.stop()


class Replica:
    """A replica that keeps what it is sent in memory and reports after every data read."""

    def __init__(self, port: int, token: str = TOKEN, name: str = "r1") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.session = P.ReplicaSession(token.encode(), name, 16 << 20)
        self.welcome: P.Welcome | None = None
        self.start = -1
        self.data = bytearray()
        self.metadata: list[P.Metadata] = []
        self.heartbeats: list[float] = []
        self.refused: P.Refused | None = None

    @property
    def offset(self) -> int:
        return self.start + len(self.data)

    def handshake(self) -> P.Welcome:
        while self.welcome is None:
            self._read_once()
            if self.refused is not None:
                raise AssertionError(f"refused: {self.refused}")
        return self.welcome

    def report(self, offset: int) -> None:
        self.sock.sendall(P.encode_report(offset))

    def follow(self, start: int, until: int, timeout: float = 20.0) -> None:
        """Report ``start`` (first time) and read, reporting as it goes, until ``until`` is reached."""
        if self.start < 0:
            self.start = start
            self.report(start)
        deadline = time.monotonic() + timeout
        while self.offset < until:
            assert time.monotonic() < deadline, f"stuck at {self.offset} of {until}"
            if self._read_once():
                self.report(self.offset)

    def _read_once(self) -> bool:
        """One recv; True if data arrived."""
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the master closed the connection")
        got = False
        for ev in self.session.receive(chunk):
            if isinstance(ev, P.Welcome):
                self.welcome = ev
            elif isinstance(ev, P.Refused):
                self.refused = ev
            elif isinstance(ev, P.Metadata):
                self.metadata.append(ev)
            elif isinstance(ev, P.Data):
                assert ev.offset == self.offset, f"frame at {ev.offset}, replica at {self.offset}"
                if ev.data:
                    self.data += ev.data
                    got = True
                else:
                    self.heartbeats.append(time.monotonic())
        out = self.session.take_output()
        if out:
            self.sock.sendall(out)
        return got

    def read_until(self, cond, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        self.sock.settimeout(0.2)
        try:
            while not cond():
                assert time.monotonic() < deadline, "condition not met in time"
                try:
                    self._read_once()
                except TimeoutError:
                    pass
        finally:
            self.sock.settimeout(5)

    def close(self) -> None:
        self.sock.close()


def send_bytes(name: str, total: int, body: int = 100) -> int:
    """Send about ``total`` bytes of ``body``-byte messages in batches; returns how many messages."""
    n = max(1, total // (body + 100))
    with shmq.Producer("pg", broker=name) as p:
        sent = 0
        while sent < n:
            k = min(50, n - sent)
            p.send_batch([shmq.Message("HaTopic", os.urandom(body // 2).hex().encode()[:body]) for _ in range(k)])
            sent += k
    return n
