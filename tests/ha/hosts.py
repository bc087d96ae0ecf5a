"""Two "hosts" on one machine for the HA tests and tools/bench/ha_bench.py: only TCP connects them.

A ``Host`` is a network namespace plus a holder process (``sleep infinity``) that owns the host's
own IPC namespace and mount namespace, with a private tmpfs on /dev/shm. Every process of the
host is started by ``nsenter`` into the holder's namespaces, so POSIX shm names, SysV queues and
semaphores and abstract unix sockets of one host are invisible to the other host and to the test
process; the store directories stay on the common filesystem (each host gets its own ``dir``).
``pair()`` links two hosts by a veth pair (10.199.N.1 and .2/24, lo up in both).

Faults on the link: ``down()``/``up()`` set both veth ends administratively down/up (routes go,
so a connect fails at once or times out, established connections stall); ``loss(percent)``
drops that share of packets leaving either end. Loss is a classic-BPF classifier on a clsact
qdisc rather than ``tc netem``: netem is often not built into CI kernels (it is not here),
cls_bpf and clsact are. Cleanup always kills every process of both hosts and deletes both
namespaces (the veth dies with them), also when the body raised; namespaces left by a test run
that was itself SIGKILLed are swept by the next ``pair()`` (their names carry the creator's pid).
Needs root; ``unavailable()`` says why not, and the pytest fixture skips with that reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "shmq-"
_NS_RE = re.compile(r"^shmq-[a-z0-9]+-(\d+)-[0-9a-f]{6}$")
# Classic BPF in tc's "bytecode" notation, run in direct-action mode: the return value is the
# tc verdict (TC_ACT_SHOT = 2 drops, TC_ACT_UNSPEC = 0xffffffff lets the packet through).
_DROP_ALL = "1,6 0 0 2,"
_SKF_AD_RANDOM = 0xFFFFF000 + 56  # ld rand: a fresh random u32 per packet


def _drop_share(percent: float) -> str:
    """A program dropping ``percent`` % of packets: pass when rand >= percent/100 * 2**32."""
    if percent >= 100:
        return _DROP_ALL
    threshold = int(percent / 100 * 2**32)
    return f"4,32 0 0 {_SKF_AD_RANDOM},53 0 1 {threshold},6 0 0 4294967295,6 0 0 2,"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _tc(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["tc", "-n", ns, *args], capture_output=True, text=True, check=check, timeout=30)


def unavailable() -> str | None:
    """Why hosts cannot be made here (not root, a tool missing, netns refused), or None."""
    if os.geteuid() != 0:
        return "HA host tests need root (ip netns, unshare, mount)"
    missing = [t for t in ("ip", "tc", "nsenter", "unshare") if shutil.which(t) is None]
    if missing:
        return f"HA host tests need {', '.join(missing)} (iproute2, util-linux)"
    probe = f"{PREFIX}probe-{os.getpid()}-{secrets.token_hex(3)}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode:
        return f"ip netns add failed: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _ns_inode(pid: int, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def _members(kind: str, inode: int) -> list[int]:
    """Every live process whose ``kind`` namespace has this inode."""
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and _ns_inode(int(entry), kind) == inode]


def _kill_members(kind: str, inode: int, spare: int | None = None) -> None:
    """SIGKILL the namespace's members (not ``spare``) until none is left (children may fork meanwhile)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = [p for p in _members(kind, inode) if p != spare]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    raise RuntimeError(f"processes of {kind} namespace {inode} survive SIGKILL: {_members(kind, inode)}")


