#!/usr/bin/env python
"""The suite's send -> listener latency rows alone: shmq's PushConsumer and zmq ipc's PULL, interleaved.

    .venv/bin/python tools/bench/push_latency.py [--reps 3] [--count 3000]

The same workload as the suite's extras (``core.run_push``: 100 B stamped bodies at 1,000
msgs/s to a parked receiver), without the backlog, queue-scaling, cluster and POP extras that
come with ``--workloads extras``. Each repetition runs shmq ``Producer.send``, shmq
``send_async`` and zmq ``PUSH.send`` in turn; prints each run and the medians of p50 / p99.
Run it from the tree to measure (it imports shmq and the suite from the working directory).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.getcwd())  # the tree to measure: run it from there

from tools.bench.suite import core
from tools.bench.suite.peers.shmqpeer import PUSH_APIS, Shmq
from tools.bench.suite.peers.zmqipc import ZmqIpc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--count", type=int, default=3000)
    a = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="shmq-bench.")
    shmq, zmq = Shmq(), ZmqIpc()
    rows: dict[str, list[dict]] = {}
    try:
        for system in (shmq, zmq):
            why = system.install()
            if why:
                raise SystemExit(f"{system.name}: {why}")
            system.start(workdir)
        ctx = shmq._topic("push")
        ctx.update(count=a.count, size=100)
        zctx = {"endpoint": f"ipc://{zmq.dir}/push", "count": a.count, "size": 100}
        for rep in range(a.reps):
            runs = [(f"shmq {api}", shmq, dict(ctx, api=api)) for api in PUSH_APIS] + [("zmq PUSH.send", zmq, zctx)]
            for name, system, c in runs[rep % len(runs) :] + runs[: rep % len(runs)]:
                r = core.run_push(system, c, a.count, 1)
                rows.setdefault(name, []).append(r)
                print(f"rep {rep + 1} {name:<16} p50 {r['p50_us']:7.0f} us  p99 {r['p99_us']:7.0f} us", flush=True)
    finally:
        shmq.stop()
        zmq.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    for name, rs in rows.items():
        p50 = float(np.median([r["p50_us"] for r in rs]))
        p99 = float(np.median([r["p99_us"] for r in rs]))
        print(f"median {name:<16} p50 {p50:7.0f} us  p99 {p99:7.0f} us")


if __name__ == "__main__":
    main()
