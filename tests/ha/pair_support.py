"""A master broker and a replica daemon on two hosts (tests/ha/hosts.py), as an operator runs them.

Each host runs the real commands (`shmq broker`, `shmq replica`, `shmq admin promote`) and small
client programs; what a program learns (acknowledged keys, messages read) goes to files in
its host's directory, the only thing the test reads besides the store files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.ha.hosts import Host

HA_PORT = 10912
SEGMENT = 1 << 20  # 1 MiB commitlog segments: replication crosses many segment ends

# no haAuthToken: the master generates STORE/config/ha.token, the replica gets a copy (docs/HA.md)
COMMON = {
    "mappedFileSizeCommitLog": SEGMENT,
    "haSendHeartbeatInterval": 300,
    "haHousekeepingInterval": 2000,
    "haConnectTimeout": 1000,
    "haReconnectInterval": 200,
    "syncFlushTimeout": 1000,
}

WAIT_SERVING = """
import sys, time
from shmq.ring.state import StateReader
from shmq.errors import ShmqError
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    try:
        StateReader.open(sys.argv[1]).close()
        print("up"); break
    except ShmqError:
        time.sleep(0.05)
else:
    print("down"); sys.exit(1)
"""

# argv: broker, topic, acked file, status file, [count]. Sync sends of keys k<i> to queue i % 4,
# one line per SEND_OK (flushed: the file survives the host's death); other statuses counted.
PRODUCE = """
import collections, json, sys, time
import shmq
broker, topic, acked_path, status_path = sys.argv[1:5]
count = int(sys.argv[5]) if len(sys.argv) > 5 else 1 << 62
statuses = collections.Counter()
slowest = 0.0
p = shmq.Producer("pp", broker=broker).start()
with open(acked_path, "a", buffering=1) as acked:
    for i in range(count):
        t = time.monotonic()
        try:
            r = p.send(shmq.Message(topic, b"m%d" % i, keys=f"k{i}"), selector=lambda qs, m, a: qs[a % len(qs)],
                       arg=i, timeout=10)
            statuses[r.status.name] += 1
            if r.status is shmq.SendStatus.SEND_OK:
                acked.write(f"k{i} {r.queue.queue_id} {r.queue_offset}\\n")
        except shmq.ShmqError as e:
            statuses[type(e).__name__] += 1
        slowest = max(slowest, time.monotonic() - t)
        if i % 20 == 0:
            with open(status_path + ".tmp", "w") as f:
                json.dump({"sent": i + 1, "statuses": statuses, "slowest": slowest}, f)
            import os; os.replace(status_path + ".tmp", status_path)
p.shutdown()
with open(status_path, "w") as f:
    json.dump({"sent": count, "statuses": statuses, "slowest": slowest}, f)
"""

# argv: broker, topic, out file: every message of every queue as {queue: [[offset, key], ...]}
READ_ALL = """
import json, sys
import shmq
broker, topic, out = sys.argv[1:4]
c = shmq.PullConsumer("reader", broker=broker).start()
got = {}
for mq in c.fetch_queues(topic):
    rows = got.setdefault(mq.queue_id, [])
    off = c.min_offset(mq)
    hi = c.max_offset(mq)
    while off < hi:
        r = c.pull(mq, "*", offset=off, max_nums=256, timeout=0.1)
        for m in r.messages:
            rows.append([m.queue_offset, m.keys])
        off = r.next_begin_offset
