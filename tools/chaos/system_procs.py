"""The processes of one whole-system chaos run (tools/chaos/system.py): start, kill, restart, drain, stop.

The master is ``shmq.Broker`` (SYNC_MASTER, HA sender on a free port of 127.0.0.1); the replica is
``python -m shmq replica`` on a store of its own, as an operator runs it; the clients are
tools/chaos/system_clients.py. Both broker configs name ``haAuthToken``, so the run is the same
whether or not the sender requires one by default.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

import shmq
from shmq.errors import ShmqError
from shmq.ring import shm
from shmq.ring.state import StateReader
from tests.ipc_tracking import existing, remove, store_objects
from tools.chaos import system_check as check
from tools.chaos.system_clients import GROUP, QUEUES, TOPIC, parse_body, read_lines

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "chaos-system-secret"
SEGMENT = 1 << 20  # 1 MiB commitlog segments: the log and its replication cross many file ends
COMMON = {
    "haAuthToken": TOKEN,
    "mappedFileSizeCommitLog": SEGMENT,
    "haSendHeartbeatInterval": 300,
    "haHousekeepingInterval": 2000,
    "haConnectTimeout": 1000,
    "haReconnectInterval": 200,
    "syncFlushTimeout": 1000,
}
DRAIN_S = 180.0  # the consumers' last catch-up, generous for a loaded 2-core machine
SETTLE_S = 60.0  # after a restart, sync sends are acknowledged again within this (loaded machine)
STUCK = "stopped following master"  # the replica's log line when it gave up on the master


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(cond: Callable[[], object], timeout: float, what: str, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


def _serving(name: str) -> bool:
    try:
        StateReader.open(name).close()
        return True
    except ShmqError:
        return False


def _stop(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


def _commitlog(store: str) -> bytes:
    d = os.path.join(store, "commitlog")
    names = sorted(os.listdir(d)) if os.path.isdir(d) else []
    return b"".join(Path(os.path.join(d, n)).read_bytes() for n in names).rstrip(b"\0")


class Processes:
    """Broker, replica, ``producers`` producers and ``consumers`` consumers in ``work``."""

    def __init__(self, work: str, producers: int, consumers: int) -> None:
        self.work = work
        tag = f"cs{os.getpid()}x{int(time.time() * 1000) % 100000}"
        self.name, self.replica_name = tag, tag + "r"
        self.store, self.replica_store = os.path.join(work, "master"), os.path.join(work, "replica")
        self.keys_path = os.path.join(work, "liveness-keys")
        port = _free_port()
        self.config = {**COMMON, "brokerRole": "SYNC_MASTER", "haListenAddress": "127.0.0.1", "haListenPort": port}
        self.replica_conf = os.path.join(work, "replica.conf")
        with open(self.replica_conf, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in COMMON.items()))
        self.master_address = f"127.0.0.1:{port}"
        self.slots = [f"p{i}" for i in range(producers)] + [f"c{i}" for i in range(consumers)]
        self.clients: dict[str, subprocess.Popen[bytes]] = {}
        self.incarnation: dict[str, int] = dict.fromkeys(self.slots, 0)
        self.broker: shmq.Broker | None = None
        self.replica: subprocess.Popen[bytes] | None = None
        self.replica_wiped = 0  # times the replica gave up on its master and was started afresh

    # ------------------------------------------------------------------ start and restart

    def start(self) -> None:
        self._start_broker()
        shmq.Admin(broker=self.name, timeout=30).create_topic(TOPIC, queues=QUEUES)
        self._start_replica()
        for slot in self.slots:
            self._start_client(slot)

    def _start_broker(self) -> None:
        self.broker = shmq.Broker(self.store, self.name, self.config, timeout=60)

    def _start_replica(self) -> None:
        with open(os.path.join(self.work, "replica.err"), "ab") as err:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "shmq",
                    "replica",
                    "--store",
                    self.replica_store,
                    "--name",
                    self.replica_name,
                    "--master",
                    self.master_address,
                    "--config",
                    self.replica_conf,
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )
        self.replica = proc
        _wait(lambda: _serving(self.replica_name) or proc.poll() is not None, 60, "the replica")

    def _start_client(self, slot: str) -> None:
        role = "produce" if slot.startswith("p") else "consume"
        tag = f"{slot}i{self.incarnation[slot]}"
        self.incarnation[slot] += 1
        with open(os.path.join(self.work, f"{slot}.err"), "ab") as err:
            self.clients[slot] = subprocess.Popen(
                [
                    sys.executable,
                    os.path.join(HERE, "system_clients.py"),
                    role,
                    self.name,
                    tag,
                    self._log(slot),
                    self.keys_path,
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )

    def _log(self, slot: str) -> str:
        return os.path.join(self.work, f"{slot}.log")

    def restart_dead(self) -> None:
        """Start again whatever is not running (the broker first: the others attach to it)."""
        if self.broker is None or self.broker.process.poll() is not None:
            if self.broker is not None:
                self.broker.kill()  # reaps it
            self._start_broker()
        if self.replica is None or self.replica.poll() is not None:
            self._start_replica()
        for slot in self.slots:
            if self.clients[slot].poll() is not None:
                self._start_client(slot)

    def _acked(self) -> int:
        return sum(
            1 for slot in self.slots if slot.startswith("p") for words in read_lines(self._log(slot)) if words[0] == "A"
        )

    def _replica_gave_up(self) -> bool:
        try:
            with open(os.path.join(self.work, "replica.err"), "rb") as f:
                return STUCK.encode() in f.read()
        except FileNotFoundError:
            return False

    def settle(self) -> bool:
        """Wait until a sync send is acknowledged again (the replica follows). A replica that gave
        up on its master (its history shares no epoch with the master's) is counted, wiped and
        started again, as an operator would have to; then True."""
        before = self._acked()
        try:
            _wait(
                lambda: self._acked() > before or self._replica_gave_up(),
                SETTLE_S,
                "an acknowledged send after the restart",
                step=0.2,
            )
        except RuntimeError:
            pass
        if not self._replica_gave_up():
            return False
        assert self.replica is not None
        _stop(self.replica)
        os.replace(
            os.path.join(self.work, "replica.err"),
            os.path.join(self.work, f"replica.err.gave-up.{time.monotonic_ns()}"),
        )
        shutil.rmtree(self.replica_store)
        self._start_replica()
        self.replica_wiped += 1
        return True

    # ------------------------------------------------------------------ kill

    def _ha_senders(self) -> list[int]:
        if self.broker is None:
            return []
        try:
            return [c.pid for c in psutil.Process(self.broker.pid).children()]
        except psutil.NoSuchProcess:
            return []

    def victims(self) -> list[str]:
        return ["broker", "ha-sender", "replica", *self.slots]

    def kill(self, victim: str) -> bool:
        """SIGKILL ``victim``; False if it was not running (an HA sender being restarted)."""
        if victim == "broker":
            assert self.broker is not None
            self.broker.kill()
            return True
        if victim == "ha-sender":
            pids = self._ha_senders()
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            return bool(pids)
        proc = self.replica if victim == "replica" else self.clients[victim]
        assert proc is not None
        proc.kill()
        proc.wait()
        return True

    # ------------------------------------------------------------------ what they did

    def ledger(self) -> check.Ledger:
        ledger = check.Ledger()
        for slot in self.slots:
            lines = read_lines(self._log(slot))
            (ledger.add_producer_lines if slot.startswith("p") else ledger.add_consumer_lines)(lines)
        return ledger

    def committed_offsets(self) -> dict[int, int]:
        """The group's committed offset per queue of the topic, as the broker has it now."""
        progress = shmq.Admin(broker=self.name, timeout=30).consumer_progress(GROUP)
        return {q.queue_id: q.committed for q in progress.queues if q.topic == TOPIC and q.committed >= 0}

    def stored(self) -> dict[check.At, check.Who | None]:
        """Every message of the topic in the master's store, by queue and offset."""
        out: dict[check.At, check.Who | None] = {}
        with shmq.PullConsumer("chaos-system-reader", broker=self.name, start_timeout=30) as c:
            for mq in c.fetch_queues(TOPIC):
                off, hi = c.min_offset(mq), c.max_offset(mq)
                while off < hi:
                    r = c.pull(mq, "*", offset=off, max_nums=256, timeout=5)
                    for m in r.messages:
                        out[(m.queue_id, m.queue_offset)] = parse_body(m.body)
                    off = r.next_begin_offset
        return out

    # ------------------------------------------------------------------ the end

    def finish(self) -> tuple[dict[check.At, check.Who | None], bool]:
        """Stop producing, let the group drain the topic, stop it, let the replica catch up:
        what the master stores, and whether the replica's log differs from the master's."""
        self.restart_dead()
        for slot in self.slots:
            if slot.startswith("p"):
                _stop(self.clients[slot])

        def drained() -> bool:
            progress = shmq.Admin(broker=self.name, timeout=30).consumer_progress(GROUP)
            return all(q.committed >= q.max_offset for q in progress.queues if q.topic == TOPIC) and any(
                q.topic == TOPIC for q in progress.queues
            )

        try:
            _wait(drained, DRAIN_S, "the consumers to drain the topic", step=0.5)
        except RuntimeError:
            pass  # what is left shows as never_consumed
        for slot in self.slots:
            _stop(self.clients[slot])
        stored = self.stored()
        master_log = _commitlog(self.store)
        try:
            _wait(lambda: _commitlog(self.replica_store) == master_log, 60, "the replica to catch up", step=0.5)
            diverged = False
        except RuntimeError:
            diverged = True
        return stored, diverged

    def close(self) -> list[str]:
        """Stop everything still running; then what is left of IPC objects (removed after counting)."""
        for proc in self.clients.values():
            _stop(proc)
        if self.replica is not None:
            _stop(self.replica)
        if self.broker is not None:
            self.broker.stop()
        in_shm = shm.leftovers(self.name) + shm.leftovers(self.replica_name)
        keys = (
            [("sem", int(k)) for k in Path(self.keys_path).read_text().split()]
            if os.path.exists(self.keys_path)
            else []
        )
        sysv = existing(store_objects(self.store) + store_objects(self.replica_store) + keys)
        shm.remove_leftovers(self.name)
        shm.remove_leftovers(self.replica_name)
        remove(sysv)
        return in_shm + [f"{kind} {key:#x}" for kind, key in sysv]
