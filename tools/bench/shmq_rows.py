"""A few shmq rows of the peer suite (``make bench``), alone and quickly, for before/after pairs.

``make bench`` takes minutes and its 10-million-message backlog leaves gigabytes to write back
while the next run starts, so a row that is compared across two trees should be run alone, in
alternating order, several times. This runs the suite's own code (the ``Shmq`` peer, ``run_tput``
and the queue-count scaling) for: 1->1 per-message throughput at one body size, and the
scaling rows for the given queue counts. Run it from the tree to measure; it prints one JSON line.

    .venv/bin/python tools/bench/shmq_rows.py --reps 3 --queues 8 10000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.getcwd())

from tools.bench.suite import core
from tools.bench.suite.peers.shmqpeer import Shmq
from tools.bench.suite.settings import settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3, help="runs per row (the median is reported)")
    ap.add_argument("--size", type=int, default=100, help="body size of the 1->1 row")
    ap.add_argument("--queues", type=int, nargs="*", default=[8, 10000], help="queue counts of the scaling rows")
    a = ap.parse_args()
    s = dataclasses.replace(settings(False), reps=a.reps, queue_counts=tuple(a.queues))
    system = Shmq()
    workdir = tempfile.mkdtemp(prefix="shmq-rows.")
    system.start(workdir)
    try:
        tput = [
            core.run_tput(
                system,
                core.TputSpec(1, 1, a.size, "msg", s.msg_count, s.batch_size, s.run_deadline, f"rows{r}x{os.getpid()}"),
            )["msgs_s"]
            for r in range(a.reps)
        ]
        scaling = system._scaling(s) if a.queues else {}
    finally:
        system.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    out = {f"1->1 {a.size}B msg": {"median": float(np.median(tput)), "runs": tput}}
    out.update({f"{q} queues": scaling[str(q)] for q in a.queues})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
