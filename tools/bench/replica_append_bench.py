#!/usr/bin/env python
"""Replica append benchmark: MB/s of ReplicaAppender.append (check + verbatim write + dispatch
into consume queues and index) fed 32 KiB frames of a master's commitlog, no sockets.

    .venv/bin/python tools/bench/replica_append_bench.py [--mib 256] [--body 100] [--every 32]

The master store is filled first (untimed) with batches of records of --body bytes, each with
TAGS and a UNIQ_KEY like a producer's, over 4 topics x 4 queues; then its commitlog is read in
frames of --frame bytes (never crossing a segment, as the HA sender sends them) and appended to
a fresh replica store per run. The HA catch-up goal is >= 200 MB/s end to end, so this part
alone must be well above it. ``--every N`` dispatches every N frames (the HA client appends
the frames it has queued with dispatch=False, then dispatches once). Prints per run and the
median: MB/s by wall clock and per CPU second of the appending thread (what the code costs on
a shared machine), and a profile of the last run with --profile.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from shmq.codec import record as fmt
from shmq.store.message_store import MessageStore
from shmq.store.write.hooks import PutRequest
from shmq.store.write.replicated import ReplicaAppender

CONFIG = {"mappedFileSizeCommitLog": 32 << 20, "flushDiskType": "ASYNC_FLUSH"}


def fill(master: MessageStore, mib: int, body: int) -> None:
    topics = [f"BenchTopic{i}" for i in range(4)]
    n, i = 256, 0
    payloads = [os.urandom(body) for _ in range(n)]  # bodies differ, as a producer's do
    while master.commitlog.max_offset < mib << 20:
        topic = topics[i % 4]
        props = [fmt.message_properties(tags="TagA", uniq_key=f"{i:016X}{j:016X}") for j in range(n)]
        batch = fmt.encode_batch(topic, payloads, props)
        master.put(PutRequest(batch, [topic], None, i % 16 // 4, user_batch=True))
        i += 1


def run(
    master: MessageStore, directory: str, frame: int, every: int, profile: cProfile.Profile | None
) -> tuple[float, float]:
    """(MB/s by wall clock, MB/s per CPU second of the appending thread): on a shared machine
    the second is what the code costs."""
    replica = MessageStore(directory, CONFIG).start()
    try:
        app = ReplicaAppender(replica.writer, replica.checkpoint)
        cl, seg = master.commitlog, CONFIG["mappedFileSizeCommitLog"]
        end = cl.max_offset
        frames = []
        at = 0
        while at < end:
            size = min(frame, end - at, seg - at % seg)
            frames.append((at, bytes(cl.data(at, size))))  # read outside the timed loop
            at += size
        if profile is not None:
            profile.enable()
        t0, c0 = time.perf_counter(), time.thread_time()
        for i, (offset, data) in enumerate(frames):
            app.append(offset, data, dispatch=(i + 1) % every == 0)
        app.dispatch()
        elapsed, cpu = time.perf_counter() - t0, time.thread_time() - c0
        if profile is not None:
            profile.disable()
        assert app.max_offset == end
        return end / elapsed / 1e6, end / cpu / 1e6
    finally:
        replica.shutdown()
        shutil.rmtree(directory)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--frame", type=int, default=32 * 1024)
    ap.add_argument(
        "--every",
        type=int,
        default=1,
        help="dispatch every N frames (append(dispatch=False) between: an HA client with N frames queued)",
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="replica-bench-")
    try:
        with MessageStore(os.path.join(tmp, "master"), CONFIG) as master:
            fill(master, args.mib, args.body)
            rates = []
            for r in range(args.runs):
                prof = cProfile.Profile() if args.profile and r == args.runs - 1 else None
                rates.append(run(master, os.path.join(tmp, f"replica{r}"), args.frame, args.every, prof))
                wall, cpu = rates[-1]
                print(f"run {r + 1}: {wall:.0f} MB/s wall, {cpu:.0f} MB/s per CPU second", flush=True)
            walls, cpus = [w for w, _ in rates], [c for _, c in rates]
            print(
                f"replica append, {args.body} B bodies, {args.frame} B frames, dispatch every {args.every}, "
                f"{args.mib} MiB: median {statistics.median(walls):.0f} MB/s wall (max {max(walls):.0f}), "
                f"{statistics.median(cpus):.0f} MB/s per CPU second of the appending thread"
            )
            if prof is not None:
                pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
