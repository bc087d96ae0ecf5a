"""The HA sender as a process: a real broker, `python -m shmq ha`, real TCP replicas."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import time
from contextlib import ExitStack

import posix_ipc
import pytest

import shmq
from shmq.ha import protocol as P
from shmq.ha.shared import STREAMING, HASegment, wake_address
from shmq.ring.channel import broker_bell_name
from shmq.ring.state import StateReader
from shmq.store.epochs import EpochFile
from tests.ha.sender_support import SEGMENT, TOKEN, Master, Replica, running_master, send_bytes, sender_command
from tests.ipc_tracking import IpcTracker, ipc_tracker  # noqa: F401 (autouse fixture)
from tests.waiting import wait_for


@pytest.fixture
def broker_name(ipc_tracker: IpcTracker) -> str:  # noqa: F811
    return ipc_tracker.name("ha")


@pytest.fixture
def store_dir(tmp_path, ipc_tracker: IpcTracker) -> str:  # noqa: F811
    return ipc_tracker.store(str(tmp_path / "store"))


@pytest.fixture
def start(store_dir, broker_name, tmp_path):
    """``start(extra_config)`` -> a running Master; stopped (sender, then broker) afterwards."""
    with ExitStack() as stack:
        yield lambda extra=None: stack.enter_context(running_master(store_dir, broker_name, str(tmp_path), extra))


def _master_offset(m: Master) -> int:
    return int(m.ha.header["master_offset"][0])


def _closed_by_master(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the master sent until it closed the connection (fails if it does not)."""
    sock.settimeout(timeout)
    got = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return got
        got += chunk


def test_replica_gets_the_masters_exact_bytes_across_segment_rolls(start, broker_name):
    m = start()
    send_bytes(broker_name, 1_500_000)
    end = _master_offset(m)
    assert end > 10 * SEGMENT  # many rolls
    r = Replica(m.port)
    try:
        w = r.handshake()
        assert (w.segment_size, w.min_offset, w.max_offset) == (SEGMENT, 0, end)
        r.follow(0, end)
        assert bytes(r.data) == m.commitlog(0, end)
        # live: what is sent while connected arrives too (the broker wakes the parked sender)
        send_bytes(broker_name, 300_000)
        end2 = _master_offset(m)
        r.follow(0, end2)
        assert bytes(r.data) == m.commitlog(0, end2)
        assert wait_for(
            lambda: (
                [(x.state, x.acked_offset, x.sent_offset, x.name) for x in m.ha.replicas()]
                == [(STREAMING, end2, end2, "r1")]
            )
        )
        assert m.ha.replicas()[0].report_ms > 0
    finally:
        r.close()
    assert wait_for(lambda: m.ha.replicas() == [])  # the slot goes with the connection


def test_a_replica_resumes_from_its_reported_offset_and_frames_never_cross_segments(start, broker_name):
    m = start({"haTransferBatchSize": 50000})
    send_bytes(broker_name, 400_000)
    end = _master_offset(m)
    begin = 2 * SEGMENT - 20000  # inside a segment: the first frame ends at the segment's end
    r = Replica(m.port)
    try:
        r.handshake()
        r.start = begin
        r.report(begin)
        sizes = []
        r.sock.settimeout(5)
        while r.offset < end:
            chunk = r.sock.recv(1 << 20)
            assert chunk
            for ev in r.session.receive(chunk):
                if isinstance(ev, P.Data) and ev.data:
                    assert ev.offset == r.offset
                    first, last = ev.offset // SEGMENT, (ev.offset + len(ev.data) - 1) // SEGMENT
                    assert first == last, f"frame {ev.offset}+{len(ev.data)} crosses a segment boundary"
                    sizes.append(len(ev.data))
                    r.data += ev.data
        assert sizes[:2] == [20000, 50000] and max(sizes) == 50000
        assert bytes(r.data) == m.commitlog(begin, end)
    finally:
        r.close()


