#!/usr/bin/env python
"""HA catch-up benchmark over loopback TCP, no root: MB/s of a fresh replica following a 1 GiB backlog.

The backlog (a master store of --mib MiB of --body byte records with TAGS and a UNIQ_KEY, 4
topics x 4 queues, written through ``MessageStore.put`` with encoded batches, the fast path) is
built once per body size and kept in --cache. Each run starts a master broker on it (ASYNC_MASTER,
its HA sender on a free loopback port), then ``python -m shmq replica`` on a fresh store, and
times from the replica's start until the master's HA segment shows it acked the master's end
(``conn``: from its connection, as ha_bench.py reports). Medians of --runs. The issue's goal
is >= 200 MB/s; ha_bench.py measures the same over the veth of two namespaces (root).

    .venv/bin/python tools/bench/ha_catchup_bench.py [--mib 1024] [--body 100 1024] [--runs 3] [--profile]

``--sync N`` measures instead the SYNC_MASTER round trip with a real ``shmq replica`` following
over loopback: N sends of 100 B one at a time (each acknowledged only after the replica reported
past it: the replica's promptness with frames that trickle in one by one), p50/p99 in µs.

``--profile`` records the replica with py-spy (--threads, raw) into CACHE/replica-<body>.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from shmq.codec import record as fmt
from shmq.store.message_store import MessageStore
from shmq.store.write.hooks import PutRequest

BATCH = 256


def build(path: str, mib: int, body: int) -> int:
    """The backlog store at ``path`` (kept: built once); its commitlog end."""
    done = os.path.join(path, "backlog.done")
    if os.path.exists(done):
        return int(Path(done).read_text())
    shutil.rmtree(path, ignore_errors=True)
    topics = [f"CatchUp{i}" for i in range(4)]
    payloads = [os.urandom(body) for _ in range(BATCH)]  # bodies differ, as a producer's do
    t0 = time.perf_counter()
    with MessageStore(path, {"flushDiskType": "ASYNC_FLUSH"}) as store:
        i = 0
        while store.commitlog.max_offset < mib << 20:
            topic = topics[i % 4]
            props = [fmt.message_properties(tags="TagA", uniq_key=f"{i:016X}{j:016X}") for j in range(BATCH)]
            store.put(PutRequest(fmt.encode_batch(topic, payloads, props), [topic], None, i % 16 // 4, user_batch=True))
            i += 1
        end = store.commitlog.max_offset
    with open(done, "w") as f:
        f.write(str(end))
    print(f"built {end / 1e6:.0f} MB of {body} B records in {time.perf_counter() - t0:.0f} s", flush=True)
    return end


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int, tid: int = 0) -> float:
    """CPU seconds (user + system) a process (or one of its threads) used so far: what the
    replica's work costs, whatever else the machine runs meanwhile."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat"
    fields = Path(path).read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def give_token(master_store: str, replica_store: str) -> None:
    """What an operator does before a replica's first start (docs/HA.md): copy the master's
    generated STORE/config/ha.token into the replica's store."""
    os.makedirs(os.path.join(replica_store, "config"), mode=0o700, exist_ok=True)
    shutil.copy2(os.path.join(master_store, "config", "ha.token"), os.path.join(replica_store, "config", "ha.token"))


