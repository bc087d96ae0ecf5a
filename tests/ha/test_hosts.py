"""The host harness (tests/ha/hosts.py) really separates two hosts: only TCP over the veth joins them.

Each test runs real processes inside the hosts (nsenter into the holder's namespaces) and checks
what they see; the faults (link down, loss) are checked by the effect on real connections.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import threading
import time

import pytest
import sysv_ipc

from tests.ha import hosts
from tests.ha.hosts import Host

PORT = 9000  # each host has its own network namespace: no other test can hold it
SINK_PORT = 9001

ECHO_SERVER = f"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {PORT})); s.listen()
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(c.recv(100)); c.close()
"""

# argv: ip, timeout: one connect + echo; prints "ok" or the error's class name
CONNECT_ONCE = f"""
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], {PORT}), timeout=float(sys.argv[2]))
    c.sendall(b"ping"); assert c.recv(100) == b"ping"
    print("ok")
except OSError as e:
    print(type(e).__name__, e.errno)
"""

SINK_SERVER = f"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {SINK_PORT})); s.listen()
print("ready", flush=True)
c, _ = s.accept()
total = 0
while True:
    b = c.recv(65536)
    if not b:
        break
    total += len(b)
    print(total, flush=True)
"""

FLOOD_CLIENT = f"""
import socket, sys, time
c = socket.create_connection((sys.argv[1], {SINK_PORT}), timeout=60)
while True:
    c.sendall(b"x" * 4096); time.sleep(0.002)
"""

UDP_ECHO = f"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", {PORT}))
print("ready", flush=True)
while True:
    b, a = s.recvfrom(100); s.sendto(b, a)
"""

# argv: ip, count, timeout: datagrams sent one at a time, prints how many came back within the timeout
UDP_PROBE = f"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(float(sys.argv[3]))
back = 0
for i in range(int(sys.argv[2])):
    s.sendto(str(i).encode(), (sys.argv[1], {PORT}))
    try:
        while s.recv(100) != str(i).encode():
            pass
        back += 1
    except socket.timeout:
        pass
