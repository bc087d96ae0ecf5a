"""HA benchmark (issue 11): a master and a replica on two hosts joined only by TCP over a veth.

The hosts are the tests' (tests/ha/hosts.py: network, IPC and /dev/shm namespaces of their own);
each measurement gets a fresh pair, the master broker and the load run inside the master host,
``shmq replica`` inside the replica host. Medians of ``--reps`` runs of:

- keep-up: the master's maximum ingest of 100 B messages in batches of 100 for ``--seconds``
  (ASYNC_MASTER); replica lag p50/p99 in bytes (master end - acked) and in ms (how long after the
  master reached an offset the replica acked it; 5 ms sampling, so 5 ms is the resolution), and
  the lag's p50 (bytes and ms) over the first and the last third of the run: it must not grow.
  Only the samples while the master's end moves count (not the load's start-up and shutdown);
- catch-up: a ``--catchup-mib`` backlog (4 KiB bodies) written with no replica, then a fresh
  replica: MB/s from its connection until it acked the master's end (goal >= 200 MB/s);
- senders: 8 processes each doing ``Producer.send`` one at a time (the suite's replicated
  workload) on SYNC_MASTER and on ASYNC_MASTER with the replica streaming: msgs/s, round trip
  p50/p99, and SYNC / ASYNC (goal >= 0.5).

Needs root (namespaces) and a shmq with HA (``shmq replica``).

    .venv/bin/python tools/bench/ha_bench.py [--reps 3] [--seconds 30] [--catchup-mib 1024] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.ha import hosts
from tools.bench.suite import core
from tools.bench.suite.peers.shmqha import FixedPair, wait_streaming

PORT = 10912  # each master host has its own network namespace
MASTER, REPLICA = "hab", "habr"  # and its own IPC namespace: fixed broker names cannot collide
BATCH = 100
IN_FLIGHT = 4
SAMPLE = 0.005


# ---------------------------------------------------------------- pure: lag from samples


def lag_stats(t: np.ndarray, master: np.ndarray, acked: np.ndarray) -> dict:
    """Lag figures from samples (monotonic seconds, master end, best acked offset; -1 = none yet).

    Only the samples while the master's end moves count: the load process's start (imports,
    connecting) and its shutdown leave the master idle with the replica at its end, lag 0 samples
    that would flatter the percentiles and the first third / last third comparison."""
    t = np.asarray(t, dtype=np.float64)
    master = np.asarray(master, dtype=np.int64)
    acked = np.maximum.accumulate(np.asarray(acked, dtype=np.int64))
    moves = np.flatnonzero(np.diff(master))
    lo, hi = (moves[0], moves[-1] + 2) if len(moves) else (0, len(master))  # the sample before the first move
    first = np.searchsorted(acked, master[lo:hi], side="left")  # the first sample where acked >= master[i]
    done = first < len(acked)
    lag_ms = (t[first[done]] - t[lo:hi][done]) * 1e3
    lag_b = np.clip(master[lo:hi] - acked[lo:hi], 0, None)
    thirds = np.array_split(lag_b, 3)
    ms_thirds = np.array_split(lag_ms, 3) if len(lag_ms) >= 3 else None
    return {
        "lag_bytes_p50": float(np.percentile(lag_b, 50)),
        "lag_bytes_p99": float(np.percentile(lag_b, 99)),
        "lag_ms_p50": float(np.percentile(lag_ms, 50)) if len(lag_ms) else None,
        "lag_ms_p99": float(np.percentile(lag_ms, 99)) if len(lag_ms) else None,
        "lag_bytes_p50_first_third": float(np.median(thirds[0])),
        "lag_bytes_p50_last_third": float(np.median(thirds[-1])),
        "lag_ms_p50_first_third": float(np.median(ms_thirds[0])) if ms_thirds else None,
        "lag_ms_p50_last_third": float(np.median(ms_thirds[-1])) if ms_thirds else None,
        "ingest_mb_s": float((master[hi - 1] - master[lo]) / max(t[hi - 1] - t[lo], 1e-9) / 1e6),
        "seconds": float(t[hi - 1] - t[lo]),
        "samples": int(hi - lo),
        "samples_never_acked": int((~done).sum()),
    }


# ---------------------------------------------------------------- worker: inside the master host


def load(broker: str, size: int, seconds: float, max_bytes: int) -> None:
    """One producer at full speed: batches of 100 with 4 in flight, until the time or the bytes are used."""
    import collections

    import shmq

    p = shmq.Producer(f"hab-load-{os.getpid()}", broker=broker)
    p.start()
    batch = shmq.MessageBatch("HaBench", [os.urandom(size)] * BATCH)
    pending: collections.deque = collections.deque()
    end = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < end and sent < max_bytes:
        pending.append(p.send_batch_async(batch))
        sent += size * BATCH
        if len(pending) >= IN_FLIGHT:
            pending.popleft().result(60)
    for f in pending:
        f.result(60)
    p.shutdown()


def _run_load(broker: str, size: int, seconds: float, max_bytes: int, sample: bool) -> dict:
    """Run ``load`` in a child; with ``sample``, the lag figures over the run."""
    from shmq.ha.shared import STREAMING, HASegment

    proc = core.SPAWN.Process(target=load, args=(broker, size, seconds, max_bytes), daemon=True)
    proc.start()
    seg = HASegment.open(broker, read_only=True)
    t, m, a = [], [], []
    try:
        while proc.is_alive():
            if sample:
                t.append(time.monotonic())
                m.append(seg.master_offset)
                a.append(max((r.acked_offset for r in seg.replicas() if r.state == STREAMING), default=-1))
            time.sleep(SAMPLE)
    finally:
        seg.close()
        proc.join()
    if proc.exitcode:
        raise RuntimeError(f"the load process exited {proc.exitcode}")
    return lag_stats(np.array(t), np.array(m), np.array(a)) if sample else {}


def _catch_up(broker: str, timeout: float = 900.0) -> dict:
    """After the backlog: ask for the replica, then time it from its connection to the master's end."""
    from shmq.ha.shared import HASegment

    seg = HASegment.open(broker, read_only=True)
    try:
        end = seg.master_offset
        print("start-replica", flush=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [r for r in seg.replicas() if r.acked_offset >= 0]
            if live and max(r.acked_offset for r in live) >= end:
                done_ms = time.time() * 1e3
                conn_ms = min(r.connected_ms for r in live)
                return {
                    "backlog_mb": end / 1e6,
                    "catchup_s": (done_ms - conn_ms) / 1e3,
                    "catchup_mb_s": end / 1e6 / max((done_ms - conn_ms) / 1e3, 1e-9),
                }
            time.sleep(0.002)
    finally:
        seg.close()
    raise RuntimeError(f"the replica did not catch up with {end} bytes within {timeout} s")


def _senders(broker: str, seconds: float, sync: bool) -> dict:
    import shmq

    p = shmq.Producer("hab-warm", broker=broker)
    p.start()
    p.send(shmq.Message("HaSenders", b"w"))  # creates the topic
    p.shutdown()
    spec = core.ReplicatedSpec(8, 100, 1_000_000, seconds, f"hab{os.getpid()}", sync)
    r = core.run_replicated(FixedPair({"broker": broker, "topic": "HaSenders"}), spec)
    return {"msgs_s": r["msgs_s"], "p50_us": r["p50_us"], "p99_us": r["p99_us"]}


def worker(a: argparse.Namespace) -> None:
    import shmq

    config = {"brokerRole": a.role, "haListenPort": PORT, "haListenAddress": a.address, "default_topic_queue_nums": 8}
    broker = shmq.Broker(a.store, name=MASTER, config=config)
    try:
        if a.phase == "catchup":
            _run_load(MASTER, 4096, 3600, a.bytes, sample=False)
            res = _catch_up(MASTER)
        else:
            print("start-replica", flush=True)
            wait_streaming(MASTER)
            if a.phase == "keepup":
                res = _run_load(MASTER, 100, a.seconds, 1 << 62, sample=True)
            else:
                res = _senders(MASTER, a.seconds, a.role == "SYNC_MASTER")
    finally:
        broker.stop()
    print("result " + json.dumps(res), flush=True)


# ---------------------------------------------------------------- orchestrator: root namespace


def phase(name: str, role: str, a: argparse.Namespace) -> dict:
    """One measurement on a fresh host pair: the worker in the master host, the replica on its cue."""
    with hosts.pair() as (master, replica):
        argv = [
            str(Path(__file__).resolve()),
            "worker",
            name,
            "--role",
            role,
            "--address",
            master.ip,
            "--store",
            f"{master.dir}/store",
            "--seconds",
            a.seconds,
            "--bytes",
            a.catchup_mib << 20,
        ]
        w = master.python(*map(str, argv), stdout=subprocess.PIPE, text=True)
        watchdog = threading.Timer(a.seconds * 4 + 1200, w.kill)
        watchdog.start()
        result = None
        try:
            for line in w.stdout:  # type: ignore[union-attr]
                if line.strip() == "start-replica":  # the operator's step first: the master's token to the replica
                    os.makedirs(f"{replica.dir}/store/config", mode=0o700, exist_ok=True)
                    shutil.copy2(f"{master.dir}/store/config/ha.token", f"{replica.dir}/store/config/ha.token")
                    with open(f"{replica.dir}/replica.log", "ab") as log:
                        replica.popen(
                            [
                                sys.executable,
                                "-m",
                                "shmq",
                                "replica",
                                "--store",
                                f"{replica.dir}/store",
                                "--name",
                                REPLICA,
                                "--master",
                                f"{master.ip}:{PORT}",
                            ],
                            stdout=log,
                            stderr=log,
                        )
                elif line.startswith("result "):
                    result = json.loads(line[len("result ") :])
            w.wait()
        finally:
            watchdog.cancel()
        if result is None:
            tail = (
                Path(f"{replica.dir}/replica.log").read_text(errors="replace")[-2000:]
                if Path(f"{replica.dir}/replica.log").exists()
                else ""
            )
            raise RuntimeError(
                f"{name} ({role}): the worker exited {w.returncode} without a result; replica log: {tail}"
            )
        return result


def medians(runs: list[dict]) -> dict:
    return {
        k: float(np.median([r[k] for r in runs if r.get(k) is not None]))
        for k in runs[0]
        if any(r.get(k) is not None for r in runs)
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", nargs="?", default="run", choices=["run", "worker"])
    ap.add_argument("phase", nargs="?", choices=["keepup", "catchup", "senders"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30.0, help="keep-up run length (senders: a third of it)")
    ap.add_argument("--catchup-mib", type=int, default=1024)
    ap.add_argument("--out", help="write the JSON here too")
    ap.add_argument("--role", default="ASYNC_MASTER")  # worker only, from here on
    ap.add_argument("--address")
    ap.add_argument("--store")
    ap.add_argument("--bytes", type=int)
    a = ap.parse_args()
    if a.mode == "worker":
        worker(a)
        return 0
    why = hosts.unavailable()
    if why:
        print(f"ha_bench: {why}", file=sys.stderr)
        return 2
    runs: dict[str, list[dict]] = {"keepup": [], "catchup": [], "senders SYNC_MASTER": [], "senders ASYNC_MASTER": []}
    senders = argparse.Namespace(**{**vars(a), "seconds": max(a.seconds / 3, 2.0)})
    for rep in range(a.reps):  # interleaved, so a slow minute of the machine hits every row
        runs["keepup"].append(phase("keepup", "ASYNC_MASTER", a))
        runs["catchup"].append(phase("catchup", "ASYNC_MASTER", a))
        for role in ("SYNC_MASTER", "ASYNC_MASTER"):
            runs[f"senders {role}"].append(phase("senders", role, senders))
        print(f"[ha_bench] rep {rep + 1}/{a.reps}: " + json.dumps({k: v[-1] for k, v in runs.items()}), flush=True)
    out = {k: medians(v) for k, v in runs.items()}
    sync, asy = out["senders SYNC_MASTER"]["msgs_s"], out["senders ASYNC_MASTER"]["msgs_s"]
    out["sync_over_async"] = sync / asy if asy else None
    out["runs"] = runs
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