def test_two_replicas_stream_at_once_and_both_acks_show(start, broker_name):
    m = start()
    send_bytes(broker_name, 500_000)
    end = _master_offset(m)
    a, b = Replica(m.port, name="ra"), Replica(m.port, name="rb")
    try:
        a.handshake()
        b.handshake()
        a.follow(0, end)
        b.follow(end // 2, end)
        assert bytes(a.data) == m.commitlog(0, end) and bytes(b.data) == m.commitlog(end // 2, end)
        assert wait_for(lambda: sorted((x.name, x.acked_offset) for x in m.ha.replicas()) == [("ra", end), ("rb", end)])
        assert len({x.slot for x in m.ha.replicas()}) == 2
    finally:
        a.close()
        b.close()


def test_heartbeats_when_idle_and_metadata_frames_follow_topics_json(start, broker_name, store_dir):
    m = start({"haSendHeartbeatInterval": 300})
    send_bytes(broker_name, 10_000)  # creates HaTopic: topics.json is written
    end = _master_offset(m)
    r = Replica(m.port)
    try:
        r.handshake()
        r.follow(0, end)
        r.read_until(lambda: any(x.kind == P.META_TOPICS for x in r.metadata))
        topics = [x for x in r.metadata if x.kind == P.META_TOPICS][-1]
        with open(os.path.join(store_dir, "config", "topics.json"), "rb") as f:
            assert topics.text == f.read()
        assert "HaTopic" in json.loads(topics.text)["topicConfigTable"]
        r.heartbeats.clear()
        r.read_until(lambda: len(r.heartbeats) >= 3, timeout=5)
        gaps = [b - a for a, b in zip(r.heartbeats, r.heartbeats[1:])]
        assert all(0.2 < g < 1.5 for g in gaps), gaps
        # a new topic rewrites topics.json: the sender passes the new file on within about a second
        before = len(r.metadata)
        with shmq.Producer("pg", broker=broker_name) as p:
            p.send(shmq.Message("HaTopic2", b"x"))
        r.read_until(lambda: any(b"HaTopic2" in x.text for x in r.metadata[before:]), timeout=5)
    finally:
        r.close()


def _auth_with_version(port: int, version: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    hello = s.recv(P.HELLO.size)
    nonce_m = hello[8:40]
    nonce_r = os.urandom(32)
    s.sendall(P.AUTH.pack(b"SQHR", version, 1, nonce_r, P.replica_mac(TOKEN.encode(), nonce_m, nonce_r), 0) + b"x")
    return s


def test_hostile_clients_are_closed_with_a_reason_while_a_good_replica_streams(start, broker_name):
    m = start({"haConnectTimeout": 500})
    send_bytes(broker_name, 200_000)
    good = Replica(m.port, name="good")
    good.handshake()
    good.follow(0, _master_offset(m))
    try:
        bad_token = Replica(m.port, token="wrong")
        with pytest.raises(AssertionError, match=r"refused.*code=2"):
            bad_token.handshake()
        assert not bad_token.data
        bad_token.close()

        s = _auth_with_version(m.port, 7)
        got = _closed_by_master(s)
        assert got[:4] == b"SQHX" and struct.unpack(">H", got[6:8])[0] == P.REFUSE_VERSION
        s.close()

        s = socket.create_connection(("127.0.0.1", m.port), timeout=5)
        s.sendall(os.urandom(200))
        got = _closed_by_master(s)
        assert got[:4] == b"SQHM" and b"SQHW" not in got  # HELLO, then a refusal; never WELCOME or log
        s.close()

        silent = socket.create_connection(("127.0.0.1", m.port), timeout=5)
        t0 = time.monotonic()
        _closed_by_master(silent, timeout=30)
        assert 0.4 < time.monotonic() - t0 < 20  # by haConnectTimeout (500 ms), not by our socket timeout
        silent.close()

        past = Replica(m.port, name="past")
        past.handshake()
        past.report(_master_offset(m) + 1000)
        past.sock.settimeout(5)
        with pytest.raises(ConnectionError):
            while True:
                past._read_once()
        assert not past.data
        past.close()

        # meanwhile the good replica keeps streaming
        send_bytes(broker_name, 100_000)
        good.follow(0, _master_offset(m))
        assert bytes(good.data) == m.commitlog(0, _master_offset(m))
        log = m.log()
        for reason in (
            "did not prove haAuthToken",
            "speaks HA protocol version 7",
            "expected the replica's AUTH",
            "handshake not done within haConnectTimeout=500 ms",
            "past the master's end",
        ):
            assert reason in log, (reason, log)
        assert m.sender.poll() is None
        assert [x.name for x in m.ha.replicas()] == ["good"]
    finally:
        good.close()


def test_silent_replica_is_closed_after_housekeeping_interval(start, broker_name):
    m = start({"haHousekeepingInterval": 800, "haSendHeartbeatInterval": 200})
    r = Replica(m.port)
    try:
        r.handshake()
        r.start = 0
        r.report(0)
        t0 = time.monotonic()
        with pytest.raises(ConnectionError):
            r.read_until(lambda: False, timeout=30)
        assert 0.6 < time.monotonic() - t0 < 20  # closed by the master, not by our 30 s wait
        assert len(r.heartbeats) >= 1  # it was sent heartbeats, but never answered them
        assert "silent for haHousekeepingInterval=800 ms" in m.log()
    finally:
        r.close()


def test_a_seventeenth_replica_is_refused_busy(start):
    m = start()
    replicas = [Replica(m.port, name=f"r{i}") for i in range(16)]
    try:
        for r in replicas:
            r.handshake()
        extra = Replica(m.port, name="r16")
        with pytest.raises(AssertionError, match="code=5"):
            extra.handshake()
        extra.close()
        assert len(m.ha.replicas()) == 16
    finally:
        for r in replicas:
            r.close()


def test_sender_exits_when_the_broker_is_killed(start):
    m = start()
    r = Replica(m.port)
    r.handshake()
    try:
        os.kill(m.broker.pid, signal.SIGKILL)
        assert m.sender.wait(30) == 0
        assert "is gone: stopping" in m.log()
        assert _closed_by_master(r.sock) == b""
    finally:
        r.close()


def test_sender_exits_when_the_broker_stops_gracefully(start):
    m = start()
    assert m.broker.stop() == 0
    assert m.sender.wait(5) == 0
    assert "is gone: stopping" in m.log()


def test_sigterm_releases_slots_and_the_pid(start):
    m = start()
    r = Replica(m.port)
    r.handshake()
    try:
        assert len(m.ha.replicas()) == 1 and int(m.ha.header["sender_pid"][0]) == m.sender.pid
        m.sender.send_signal(signal.SIGTERM)
        assert m.sender.wait(5) == 0
        assert m.ha.replicas() == [] and int(m.ha.header["sender_pid"][0]) == 0
        assert int(m.ha.header["listen_port"][0]) == 0
    finally:
        r.close()


def test_a_second_sender_for_the_same_broker_is_refused(start, store_dir, broker_name, tmp_path):
    m = start()
    out = subprocess.run(
        sender_command(store_dir, broker_name, str(tmp_path / "ha.conf")), capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 2
    assert f"another HA sender (pid {m.sender.pid}) serves broker" in out.stderr
    assert m.sender.poll() is None


def test_shmq_ha_without_a_running_broker_exits_2(store_dir, broker_name):
    out = subprocess.run(sender_command(store_dir, broker_name, os.devnull), capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert out.stderr.strip() == f"shmq ha: error: no broker named {broker_name!r} is running (no state segment)"


def test_a_slot_reader_sees_the_sender_beat(start):
    m = start()
    ha = HASegment.open(m.broker.name, read_only=True)
    try:
        first = int(ha.header["sender_beat_ms"][0])
        assert wait_for(lambda: int(ha.header["sender_beat_ms"][0]) > first, 30)
        assert abs(int(ha.header["sender_beat_ms"][0]) - time.time() * 1000) < 10_000  # wall-clock ms, recent
    finally:
        ha.close()


def test_welcome_carries_the_epochs_file_and_the_cleaned_start_is_refused(start, broker_name, store_dir):
    m = start()
    send_bytes(broker_name, 300_000)
    epochs = [P.Epoch(1, 0, b"a" * 16), P.Epoch(2, 70000, b"b" * 16)]
    EpochFile(store_dir).save(epochs)  # as the store writes it
    r = Replica(m.port)
    try:
        assert r.handshake().epochs == epochs
    finally:
        r.close()
    # cleanup deleted the first segment: it cannot be served any more
    os.unlink(os.path.join(store_dir, "commitlog", f"{0:020d}"))
    time.sleep(1.2)  # the sender looks at the folder once a second
    r = Replica(m.port)
    try:
        assert r.handshake().min_offset == SEGMENT
        r.start = 0
        r.report(0)
        with pytest.raises(ConnectionError):
            r.read_until(lambda: False, timeout=5)
        assert not r.data
        assert f"reported offset 0 below the master's min offset {SEGMENT} (cleaned)" in m.log()
    finally:
        r.close()


def test_an_advancing_ack_rings_the_broker_bell_only_while_the_broker_waits(start, broker_name):
    m = start()
    send_bytes(broker_name, 100_000)
    end = _master_offset(m)
    state = StateReader.open(broker_name)
    bell = posix_ipc.Semaphore(broker_bell_name(broker_name, int(state.view.header["bell_gen"][0])))
    rw = HASegment.open(broker_name)
    r = Replica(m.port)
    os.kill(m.broker.pid, signal.SIGSTOP)  # the broker takes no post off the bell meanwhile
    try:
        r.handshake()
        r.start = 0
        r.report(0)
        r.read_until(lambda: r.offset >= end // 2)
        before = bell.value
        r.report(end // 2)  # broker_waiting is 0: no post
        assert wait_for(lambda: [x.acked_offset for x in m.ha.replicas()] == [end // 2])
        time.sleep(0.1)
        assert bell.value == before
        rw.set_broker_waiting(True)
        r.read_until(lambda: r.offset >= end)
        r.report(end)
        assert wait_for(lambda: bell.value > before, 30)
        r.report(end)  # the same offset again: no advance, no post
        time.sleep(0.2)
        assert bell.value == before + 1
    finally:
        rw.set_broker_waiting(False)
        os.kill(m.broker.pid, signal.SIGCONT)
        r.close()
        rw.close()
        bell.close()
        state.close()


def test_the_broker_wakes_a_parked_sender_when_the_log_grows(start, broker_name):
    """A parked sender sleeps until the broker's datagram or its next 50 ms tick: the broker sends
    one when its log grows while ``sender_parked`` is up, none while it is down. The test takes
    the stopped sender's place on the wake-up socket, so it checks the datagram itself (how much
    sooner the sender streams is a latency, which a loaded machine cannot show)."""
    m = start()
    m.sender.send_signal(signal.SIGTERM)
    m.sender.wait(30)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rw = HASegment.open(broker_name)
    try:
        sock.bind(wake_address(broker_name))
        with shmq.Producer("pg", broker=broker_name) as p:
            rw.header["sender_parked"] = 0
            p.send(shmq.Message("HaTopic", b"x" * 100))
            sock.settimeout(0.3)
            with pytest.raises(socket.timeout):
                sock.recv(16)
            rw.header["sender_parked"] = 1
            p.send(shmq.Message("HaTopic", b"y" * 100))
            sock.settimeout(30)
            assert sock.recv(16) == b"\0"
    finally:
        sock.close()
        rw.close()