print(back)
"""


class Lines:
    """The lines a host process prints, read by a thread so the test never blocks on the pipe."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._t = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._t.start()

    def _read(self, proc: subprocess.Popen) -> None:
        with proc.stdout:  # type: ignore[union-attr]
            for line in proc.stdout:  # type: ignore[union-attr]
                self.lines.append(line.strip())

    def wait_for(self, text: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.lines:
            assert time.monotonic() < deadline, f"no {text!r} within {timeout} s: {self.lines[-5:]}"
            time.sleep(0.01)

    def last_int(self) -> int:
        nums = [int(x) for x in self.lines[-3:] if x.isdigit()]
        return nums[-1] if nums else 0


def start(host: Host, source: str, *args: object) -> tuple[subprocess.Popen, Lines]:
    proc = host.python(source, *args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, Lines(proc)


def connect_once(client: Host, server: Host | str, timeout: float = 1.0) -> str:
    ip = server if isinstance(server, str) else server.ip
    return client.run_python(CONNECT_ONCE, ip, timeout, timeout=timeout + 20).stdout.strip()


def until(fn, want: str, timeout: float) -> str:
    """Call ``fn`` until it returns ``want`` or the timeout; the last answer."""
    deadline = time.monotonic() + timeout
    got = fn()
    while got != want and time.monotonic() < deadline:
        time.sleep(0.1)
        got = fn()
    return got


def test_tcp_between_hosts_and_loopback_is_per_host(ha_hosts):
    master, replica = ha_hosts
    start(replica, ECHO_SERVER)[1].wait_for("ready")
    assert connect_once(master, replica) == "ok"
    assert connect_once(replica, "127.0.0.1") == "ok"
    assert connect_once(master, "127.0.0.1") == "ConnectionRefusedError 111"  # the master's own loopback


def test_shm_and_sysv_objects_are_private_to_their_host(ha_hosts):
    master, replica = ha_hosts
    shm_name = f"shmq-hosttest-{secrets.token_hex(4)}"
    key = 0x5E000000 + secrets.randbelow(1 << 20)
    make = (
        f"import os, sysv_ipc\n"
        f"fd = os.open('/dev/shm/{shm_name}', os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)\n"
        f"os.ftruncate(fd, 4096)\n"
        f"sysv_ipc.MessageQueue({key}, sysv_ipc.IPC_CREX).send(b'hello')\n"
    )
    r = master.run_python(make)
    assert r.returncode == 0, r.stderr
    look = (
        f"import os, sysv_ipc\n"
        f"try:\n    q = sysv_ipc.MessageQueue({key}); print('q', q.current_messages)\n"
        f"except sysv_ipc.ExistentialError:\n    print('q none')\n"
        f"print('shm', os.path.exists('/dev/shm/{shm_name}'))\n"
    )
    assert master.run_python(look).stdout.split() == ["q", "1", "shm", "True"]  # they outlive their maker
    assert replica.run_python(look).stdout.split() == ["q", "none", "shm", "False"]
    assert not os.path.exists(f"/dev/shm/{shm_name}")
    with pytest.raises(sysv_ipc.ExistentialError):
        sysv_ipc.MessageQueue(key)


def test_kill_all_kills_the_hosts_processes_and_reboot_empties_its_ipc(ha_hosts):
    master, replica = ha_hosts
    procs = [master.popen(["sleep", "300"]) for _ in range(2)]
    # a grandchild that is not the test's child is found through the host's IPC namespace
    master.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 &"])
    other = replica.popen(["sleep", "300"])
    assert len(master.pids()) == 3
    master.kill_all()
    assert [p.wait(5) for p in procs] == [-9, -9]
    assert master.pids() == [] and other.poll() is None and master.holder.poll() is None
    master.run_python("open('/dev/shm/marker', 'w').close()")
    assert master.run(["ls", "/dev/shm"]).stdout.split() == ["marker"]
    master.reboot()
    assert master.run(["ls", "/dev/shm"]).stdout.split() == []
    other.kill()
    other.wait()


def test_link_down_fails_connects_and_up_heals(ha_hosts):
    master, replica = ha_hosts
    start(replica, ECHO_SERVER)[1].wait_for("ready")
    assert connect_once(master, replica) == "ok"
    master.link.down()
    t = time.monotonic()
    assert connect_once(master, replica) != "ok"
    assert connect_once(replica, master) != "ok"
    assert time.monotonic() - t < 15  # a failure within the connect timeout, never a hang
    master.link.up()
    assert until(lambda: connect_once(master, replica), "ok", 10) == "ok"


def test_loss_100_times_connects_out_and_stalls_a_transfer_until_cleared(ha_hosts):
    master, replica = ha_hosts
    start(replica, ECHO_SERVER)[1].wait_for("ready")
    _, sink = start(replica, SINK_SERVER)
    sink.wait_for("ready")
    start(master, FLOOD_CLIENT, replica.ip)
    deadline = time.monotonic() + 10
    while sink.last_int() < 100_000:
        assert time.monotonic() < deadline, sink.lines[-3:]
        time.sleep(0.01)
    master.link.loss(100)
    assert connect_once(master, replica, 0.5) == "TimeoutError None"
    stalled = sink.last_int()
    time.sleep(1.0)
    assert sink.last_int() == stalled, "data crossed a link dropping every packet"
    master.link.clear()
    deadline = time.monotonic() + 15  # the sender's retransmission timer has backed off meanwhile
    while sink.last_int() <= stalled:
        assert time.monotonic() < deadline, "the transfer did not resume after clear()"
        time.sleep(0.05)
    assert connect_once(master, replica) == "ok"


def test_partial_loss_drops_about_that_share(ha_hosts):
    master, replica = ha_hosts
    start(replica, UDP_ECHO)[1].wait_for("ready")
    assert int(master.run_python(UDP_PROBE, replica.ip, 20, 1.0).stdout) == 20  # ARP resolved, nothing lost
    master.link.loss(50)  # each way: a round trip survives with p = 0.25
    back = int(master.run_python(UDP_PROBE, replica.ip, 120, 0.01).stdout)
    assert 10 <= back <= 60, back  # 30 expected; these bounds are over 4 standard deviations away
    master.link.clear()
    assert int(master.run_python(UDP_PROBE, replica.ip, 20, 1.0).stdout) == 20


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")  # a zombie is dead, only not yet reaped
    except FileNotFoundError:
        return True


def test_nothing_is_left_after_a_pair_even_when_the_body_raises():
    reason = hosts.unavailable()
    if reason:
        pytest.skip(reason)
    seen: dict[str, object] = {}
    with pytest.raises(KeyError), hosts.pair() as (master, replica):
        procs = [h.popen(["sleep", "300"]) for h in (master, replica)]
        master.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 &"])
        seen.update(
            netns=[master.netns, replica.netns],
            devs=[end[1] for end in master.link.ends],
            holders=[master.holder.pid, replica.holder.pid],
            dirs=[master.dir, replica.dir],
            pids=master.pids() + replica.pids(),
        )
        assert len(seen["pids"]) == 3
        raise KeyError("the test body failed")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in seen["netns"]), listed
    assert not any(os.path.exists(f"/sys/class/net/{d}") for d in seen["devs"])
    assert all(_gone(p) for p in seen["holders"] + seen["pids"])
    assert not any(os.path.exists(d) for d in seen["dirs"])
    for p in procs:
        p.wait(5)


def test_sweep_removes_the_namespace_of_a_dead_creator():
    reason = hosts.unavailable()
    if reason:
        pytest.skip(reason)
    dead = subprocess.Popen(["true"])
    dead.wait()
    ns = f"shmq-orphan-{dead.pid}-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        assert ns in hosts.sweep_stale()
        assert ns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
