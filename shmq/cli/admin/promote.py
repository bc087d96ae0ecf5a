"""`shmq admin promote`: turn the replica serving a store into a master broker on the same store.

The replica's store is byte-identical to the master's log up to where it got, so it opens as a
master store unchanged (the store opens a new epoch at a master start). The replica is stopped
gracefully (SIGTERM: it finishes its pass, persists offsets and topics, removes its IPC
objects), then `shmq broker --role ROLE` is started detached on the store with its log in
STORE/broker.log, and the command returns once the new broker serves. The master keeps the
name the replica served under (recorded in the store at the replica's start), so clients
configured for the replica find it; ``--name`` (or ``brokerName`` in ``--config``) overrides.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from typing import Any

from shmq.cli.admin.output import Result, add_common
from shmq.cli.options import load_config
from shmq.cli.subcommands import Subcommands
from shmq.errors import BrokerNotFoundError, ShmqError
from shmq.ha.served_as import RECORD, served_name
from shmq.ha.shared import HASegment
from shmq.ring.liveness import Watch
from shmq.ring.state import StateReader
from shmq.store import files

POLL_S = 0.02


def promote(store: str, name: str | None, config_path: str | None, role: str, timeout: float) -> Result | int:
    """Stop the replica of ``store`` and start a master on it: what was done (``--json``: the
    data; people: one line). A bad config or no name to serve under is status 2, after one line."""
    loaded = load_config("admin promote", config_path, name)
    if loaded is None:
        return 2
    store_dir = os.path.realpath(store)
    if name is None and loaded[0].broker_name is None:
        name = served_name(store_dir)
        if name is None:
            print(
                f"shmq admin promote: error: store {store_dir} records no replica name ({RECORD}): give the "
                "name clients use with --name N",
                file=sys.stderr,
            )
            return 2
    else:
        name = loaded[1]
    stopped = _stop_replica(name, store_dir, timeout)  # ShmqError / OSError: one line, status 1
    pid = _start_master(store_dir, name, config_path, role, timeout)
    return Result(
        {
            "store": store_dir,
            "name": name,
            "role": role,
            "pid": pid,
            "replica_pid_stopped": stopped,
            "log": os.path.join(store_dir, "broker.log"),
        },
        _render,
    )


def _render(d: dict[str, Any]) -> str:
    was = f"replica pid {d['replica_pid_stopped']} stopped" if d["replica_pid_stopped"] else "no replica was running"
    return (
        f"promoted store {d['store']}: broker {d['name']!r} serves as {d['role']} (pid {d['pid']}; {was}; "
        f"log {d['log']})"
    )


def _serving(name: str) -> tuple[int, int, str] | None:
    """(pid, liveness key, store dir) of the live broker ``name``, None if none serves."""
    try:
        reader = StateReader.open(name)
    except BrokerNotFoundError:
        return None
    try:
        h = reader.view.header[0]
        pid, alive_key = int(h["broker_pid"]), int(h["alive_key"])
        store = bytes(h["store_dir"]).rstrip(b"\0").decode(errors="replace")
    finally:
        reader.close()
    return (pid, alive_key, store) if Watch(alive_key).is_alive() else None


def _stop_replica(name: str, store_dir: str, timeout: float) -> int | None:
    """SIGTERM the replica ``name`` serving ``store_dir`` and wait until it let go of it; its pid."""
    found = _serving(name)
    if found is not None:
        pid, alive_key, serving = found
        if os.path.realpath(serving) != store_dir:
            raise ShmqError(f"broker {name!r} (pid {pid}) serves {serving}, not {store_dir}: nothing promoted")
        if _is_master(name):
            raise ShmqError(f"broker {name!r} (pid {pid}) serving {store_dir} is a master already: nothing promoted")
        watch: Watch | None = Watch(alive_key)
    elif _store_free(store_dir):
        return None
    else:  # not under this name: whoever holds the store's lock
        pid, watch = _lock_pid(store_dir) or 0, None
        if pid <= 0:
            raise ShmqError(f"store {store_dir} is locked by a process that wrote no pid: stop it first")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while (watch is not None and watch.is_alive()) or not _store_free(store_dir):
        if time.monotonic() > deadline:
            raise ShmqError(
                f"replica {name!r} (pid {pid}) did not stop within {timeout:g} s after SIGTERM; "
                "its store is still in use (stop it, then run `shmq broker` on the store)"
            )
        time.sleep(POLL_S)
    return pid


def _is_master(name: str) -> bool:
    """A master owns an HA segment; a replica has none."""
    try:
        HASegment.open(name, read_only=True).close()
    except (ShmqError, OSError):
        return False
    return True


def _store_free(store_dir: str) -> bool:
    """Whether nobody holds the store's lock (the replica's store shut down); the pid written
    in the lock file is left as it is."""
    try:
        fd = os.open(os.path.join(store_dir, "lock"), os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing releases a lock taken here
    return True


def _lock_pid(store_dir: str) -> int | None:
    """The pid the holder of the store's lock wrote into it."""
    try:
        with open(os.path.join(store_dir, "lock"), encoding="ascii", errors="replace") as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _start_master(store_dir: str, name: str, config_path: str | None, role: str, timeout: float) -> int:
    """`shmq broker --role ROLE` detached on the store; its pid once it serves."""
    cmd = [sys.executable, "-m", "shmq", "broker", "--store", store_dir, "--name", name, "--role", role]
    if config_path:
        cmd += ["--config", os.path.abspath(config_path)]
    os.makedirs(store_dir, exist_ok=True)  # --store: "created if missing", as for `shmq broker`
    log_path = os.path.join(store_dir, "broker.log")
    fd = files.open_file(log_path, os.O_WRONLY | os.O_APPEND)[0]
    with os.fdopen(fd, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ShmqError(f"the broker exited with status {proc.returncode} (see {log_path})")
        found = _serving(name)
        if found is not None and found[0] == proc.pid:
            return proc.pid
        time.sleep(POLL_S)
    raise ShmqError(f"the broker (pid {proc.pid}) did not serve within {timeout:g} s (see {log_path})")


def register(sub: Subcommands) -> None:
    """`shmq admin promote --store DIR [--name N] [--config FILE] [--role R] [--timeout S]`."""
    p = sub.add_parser("promote", help="stop the replica serving a store and start a master broker on it")
    p.add_argument("--store", required=True, help="store directory (created if missing)")
    p.add_argument(
        "--name",
        help="broker name clients attach to (default: brokerName of the config, else the "
        "name the replica served under, recorded in the store)",
    )
    p.add_argument("--config", help="TOML file or RocketMQ-style broker.conf (key=value)")
    p.add_argument(
        "--role", choices=("ASYNC_MASTER", "SYNC_MASTER"), default="ASYNC_MASTER", help="role of the new master"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait for the replica to stop and for the broker to serve",
    )
    add_common(p, broker=False)
    p.set_defaults(run=lambda a: promote(a.store, a.name, a.config, a.role, a.timeout))
