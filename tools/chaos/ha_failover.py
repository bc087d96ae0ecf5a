"""Chaos run: the master host dies at a random moment under a SYNC_MASTER load, many times.

Each round makes a fresh pair of hosts (network, IPC and /dev/shm namespaces joined by a veth:
tests/ha/hosts.py), runs `shmq broker` (SYNC_MASTER) and `shmq replica`, a producer of sync sends
on the master host, kills every process of the master host after a random number of
acknowledged sends, promotes the replica and checks that every acknowledged message is on it at
the queue offset the master gave it, in order per queue, none twice. Needs root.

    .venv/bin/python tools/chaos/ha_failover.py --rounds 20 [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.ha import hosts
from tests.ha.pair_support import failover_round


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    reason = hosts.unavailable()
    if reason:
        print(f"ha_failover: {reason}", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    failures = 0
    total_acked = total_extra = 0
    t0 = time.monotonic()
    for n in range(1, args.rounds + 1):
        min_acked, kill_after = rng.randint(20, 600), rng.uniform(0, 0.5)
        try:
            with hosts.pair() as (master, replica):
                s = failover_round(master, replica, min_acked, kill_after)
        except AssertionError as e:
            failures += 1
            print(f"round {n}: FAILED: {e}", flush=True)
            continue
        total_acked += s["acked"]
        total_extra += s["stored"] - s["acked"]
        print(
            f"round {n}: ok: {s['acked']} acknowledged, {s['stored']} stored on the promoted replica "
            f"(killed {kill_after:.2f} s after {min_acked} acks)",
            flush=True,
        )
    print(
        f"{args.rounds} rounds in {time.monotonic() - t0:.0f} s: {failures} failed; {total_acked} acknowledged "
        f"messages checked, {total_extra} stored but not acknowledged before the kill (in flight)"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
