"""Long SIGKILL run against the store: the crash-test loop of tests/store/test_crash.py, many rounds.

    .venv/bin/python tools/chaos/store_crash.py --rounds 300 --dir /tmp/shmq-chaos

Each round starts tools/chaos/crash_child.py (SYNC_FLUSH appends unless --flush ASYNC_FLUSH, one ack per PUT_OK), kills
it with SIGKILL 50-400 ms after it opened the store (about one round in five: 0-400 ms after
spawn, often inside its recovery), then reopens the store here (abnormal recovery), checks
every acknowledged record (byte-identical body, queue offset, physical offset, by queue and
by key), checks that nothing partial is visible, appends one record and shuts down. With
--lose-folders, about one round in ten also deletes consumequeue/ or index/ before the
reopen. The store directory is replaced by a fresh one every --rounds-per-store rounds so the
full re-verification of each round stays bounded. Exit status 1 on the first violation.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tools.chaos.crash_child import CrashCheckError, CrashHarness


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--dir", required=True, help="work directory (created; its store/ is replaced)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--rounds-per-store", type=int, default=30)
    ap.add_argument("--lose-folders", action="store_true", help="sometimes delete consumequeue/ or index/")
    ap.add_argument(
        "--flush",
        choices=("SYNC_FLUSH", "ASYNC_FLUSH"),
        default="SYNC_FLUSH",
        help="the child's flushDiskType (ASYNC_FLUSH takes the fused compiled put)",
    )
    args = ap.parse_args()
    os.environ["SHMQ_CHAOS_FLUSH"] = args.flush  # read by crash_child.CONFIG in every child

    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    os.makedirs(args.dir, exist_ok=True)
    print(f"seed={seed} rounds={args.rounds} dir={args.dir}", flush=True)
    totals = {"rounds": 0, "acked": 0, "unacked": 0, "startup_kills": 0, "lost_folders": 0, "stores": 0}
    recovery_ms: list[float] = []
    records = 0
    t0 = time.monotonic()
    h = None
    try:
        for r in range(args.rounds):
            if h is None or r % args.rounds_per_store == 0:
                if h is not None:
                    _fold(totals, h)
                    recovery_ms += h.stats.recovery_ms
                store_dir = os.path.join(args.dir, "store")
                shutil.rmtree(store_dir, ignore_errors=True)
                for name in os.listdir(args.dir):
                    if name.startswith("acks-"):
                        os.unlink(os.path.join(args.dir, name))
                h = CrashHarness(store_dir, args.dir, rng.randrange(1 << 30))
                totals["stores"] += 1
            if rng.random() < 0.2:
                info = h.run_child(kill_at_spawn_ms=rng.uniform(0, 400))
            else:
                info = h.run_child(run_ms=rng.uniform(50, 400))
            if args.lose_folders and info.started and rng.random() < 0.1:
                shutil.rmtree(os.path.join(h.store_dir, rng.choice(["consumequeue", "index"])), ignore_errors=True)
                totals["lost_folders"] += 1
            h.reopen_and_verify(info)
            records = len(h.model)
            if (r + 1) % 10 == 0:
                print(
                    f"round {r + 1}: {records} records in the current store, {time.monotonic() - t0:.0f}s", flush=True
                )
    except CrashCheckError as e:
        print(f"VIOLATION in round {r + 1} (seed {seed}, store {h.store_dir}): {e}", flush=True)
        return 1
    _fold(totals, h)
    recovery_ms += h.stats.recovery_ms
    recovery_ms.sort()
    p50 = recovery_ms[len(recovery_ms) // 2] if recovery_ms else 0.0
    print("summary:")
    print(
        f"  rounds                    {totals['rounds']} (over {totals['stores']} stores, {time.monotonic() - t0:.0f}s)"
    )
    print(f"  kills during child start  {totals['startup_kills']}")
    print(f"  folders deleted           {totals['lost_folders']}")
    print(f"  acked records checked     {totals['acked']}")
    print(f"  unacked records recovered {totals['unacked']} (in-flight puts that reached the log)")
    print(f"  recovery time             max {max(recovery_ms, default=0):.0f} ms, median {p50:.0f} ms")
    print("  violations                0")
    return 0


def _fold(totals: dict, h: CrashHarness) -> None:
    st = h.stats
    totals["rounds"] += st.rounds
    totals["acked"] += st.acked_checked
    totals["unacked"] += st.recovered_unacked
    totals["startup_kills"] += st.kills_during_startup


if __name__ == "__main__":
    sys.exit(main())