class Host:
    """One host: a network namespace, and an IPC + mount namespace held by a holder process."""

    def __init__(self, name: str, netns: str, ip: str) -> None:
        self.name = name
        self.netns = netns
        self.ip = ip
        self.dir = tempfile.mkdtemp(prefix=f"shmq-host-{name}-")
        self.link: Link | None = None
        self.holder: subprocess.Popen | None = None
        self.ipc_inode: int | None = None
        self._procs: list[subprocess.Popen] = []  # popen's children, reaped when they are killed
        try:
            self._start_holder()
        except BaseException:
            self._stop_holder()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def _start_holder(self) -> None:
        self.holder = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.netns,
                "unshare",
                "--ipc",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                "mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec sleep infinity",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # ip, unshare and sh all exec: the pid ends up as sleep
            if self.holder.poll() is not None:
                err = self.holder.stderr.read().decode()  # type: ignore[union-attr]
                raise RuntimeError(f"host {self.name}: holder exited: {err}")
            with contextlib.suppress(FileNotFoundError):
                if Path(f"/proc/{self.holder.pid}/comm").read_text().strip() == "sleep":
                    self.ipc_inode = _ns_inode(self.holder.pid, "ipc")
                    return
            time.sleep(0.005)
        raise RuntimeError(f"host {self.name}: holder did not come up within 10 s")

    def argv(self, argv: Sequence[str], cwd: str | os.PathLike | None = None) -> list[str]:
        """``argv`` wrapped to run inside this host (cwd kept: entering a mount namespace resets it)."""
        assert self.holder is not None
        return [
            "nsenter",
            f"--target={self.holder.pid}",
            "--net",
            "--ipc",
            "--mount",
            f"--wd={os.fspath(cwd) if cwd is not None else ROOT}",
            "--",
            *map(os.fspath, argv),
        ]

    def popen(self, argv: Sequence[str], cwd: str | os.PathLike | None = None, **kw: Any) -> subprocess.Popen:
        """Start ``argv`` in this host (nsenter execs it: the pid is the program's own).

        Returns once the process is inside the host, so a ``kill_all()`` right after sees it."""
        proc = subprocess.Popen(self.argv(argv, cwd), **kw)
        deadline = time.monotonic() + 10
        while _ns_inode(proc.pid, "ipc") != self.ipc_inode and proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"{self}: {argv[0]} did not enter the host within 10 s")
            time.sleep(0.001)
        self._procs.append(proc)
        return proc

    def run(
        self, argv: Sequence[str], timeout: float = 30, cwd: str | os.PathLike | None = None, **kw: Any
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` in this host to completion, output captured as text."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        return subprocess.run(self.argv(argv, cwd), timeout=timeout, **kw)

    @staticmethod
    def _python_argv(source: str, args: Sequence[str]) -> list[str]:
        script = source.endswith(".py") and "\n" not in source and os.path.exists(source)
        return [sys.executable, *([source] if script else ["-c", source]), *map(str, args)]

    def python(self, source: str, *args: Any, **kw: Any) -> subprocess.Popen:
        """Start the venv's python on a script path or on code, in this host."""
        return self.popen(self._python_argv(source, args), **kw)

    def run_python(self, source: str, *args: Any, timeout: float = 30, **kw: Any) -> subprocess.CompletedProcess:
        """Run the venv's python on a script path or on code in this host to completion."""
        return self.run(self._python_argv(source, args), timeout=timeout, **kw)

    def pids(self) -> list[int]:
        """The host's processes other than its holder."""
        assert self.holder is not None and self.ipc_inode is not None
        return [p for p in _members("ipc", self.ipc_inode) if p != self.holder.pid]

    def kill_all(self) -> None:
        """SIGKILL every process of this host (the host itself, its /dev/shm and SysV objects stay)."""
        assert self.holder is not None and self.ipc_inode is not None
        _kill_members("ipc", self.ipc_inode, spare=self.holder.pid)
        self._reap()

    def _reap(self) -> None:
        """Wait for the killed children of popen (no zombies, and their returncode is set)."""
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        self._procs = [p for p in self._procs if p.returncode is None]

    def reboot(self) -> None:
        """A host crash and restart: every process killed, /dev/shm and the SysV tables start empty."""
        self._stop_holder()
        self._start_holder()

    def _stop_holder(self) -> None:
        if self.holder is None:
            return
        if self.ipc_inode is not None:
            _kill_members("ipc", self.ipc_inode)
            self._reap()
        if self.holder.poll() is None:
            self.holder.kill()
        self.holder.wait()
        if self.holder.stderr:
            self.holder.stderr.close()
        self.holder = None

    def close(self) -> None:
        """Kill every process of the host, delete its namespace and directory."""
        try:
            self._stop_holder()
        finally:
            _delete_netns(self.netns)
            shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.ip}, netns={self.netns})"


class Link:
    """The veth pair between two hosts: ends ``(netns, device)``."""

    def __init__(self, a: tuple[str, str], b: tuple[str, str]) -> None:
        self.ends = (a, b)

    def down(self) -> None:
        for ns, dev in self.ends:
            _ip("-n", ns, "link", "set", dev, "down")

    def up(self) -> None:
        for ns, dev in self.ends:
            _ip("-n", ns, "link", "set", dev, "up")

    def loss(self, percent: float) -> None:
        """Drop ``percent`` % of the packets leaving either end (100: nothing gets through)."""
        self.clear()
        for ns, dev in self.ends:
            _tc(ns, "qdisc", "add", "dev", dev, "clsact")
            _tc(ns, "filter", "add", "dev", dev, "egress", "bpf", "da", "bytecode", _drop_share(percent))

    def clear(self) -> None:
        """Remove any loss (the clsact qdisc and its filters) from both ends."""
        for ns, dev in self.ends:
            _tc(ns, "qdisc", "del", "dev", dev, "clsact", check=False)


def _delete_netns(ns: str) -> None:
    """Kill whatever still runs in the namespace (by its inode), then delete it."""
    path = f"/run/netns/{ns}"
    if not os.path.exists(path):
        return
    with contextlib.suppress(FileNotFoundError):
        _kill_members("net", os.stat(path).st_ino)
    _ip("netns", "del", ns, check=False)


def sweep_stale() -> list[str]:
    """Delete hosts' namespaces whose creating process is gone (a test run that was SIGKILLed)."""
    gone = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        ns = line.split()[0] if line.split() else ""
        m = _NS_RE.match(ns)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            _delete_netns(ns)
            gone.append(ns)
    return gone


@contextlib.contextmanager
def pair(names: tuple[str, str] = ("master", "replica")) -> Iterator[tuple[Host, Host]]:
    """Two hosts linked by a veth pair; ``master.link is replica.link``. Always cleaned up."""
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    sweep_stale()
    tag = secrets.token_hex(3)
    subnet = f"10.199.{secrets.randbelow(256)}"
    netns = [f"{PREFIX}{n}-{os.getpid()}-{tag}" for n in names]
    devs = [f"shq{tag}a", f"shq{tag}b"]
    hosts: list[Host] = []
    try:
        for ns in netns:
            _ip("netns", "add", ns)
        _ip("link", "add", devs[0], "netns", netns[0], "type", "veth", "peer", "name", devs[1], "netns", netns[1])
        for i, (ns, dev) in enumerate(zip(netns, devs)):
            _ip("-n", ns, "addr", "add", f"{subnet}.{i + 1}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        link = Link((netns[0], devs[0]), (netns[1], devs[1]))
        for i, (name, ns) in enumerate(zip(names, netns)):
            hosts.append(Host(name, ns, f"{subnet}.{i + 1}"))
            hosts[-1].link = link
        yield hosts[0], hosts[1]
    finally:
        errors = []
        for h in hosts:
            try:
                h.close()
            except Exception as e:  # noqa: BLE001 - the other host is still cleaned up
                errors.append(f"{h}: {e}")
        for ns in netns[len(hosts) :]:
            _delete_netns(ns)
        if errors:
            raise RuntimeError("host cleanup failed: " + "; ".join(errors))
