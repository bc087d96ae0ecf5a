"""Whole-system chaos: SIGKILL any process of a SYNC_MASTER broker with a replica, under load.

    .venv/bin/python tools/chaos/system.py --rounds 300 [--seed 1] [--dir DIR] [--json FILE]

One host, one run: a SYNC_MASTER broker (which runs its HA sender), a replica daemon
(`shmq replica`) on a store of its own, producers of sync sends and a clustering group of
PushConsumers (tools/chaos/system_clients.py). Each round lets them run a random 0.2-1.2 s,
SIGKILLs one process picked at random (the broker, the HA sender, the replica, a producer or
a consumer), waits a random 0-0.5 s and starts it again (the broker restarts a dead HA sender
itself). After each round the group's committed offsets are checked against what the
consumers logged. At the end the producers stop, the consumers drain the topic and stop, the
replica catches up and both stop, and the invariants are checked:

- nothing acknowledged (SEND_OK) is lost: it is in the master's store where the broker said;
- nothing consumed was not sent: every delivery is a producer's message, stored there;
- no offset is committed past an unconsumed message (after every round), and every stored
  message is delivered at least once by the end;
- the replica's commitlog is byte-identical to the master's;
- no IPC object is left (shm segments and semaphores of both names, the stores' SysV objects,
  every client's liveness semaphore): counted, reported, then removed.

After each restart the run waits until sync sends are acknowledged again. A replica that gave
up on its master (its epoch history no longer shares an epoch with the master's) breaks an
invariant: it is counted in replica_wiped, then wiped and started afresh so the run goes on.

Prints one line per 10 rounds and, last, one JSON line: rounds, kills by victim, acked, lost,
unsent, redelivered, never_consumed, committed_past, replica_diverged, replica_wiped,
leaked_ipc (with the objects), send statuses other than SEND_OK, seconds. Exit status 1 if an
invariant failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tools.chaos import system_check as check
from tools.chaos.system_procs import Processes


def run(
    rounds: int,
    seed: int,
    work: str,
    producers: int = 2,
    consumers: int = 2,
    progress: bool = True,
    max_seconds: float | None = None,
) -> dict[str, Any]:
    """``rounds`` kill rounds in ``work`` (a directory of its own), fewer if ``max_seconds`` pass
    first; the summary (``rounds`` says how many were run)."""
    rng = random.Random(seed)
    t0 = time.monotonic()
    done = 0
    kills: Counter[str] = Counter()
    committed_past: list[tuple[int, int, int]] = []
    procs = Processes(work, producers, consumers)
    try:
        procs.start()
        procs.settle()
        for r in range(rounds):
            if max_seconds is not None and time.monotonic() - t0 > max_seconds:
                break
            time.sleep(rng.uniform(0.2, 1.2))
            victim = rng.choice(procs.victims())
            if procs.kill(victim):
                kills[victim.rstrip("0123456789")] += 1
            time.sleep(rng.uniform(0, 0.5))
            procs.restart_dead()
            procs.settle()
            committed = procs.committed_offsets()  # before the logs: see committed_past_unconsumed
            ledger = procs.ledger()
            committed_past += check.committed_past_unconsumed(committed, ledger.consumed)
            done = r + 1
            if progress and (r + 1) % 10 == 0:
                print(
                    f"round {r + 1}: {len(ledger.acked)} acked, {sum(ledger.consumed.values())} delivered, "
                    f"{time.monotonic() - t0:.0f}s",
                    flush=True,
                )
        stored, diverged = procs.finish()
        verdict = check.judge(procs.ledger(), stored)
    finally:
        leaked = procs.close()
    summary: dict[str, Any] = {
        "seed": seed,
        "rounds": done,
        "kills": dict(kills),
        "acked": verdict.acked,
        "stored": verdict.stored,
        "lost": len(verdict.lost),
        "unsent": len(verdict.unsent),
        "redelivered": verdict.redelivered,
        "never_consumed": len(verdict.never_consumed),
        "committed_past": len(committed_past),
        "replica_diverged": diverged,
        "replica_wiped": procs.replica_wiped,
        "leaked_ipc": len(leaked),
        "leaked": leaked[:20],
        "statuses": dict(procs.ledger().statuses),
        "seconds": round(time.monotonic() - t0, 1),
        "examples": {
            "lost": verdict.lost[:5],
            "unsent": verdict.unsent[:5],
            "never_consumed": verdict.never_consumed[:5],
            "committed_past": committed_past[:5],
        },
    }
    return summary


def failed(summary: dict[str, Any]) -> list[str]:
    """The invariants a summary breaks (leaked IPC included)."""
    keys = ("lost", "unsent", "never_consumed", "committed_past", "replica_wiped", "leaked_ipc")
    return [k for k in keys if summary[k]] + (["replica_diverged"] if summary["replica_diverged"] else [])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one, removed after)")
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--json", default=None, help="also write the summary to this file")
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="start no round after this many seconds (the end checks still run)",
    )
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed={seed} rounds={args.rounds}", flush=True)
    work = args.dir or tempfile.mkdtemp(prefix="shmq-chaos-system-")
    os.makedirs(work, exist_ok=True)
    try:
        summary = run(args.rounds, seed, work, args.producers, args.consumers, max_seconds=args.max_seconds)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    line = json.dumps(summary)
    print(line, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    return 1 if failed(summary) else 0


if __name__ == "__main__":
    sys.exit(main())