def run(backlog: str, work: str, tag: str, profile: str | None, timeout: float = 600.0) -> dict:
    """One catch-up: master broker on the backlog, a fresh replica; seconds and MB/s."""
    import shmq
    from shmq.ha.shared import HASegment

    port = free_port()
    master, replica = f"cum{tag}", f"cur{tag}"
    store = os.path.join(work, "replica")
    broker = shmq.Broker(backlog, name=master, config={"brokerRole": "ASYNC_MASTER", "haListenPort": port})
    proc = spy = None
    try:
        seg = HASegment.open(master, read_only=True)
        try:
            end = seg.master_offset
            t0 = time.time()
            give_token(backlog, store)
            log = open(os.path.join(work, "replica.log"), "ab")  # noqa: SIM115 - the replica process writes it
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "shmq",
                    "replica",
                    "--store",
                    store,
                    "--name",
                    replica,
                    "--master",
                    f"127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=log,
                cwd=REPO,
            )
            log.close()
            if profile:
                spy = subprocess.Popen(
                    [
                        shutil.which("py-spy", path=os.path.dirname(sys.executable)) or "py-spy",
                        "record",
                        "-p",
                        str(proc.pid),
                        "-f",
                        "raw",
                        "--threads",
                        "-o",
                        profile,
                        "-r",
                        "100",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                live = [r for r in seg.replicas() if r.acked_offset >= 0]
                if live and max(r.acked_offset for r in live) >= end:
                    done = time.time()
                    conn = min(r.connected_ms for r in live) / 1e3
                    return {
                        "mb": end / 1e6,
                        "s": done - t0,
                        "mb_s": end / 1e6 / (done - t0),
                        "mb_s_conn": end / 1e6 / max(done - conn, 1e-9),
                        "mb_per_cpu_s": end / 1e6 / cpu_seconds(proc.pid),
                        "thread_cpu_s": sorted(
                            (cpu_seconds(proc.pid, int(t)) for t in os.listdir(f"/proc/{proc.pid}/task")), reverse=True
                        )[:4],
                    }
                if proc.poll() is not None:
                    raise RuntimeError(f"the replica exited {proc.returncode}")
                time.sleep(0.002)
            raise RuntimeError(f"the replica did not catch up with {end} bytes in {timeout} s")
        finally:
            seg.close()
    finally:
        if spy is not None:
            spy.send_signal(2)
            spy.wait(60)
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        broker.stop()
        shutil.rmtree(store, ignore_errors=True)


def sync_rtt(sends: int) -> dict:
    """p50/p99 µs of ``Producer.send`` on a SYNC_MASTER with a real replica following it."""
    import numpy as np

    import shmq

    work = tempfile.mkdtemp(prefix="ha-sync-")
    port, tag = free_port(), f"{os.getpid()}"
    broker = shmq.Broker(
        os.path.join(work, "master"), name=f"csm{tag}", config={"brokerRole": "SYNC_MASTER", "haListenPort": port}
    )
    give_token(os.path.join(work, "master"), os.path.join(work, "replica"))
    log = open(os.path.join(work, "replica.log"), "ab")  # noqa: SIM115 - the replica process writes it
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shmq",
            "replica",
            "--store",
            os.path.join(work, "replica"),
            "--name",
            f"csr{tag}",
            "--master",
            f"127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=log,
        cwd=REPO,
    )
    log.close()
    p = shmq.Producer(f"csp{tag}", broker=f"csm{tag}")
    try:
        p.start()
        deadline = time.monotonic() + 30
        while p.send(shmq.Message("SyncRtt", b"w")).status != shmq.SendStatus.SEND_OK:
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not come in sync within 30 s")
            time.sleep(0.1)
        rtt = []
        for _i in range(sends):
            t = time.perf_counter()
            r = p.send(shmq.Message("SyncRtt", os.urandom(100)))
            rtt.append(time.perf_counter() - t)
            assert r.status == shmq.SendStatus.SEND_OK, r.status
        us = np.array(rtt) * 1e6
        return {
            "p50_us": float(np.percentile(us, 50)),
            "p99_us": float(np.percentile(us, 99)),
            "mean_us": float(us.mean()),
        }
    finally:
        p.shutdown()
        proc.terminate()
        proc.wait(30)
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--body", type=int, nargs="+", default=[100, 1024])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "shmq-ha-catchup"))
    ap.add_argument("--keep", action="store_true", help="keep the backlog stores in --cache for the next call")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--sync", type=int, default=0, help="measure N SYNC_MASTER sends instead")
    a = ap.parse_args()
    if a.sync:
        runs = [sync_rtt(a.sync) for _ in range(a.runs)]
        print(json.dumps(runs))
        print(json.dumps({k: statistics.median(x[k] for x in runs) for k in runs[0]}))
        return 0
    out = {}
    try:
        for body in a.body:
            backlog = os.path.join(a.cache, f"backlog-{body}-{a.mib}")
            build(backlog, a.mib, body)
            runs = []
            for r in range(a.runs):
                work = tempfile.mkdtemp(prefix="ha-catchup-")
                try:
                    prof = os.path.join(a.cache, f"replica-{body}.txt") if a.profile and r == a.runs - 1 else None
                    runs.append(run(backlog, work, f"{os.getpid()}x{r}", prof))
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                print(f"{body} B records, run {r + 1}: " + json.dumps(runs[-1]), flush=True)
            out[f"{body}B"] = {k: statistics.median(x[k] for x in runs) for k in runs[0] if k != "thread_cpu_s"}
            print(
                f"{body} B records: median {out[f'{body}B']['mb_s']:.0f} MB/s from the replica's start, "
                f"{out[f'{body}B']['mb_s_conn']:.0f} MB/s from its connection",
                flush=True,
            )
    finally:
        if not a.keep:
            shutil.rmtree(a.cache, ignore_errors=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