c.shutdown()
json.dump(got, open(out, "w"))
"""


def write_conf(host: Host, name: str, values: dict[str, object]) -> str:
    path = os.path.join(host.dir, f"{name}.conf")
    with open(path, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def wait_serving(host: Host, name: str, timeout: float = 30) -> None:
    out = host.run_python(WAIT_SERVING, name, timeout, timeout=timeout + 10)
    assert out.stdout.strip() == "up", f"{name} on {host} is not serving: {out.stdout}{out.stderr}"


def start_master(host: Host, role: str = "SYNC_MASTER", **extra: object) -> subprocess.Popen:
    conf = write_conf(
        host, "master", {**COMMON, "brokerRole": role, "haListenAddress": host.ip, "haListenPort": HA_PORT, **extra}
    )
    with open(os.path.join(host.dir, "broker.err"), "ab") as err:  # the broker has its own copy
        proc = host.popen(
            [
                sys.executable,
                "-m",
                "shmq",
                "broker",
                "--store",
                os.path.join(host.dir, "store"),
                "--name",
                "m",
                "--config",
                conf,
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    wait_serving(host, "m")
    return proc


def start_replica(host: Host, master: Host, **extra: object) -> subprocess.Popen:
    """`shmq replica` set up as an operator does: its store holds a copy of the master's token."""
    token = os.path.join(replica_store(host), "config", "ha.token")
    if not os.path.exists(token):
        os.makedirs(os.path.dirname(token), mode=0o700, exist_ok=True)
        shutil.copy2(os.path.join(master.dir, "store", "config", "ha.token"), token)
    conf = write_conf(host, "replica", {**COMMON, **extra})
    with open(os.path.join(host.dir, "replica.err"), "ab") as err:  # the replica has its own copy
        proc = host.popen(
            [
                sys.executable,
                "-m",
                "shmq",
                "replica",
                "--store",
                replica_store(host),
                "--name",
                "r",
                "--master",
                f"{master.ip}:{HA_PORT}",
                "--config",
                conf,
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    wait_serving(host, "r")
    return proc


def replica_store(host: Host) -> str:
    return os.path.join(host.dir, "rstore")


def commitlog_bytes(store: str) -> bytes:
    d = os.path.join(store, "commitlog")
    return b"".join(Path(os.path.join(d, f)).read_bytes() for f in sorted(os.listdir(d)))


def log_end(store: str) -> int:
    """The commitlog's end as far as it is written: the last non-zero byte's segment position
    is not exact, so the caller compares prefixes up to the shorter valid end."""
    return len(commitlog_bytes(store).rstrip(b"\0"))


def status(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return {"sent": 0, "statuses": {}, "slowest": 0.0}


def acked(path: str) -> list[tuple[str, int, int]]:
    out = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:  # a line cut by the host's death is not an acknowledgement read back
                out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


def wait_until(cond, timeout: float, what: str, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


def read_all(host, broker: str, out_name: str) -> dict[int, list[tuple[int, str]]]:
    out = os.path.join(host.dir, out_name)
    r = host.run_python(READ_ALL, broker, "T", out, timeout=60)
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        return {int(q): [(o, k) for o, k in rows] for q, rows in json.load(f).items()}


def check_acked_on(got: dict[int, list[tuple[int, str]]], acked: list[tuple[str, int, int]]) -> None:
    """Every acknowledged key is at the queue offset the master gave it; no key twice; per queue
    the keys rise with the offset (one producer sending in order)."""
    at = {(q, o): k for q, rows in got.items() for o, k in rows}
    missing = [(k, q, o) for k, q, o in acked if at.get((q, o)) != k]
    assert missing == [], f"{len(missing)} acknowledged messages are not where the master put them: {missing[:5]}"
    keys = [k for rows in got.values() for _, k in rows]
    assert len(keys) == len(set(keys)), "a message is stored twice"
    for q, rows in got.items():
        nums = [int(k[1:]) for _, k in rows]
        assert nums == sorted(nums), f"queue {q} is out of order"


def failover_round(master: Host, replica: Host, min_acked: int, kill_after: float) -> dict[str, int]:
    """The master host dies under a SYNC_MASTER load ``kill_after`` s after ``min_acked`` sends
    were acknowledged; the replica is promoted (`shmq admin promote`) and must hold every
    acknowledged message where the master put it, in order, none twice, and take sends.
    AssertionError otherwise; else counts for a report."""
    start_master(master, "SYNC_MASTER")
    start_replica(replica, master)
    acked_path, status_path = os.path.join(master.dir, "acked"), os.path.join(master.dir, "status")
    master.python(PRODUCE, "m", "T", acked_path, status_path)
    wait_until(
        lambda: os.path.exists(acked_path) and len(acked(acked_path)) >= min_acked,
        60,
        f"{min_acked} acknowledged sends",
    )
    time.sleep(kill_after)
    master.kill_all()  # the broker, its HA sender and the producer die together: the host is gone
    done = acked(acked_path)
    conf = write_conf(replica, "promoted", {"mappedFileSizeCommitLog": SEGMENT, "haListenPort": 0})
    out = replica.run(
        [sys.executable, "-m", "shmq", "admin", "promote", "--store", replica_store(replica), "--config", conf],
        timeout=90,
    )  # it keeps the name "r" its clients know
    assert out.returncode == 0, out.stdout + out.stderr
    wait_serving(replica, "r")
    got = read_all(replica, "r", "after-promote.json")
    check_acked_on(got, done)
    more = os.path.join(replica.dir, "more")
    r = replica.run_python(PRODUCE, "r", "T", more, more + ".status", 5, timeout=60)
    assert r.returncode == 0 and len(acked(more)) == 5, r.stderr
    return {"acked": len(done), "stored": sum(map(len, got.values()))}
