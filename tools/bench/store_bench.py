#!/usr/bin/env python
"""Store benchmark: appends/s and MB/s of shmq's MessageStore against a plain mmap copy, and reads.

    .venv/bin/python tools/bench/store_bench.py            # full run (make bench-store)
    .venv/bin/python tools/bench/store_bench.py --quick    # ~10 s smoke run

What is measured, per body size (100 B and 1 KiB; every record carries TAGS and a UNIQ_KEY
property, like a real producer's):

  client encode     UNIQ_KEY + properties + format.encode_batch (tag hash, key hashes): the
                    producer's work, done outside every timed store region and reported apart.
  single append     MessageStore.put(PutRequest of one record with its tag and key hashes)
                    with the producer's precomputed tag code and key hash.
  batch append      MessageStore.put(PutRequest of a user's EncodedBatch) of 256 records.
  batch, no index   the same with messageIndexEnable=false (the key index's cost).
  plain copy        the physical reference: the same batch bytes copied with one numpy slice
                    assignment per batch into a pre-warmed mmap of a file of segment size.
  read, batch form  what a consumer process does: consumer_batch.read_batch over read-only
                    mappings (StoreReader): consume-queue range + tag-hash filter (half of the
                    records match) + exact tag check + columnar decode (no per-record objects).
  read, get_message the per-message API (max_num=32, tags={"TagA"}) for comparison.

Read rates count consume-queue entries scanned (half of them are delivered).

Every measurement runs for a fixed amount of data (enough to roll 256 MiB commitlog segments at
the goal rates), stopping early at --max-seconds so a slow store cannot make the run endless
(such runs are marked "capped"; their rate is over what they did). It is repeated --runs times
after one untimed warm-up run; the median and min-max are reported. Stores run with
ASYNC_FLUSH in a temporary directory that is removed at the end.

Output: a rich table, a markdown table (for docs), and JSON in bench/results/.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import io
import json
import mmap
import os
import platform
import pstats
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import numpy as np

from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.filter.tags import TagFilter
from shmq.store.message_store import MessageStore
from shmq.store.read.columns import read_batch
from shmq.store.read.reader import StoreReader
from shmq.store.write.hooks import PutRequest

TOPIC = "BenchTopic"
BATCH = 256
MIB = 1024 * 1024
MB = 1_000_000  # MB/s are decimal megabytes of record bytes
TAGS = ("TagA", "TagB")  # alternate, so a TagA filter keeps half

# measurement names, in the order the tables show them
N_ENCODE = "client encode (UNIQ_KEY+props+encode_batch)"
N_SINGLE = "single append (put, 1 record)"
N_BATCH = "batch append x256 (put, user batch)"
N_NOINDEX = "batch append x256, messageIndexEnable=false"
N_COPY = "plain numpy copy -> warm mmap (reference)"
N_READ = "read, batch form: CQ range + tag filter + columnar decode"
N_GET = "read, get_message(max_num=32, tags)"
ORDER = [N_ENCODE, N_SINGLE, N_BATCH, N_NOINDEX, N_COPY, N_READ, N_GET]

GOAL_BATCH_RATE = 3_000_000
GOAL_BATCH_VS_COPY = 0.50
GOAL_SINGLE_RATE = 500_000
GOAL_READ_RATE = 1_000_000


# --------------------------------------------------------------------------- settings


@dataclass
class SizePlan:
    """Records per timed run of each measurement for one body size."""

    body: int
    pool: int  # distinct encoded records (cycled through)
    single: int
    batch: int  # rounded up to whole batches of 256
    read_batch: int
    read_get: int


def plans(quick: bool, scale: float) -> list[SizePlan]:
    if quick:
        base = [
            SizePlan(100, 4096, 20_000, 200_000, 200_000, 20_000),
            SizePlan(1024, 2048, 10_000, 60_000, 200_000, 20_000),
        ]
    else:
        # batch: ~300 MiB of records per run, so every run rolls a 256 MiB segment; single:
        # ~1/3 of that; reads: 2 M / 300 k entries.
        base = [
            SizePlan(100, 65_536, 400_000, 1_245_184, 2_000_000, 300_000),
            SizePlan(1024, 32_768, 100_000, 268_288, 2_000_000, 300_000),
        ]
    for p in base:
        for f in ("single", "batch", "read_batch", "read_get"):
            setattr(p, f, max(BATCH, int(getattr(p, f) * scale)))
        p.batch = -(-p.batch // BATCH) * BATCH
    return base


# --------------------------------------------------------------------------- results


@dataclass
class Measurement:
    size: str
    name: str
    runs_s: list[float] = field(default_factory=list)
    runs_records: list[int] = field(default_factory=list)
    runs_bytes: list[int] = field(default_factory=list)
    runs_cpu_s: list[float] = field(default_factory=list)  # this process's CPU time (all threads)
    capped: bool = False
    extra: dict = field(default_factory=dict)

    def add(self, seconds: float, records: int, nbytes: int, capped: bool, cpu_s: float = 0.0) -> None:
        self.runs_s.append(seconds)
        self.runs_cpu_s.append(cpu_s)
        self.runs_records.append(records)
        self.runs_bytes.append(nbytes)
        self.capped |= capped

    @property
    def rates(self) -> list[float]:
        return [r / s for r, s in zip(self.runs_records, self.runs_s)]

    @property
    def mbps(self) -> list[float]:
        return [b / s / MB for b, s in zip(self.runs_bytes, self.runs_s)]

    def summary(self) -> dict:
        r, m = self.rates, self.mbps
        return {
            "rec_s_median": statistics.median(r),
            "rec_s_min": min(r),
            "rec_s_max": max(r),
            "mb_s_median": statistics.median(m),
            "mb_s_min": min(m),
            "mb_s_max": max(m),
        }


# --------------------------------------------------------------------------- input (client side)


def encode_pool(body_size: int, n_records: int, seed: int) -> tuple[list[fmt.EncodedBatch], float]:
    """What producers hand the broker: batches of 256 encoded records. Returns (batches, seconds)."""
    rng = np.random.default_rng(seed)
    blob = rng.integers(0, 256, n_records + body_size, dtype=np.uint8).tobytes()
    bodies = [blob[i : i + body_size] for i in range(n_records)]  # distinct bodies, distinct CRCs
    gen = ids.UniqKeyGenerator()
    t0 = time.perf_counter()
    out = []
    for b in range(0, n_records, BATCH):
        chunk = bodies[b : b + BATCH]
        props = [fmt.message_properties(tags=TAGS[(b + i) & 1], uniq_key=gen.next()) for i in range(len(chunk))]
        out.append(fmt.encode_batch(TOPIC, chunk, props))
    return out, time.perf_counter() - t0


def singles_from(batches: list[fmt.EncodedBatch]) -> list[tuple[fmt.EncodedBatch, int]]:
    """(one-record batch, record bytes) per record, as a producer sending one by one has them."""
    out = []
    for b in batches:
        for i in range(len(b)):
            one = fmt.select_records(b, np.array([i]))
            out.append((one, len(one.buf)))
    return out


# --------------------------------------------------------------------------- store side


def open_store(path: str, segment_size: int, index: bool) -> MessageStore:
    store = MessageStore(
        path,
        {
            "flushDiskType": "ASYNC_FLUSH",
            "mappedFileSizeCommitLog": segment_size,
            "warmAheadSize": segment_size,  # whole segments warmed ahead, whatever the default
            "messageIndexEnable": index,
        },
    ).start()
    # A running broker always writes into a segment the allocator warmed ahead of time; warm the
    # very first one too so a fresh store does not pay page faults a steady-state one never sees.
    mf = store.commitlog.queue.last_file()
    warm = getattr(mf, "warm", None)
    if warm is not None:
        warm()
    return store


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.max_s = args.max_seconds
        self.profiles: dict[str, str] = {}

    def timed(
        self,
        m: Measurement,
        fn: Callable[[float], tuple[int, int, bool]],
        warmup: bool = True,
        profile_key: str | None = None,
    ) -> None:
        """fn(deadline) -> (records, bytes, capped); one untimed warm-up run, then --runs timed."""
        if warmup:
            fn(time.perf_counter() + self.max_s)
        for i in range(self.args.runs):
            gc.collect()
            prof = None
            if profile_key and i == 0 and profile_key in self.args.profile:
                prof = cProfile.Profile()
                prof.enable()
            c0 = time.process_time()
            t0 = time.perf_counter()
            recs, nbytes, capped = fn(t0 + self.max_s)
            dt = time.perf_counter() - t0
            cpu = time.process_time() - c0
            if prof is not None:
                prof.disable()
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(self.args.profile_top)
                self.profiles[f"{m.size} {m.name}"] = s.getvalue()
            m.add(dt, recs, nbytes, capped, cpu)


def bench_single(store: MessageStore, singles, qid: int, target: int):
    put = store.put
    n_pool = len(singles)

    def run(deadline: float) -> tuple[int, int, bool]:
        done = nbytes = 0
        clock = time.perf_counter
        while done < target:
            start = done % n_pool
            k = min(1024, target - done, n_pool - start)
            for one, size in singles[start : start + k]:
                put(PutRequest(one, [TOPIC], None, qid))
                nbytes += size
            done += k
            if clock() > deadline:
                return done, nbytes, done < target
        return done, nbytes, False

    return run


def bench_batch(store: MessageStore, batches, qid: int, target: int):
    put = store.put
    n_pool = len(batches)

    def run(deadline: float) -> tuple[int, int, bool]:
        done = nbytes = j = 0
        clock = time.perf_counter
        while done < target:
            b = batches[j % n_pool]
            put(PutRequest(b, [TOPIC], None, qid, user_batch=True))
            done += len(b)
            nbytes += len(b.buf)
            j += 1
            if (j & 7) == 0 and clock() > deadline:
                return done, nbytes, done < target
        return done, nbytes, False

    return run


def bench_plain_copy(path: str, size: int, batches, target: int):
    """The physical reference: same bytes, one numpy copy per batch, into a pre-warmed mmap."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, size)
    mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    dst = np.frombuffer(mm, np.uint8)
    dst[:] = 0  # pre-warm: every page faulted in and dirty
    srcs = [np.frombuffer(b.buf, np.uint8) for b in batches]
    n_pool = len(srcs)

    def run(deadline: float) -> tuple[int, int, bool]:
        done = nbytes = j = pos = 0
        while done < target:
            s = srcs[j % n_pool]
            n = len(s)
            if pos + n > size:
                pos = 0  # "roll": wrap into the same warm file
            dst[pos : pos + n] = s
            pos += n
            nbytes += n
            done += BATCH
            j += 1
        return done, nbytes, False

    def close() -> None:
        nonlocal dst
        del dst
        mm.close()
        os.close(fd)
        os.unlink(path)

    return run, close


def bench_read_batch(store: MessageStore, qid: int, range_size: int, target: int, avg_size: float):
    """The consumer's batch pull (consumer_batch.read_batch) over read-only mappings of the store."""
    cq = store.find_consume_queue(TOPIC, qid)
    reader = StoreReader(store.store_dir)
    expression = TagFilter(TAGS[0])

    def run(deadline: float) -> tuple[int, int, bool]:
        done = delivered = 0
        q = cq.min_offset
        clock = time.perf_counter
        while done < target:
            if q >= cq.max_offset:
                q = cq.min_offset
            batch = read_batch(reader, TOPIC, qid, q, min(range_size, target - done), cq.max_offset, expression)
            done += batch.next_offset - q
            delivered += len(batch)
            q = batch.next_offset
            if clock() > deadline:
                break
        return done, int(done * avg_size), done < target

    return run, reader


def bench_read_get(store: MessageStore, qid: int, target: int, avg_size: float):
    cq = store.find_consume_queue(TOPIC, qid)
    tags = {TAGS[0]}

    def run(deadline: float) -> tuple[int, int, bool]:
        done = delivered = 0
        q = cq.min_offset
        clock = time.perf_counter
        while done < target:
            if q >= cq.max_offset:
                q = cq.min_offset
            res = store.get_message(TOPIC, qid, q, max_num=32, tags=tags)
            if res.next_begin_offset <= q:  # nothing to read here: start over
                q = cq.min_offset
                continue
            done += res.next_begin_offset - q
            delivered += len(res.messages)
            q = res.next_begin_offset
            if clock() > deadline:
                break
        return done, int(done * avg_size), done < target

    return run


# --------------------------------------------------------------------------- main


def human(x: float) -> str:
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.0f} k" if x >= 1e3 else f"{x:.0f}"


def run_size(runner: Runner, plan: SizePlan, tmp: str, seg: int, results: list[Measurement]) -> None:
    args = runner.args
    label = "100 B" if plan.body == 100 else f"{plan.body // 1024} KiB" if plan.body % 1024 == 0 else f"{plan.body} B"
    say = runner.say

    # client encode (runs times over the pool; the last pool is what the store gets)
    m = Measurement(label, N_ENCODE)
    batches = None
    for i in range(args.runs):
        gc.collect()
        batches, dt = encode_pool(plan.body, plan.pool, seed=plan.body + i)
        m.add(dt, plan.pool, sum(len(b.buf) for b in batches), False)
    results.append(m)
    rec_size = sum(len(b.buf) for b in batches) / plan.pool
    say(
        f"[{label}] record size {rec_size:.0f} B, pool {plan.pool} records; "
        f"client encode {human(statistics.median(m.rates))} rec/s"
    )
    singles = singles_from(batches)

    # single appends
    d = os.path.join(tmp, f"single-{plan.body}")
    store = open_store(d, seg, index=True)
    try:
        m = Measurement(label, N_SINGLE)
        runner.timed(m, bench_single(store, singles, 0, plan.single), profile_key="single")
        m.extra["commitlog_segments"] = len(store.commitlog.queue.files)
        results.append(m)
        say(f"[{label}] single append {human(statistics.median(m.rates))} rec/s{' (capped)' if m.capped else ''}")
    finally:
        store.shutdown()
        shutil.rmtree(d, ignore_errors=True)

    # batch appends, index on (kept for the reads), then off
    d = os.path.join(tmp, f"batch-{plan.body}")
    store = open_store(d, seg, index=True)
    try:
        m = Measurement(label, N_BATCH)
        runner.timed(m, bench_batch(store, batches, 0, plan.batch), profile_key="batch")
        m.extra["commitlog_segments"] = len(store.commitlog.queue.files)
        results.append(m)
        batch_m = m
        say(f"[{label}] batch append {human(statistics.median(m.rates))} rec/s{' (capped)' if m.capped else ''}")

        cq = store.find_consume_queue(TOPIC, 0)
        m = Measurement(label, N_READ)
        fn, reader = bench_read_batch(store, 0, args.read_range, plan.read_batch, rec_size)
        runner.timed(m, fn, profile_key="read-batch")
        reader.close()
        m.extra["queue_entries"] = cq.max_offset - cq.min_offset
        results.append(m)
        say(f"[{label}] read batch form {human(statistics.median(m.rates))} entries/s")

        m = Measurement(label, N_GET)
        runner.timed(m, bench_read_get(store, 0, plan.read_get, rec_size), profile_key="read-get")
        results.append(m)
        say(f"[{label}] get_message {human(statistics.median(m.rates))} entries/s")
    finally:
        store.shutdown()
        shutil.rmtree(d, ignore_errors=True)

    d = os.path.join(tmp, f"batch-noindex-{plan.body}")
    store = open_store(d, seg, index=False)
    try:
        m = Measurement(label, N_NOINDEX)
        runner.timed(m, bench_batch(store, batches, 0, plan.batch), profile_key="batch-noindex")
        results.append(m)
        say(f"[{label}] batch append, no index {human(statistics.median(m.rates))} rec/s")
    finally:
        store.shutdown()
        shutil.rmtree(d, ignore_errors=True)

    # physical reference
    run, close = bench_plain_copy(os.path.join(tmp, f"plain-{plan.body}"), seg, batches, plan.batch)
    try:
        m = Measurement(label, N_COPY)
        runner.timed(m, run)
        results.append(m)
        say(f"[{label}] plain copy {human(statistics.median(m.rates))} rec/s")
    finally:
        close()
    batch_m.extra["vs_plain_copy"] = statistics.median(batch_m.rates) / statistics.median(m.rates)


def goals(results: list[Measurement]) -> dict[tuple[str, str], tuple[str, bool]]:
    """(size, name) -> (goal text, met)."""
    out = {}
    for m in results:
        med = statistics.median(m.rates)
        if m.name == N_BATCH and m.size == "100 B":
            ratio = m.extra.get("vs_plain_copy", 0.0)
            out[(m.size, m.name)] = (
                f">= 3.0 M/s and >= 50 % of plain copy ({ratio:.1%})",
                med >= GOAL_BATCH_RATE and ratio >= GOAL_BATCH_VS_COPY,
            )
        elif m.name == N_BATCH:
            out[(m.size, m.name)] = (f"({m.extra.get('vs_plain_copy', 0):.1%} of plain copy)", None)
        elif m.name == N_SINGLE:
            out[(m.size, m.name)] = (">= 500 k/s", med >= GOAL_SINGLE_RATE)
        elif m.name == N_READ:
            out[(m.size, m.name)] = (">= 1.0 M/s", med >= GOAL_READ_RATE)
    return out


def git_info() -> dict:
    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", "-C", REPO, *a], capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:
            return ""

    status = git("status", "--porcelain")
    return {"commit": git("rev-parse", "HEAD"), "dirty_files": len(status.splitlines())}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def markdown(results: list[Measurement], g: dict, meta: dict) -> str:
    lines = [
        f"Store benchmark, {meta['date']} on {meta['host']} ({meta['cpus']} CPUs, {meta['cpu']}), "
        f"Python {meta['python']}, numpy {meta['numpy']}, ASYNC_FLUSH, commitlog segments "
        f"{meta['segment_mib']} MiB, median of {meta['runs']} runs (min-max); load average "
        f"{meta['loadavg_start'][0]:.2f} at start, {meta['loadavg_end'][0]:.2f} at end.",
        "",
        "| body | measurement | records/s | MB/s | goal | |",
        "|---|---|---:|---:|---|---|",
    ]
    for m in results:
        s = m.summary()
        gt, ok = g.get((m.size, m.name), ("", None))
        mark = "" if ok is None else ("pass" if ok else "**miss**")
        cap = " †" if m.capped else ""
        lines.append(
            f"| {m.size} | {m.name}{cap} | {s['rec_s_median']:,.0f} ({s['rec_s_min']:,.0f}-{s['rec_s_max']:,.0f}) "
            f"| {s['mb_s_median']:,.1f} ({s['mb_s_min']:,.1f}-{s['mb_s_max']:,.1f}) | {gt} | {mark} |"
        )
    lines += [
        "",
        "MB = 10^6 bytes of encoded records (header + body + topic + properties). Read rates count "
        "consume-queue entries scanned; half of them match the tag filter and are decoded. "
        "Client encode is the producer's work (not part of any store figure).",
    ]
    if any(m.capped for m in results):
        lines.append(
            f"† stopped at the {meta['max_seconds']} s cap before its fixed amount of data; "
            "the rate is over what it did."
        )
    return "\n".join(lines)


def rich_table(results: list[Measurement], g: dict, meta: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"shmq store benchmark - {meta['host']}, {meta['cpus']} CPUs, median of {meta['runs']} runs")
    for col, just in (
        ("body", "left"),
        ("measurement", "left"),
        ("records/s", "right"),
        ("min-max", "right"),
        ("MB/s", "right"),
        ("goal", "left"),
        ("", "left"),
    ):
        t.add_column(col, justify=just)
    for m in results:
        s = m.summary()
        gt, ok = g.get((m.size, m.name), ("", None))
        mark = "" if ok is None else ("[green]pass[/]" if ok else "[bold red]miss[/]")
        t.add_row(
            m.size,
            m.name + (" †" if m.capped else ""),
            f"{s['rec_s_median']:,.0f}",
            f"{human(s['rec_s_min'])}-{human(s['rec_s_max'])}",
            f"{s['mb_s_median']:,.1f}",
            gt,
            mark,
        )
    Console(width=max(150, shutil.get_terminal_size((150, 40)).columns)).print(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="small amounts, 32 MiB segments: a ~10 s smoke run")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per measurement (default 5, quick 2)")
    ap.add_argument(
        "--segment-mib", type=int, default=None, help="mappedFileSizeCommitLog in MiB (default 256, quick 32)"
    )
    ap.add_argument("--max-seconds", type=float, default=None, help="cap per run (default 3, quick 0.2)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every amount of data")
    ap.add_argument("--read-range", type=int, default=1024, help="consume-queue entries per range read (batch form)")
    ap.add_argument("--sizes", default="100,1024", help="body sizes in bytes, comma-separated (100 and/or 1024)")
    ap.add_argument("--dir", default=None, help="parent of the temporary store directory (default: system temp)")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/store-<date>-<host>.json)")
    ap.add_argument(
        "--profile",
        default="",
        help="cProfile the first timed run of these measurements "
        "(comma-separated: single,batch,batch-noindex,read-batch,read-get) and print the hot spots",
    )
    ap.add_argument("--profile-top", type=int, default=25)
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    args.runs = args.runs or (2 if args.quick else 5)
    args.segment_mib = args.segment_mib or (32 if args.quick else 256)
    args.max_seconds = args.max_seconds or (0.2 if args.quick else 3.0)
    args.profile = [p for p in args.profile.split(",") if p]
    sizes = {int(s) for s in args.sizes.split(",")}
    seg = args.segment_mib * MIB

    runner = Runner(args)
    runner.say = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    now = datetime.datetime.now()
    meta = {
        "date": now.isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "runs": args.runs,
        "segment_mib": args.segment_mib,
        "quick": args.quick,
        "max_seconds": args.max_seconds,
        "batch": BATCH,
        "read_range": args.read_range,
        "flush_disk_type": "ASYNC_FLUSH",
        "argv": sys.argv[1:],
        "git": git_info(),
    }
    meta["loadavg_start"] = os.getloadavg()
    if meta["loadavg_start"][0] > 0.5:
        runner.say(
            f"warning: load average {meta['loadavg_start'][0]:.2f} at start: other processes share "
            f"these {meta['cpus']} CPUs, figures will be noisy"
        )
    t_start = time.perf_counter()
    results: list[Measurement] = []
    tmp = tempfile.mkdtemp(prefix="shmq-store-bench-", dir=args.dir)
    try:
        for plan in plans(args.quick, args.scale):
            if plan.body in sizes:
                run_size(runner, plan, tmp, seg, results)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sizes_order = list(dict.fromkeys(m.size for m in results))
    meta["loadavg_end"] = os.getloadavg()
    meta["wall_seconds"] = round(time.perf_counter() - t_start, 1)

    results.sort(key=lambda m: (sizes_order.index(m.size), ORDER.index(m.name)))
    g = goals(results)
    rich_table(results, g, meta)
    md = markdown(results, g, meta)
    print()
    print(md)
    for k, v in runner.profiles.items():
        print(f"\n--- cProfile: {k} (first timed run) ---\n{v}")

    out = args.out or os.path.join(
        REPO, "bench", "results", f"store-{now.strftime('%Y%m%d-%H%M%S')}-{socket.gethostname()}.json"
    )
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    doc = {
        "meta": meta,
        "plans": [asdict(p) for p in plans(args.quick, args.scale) if p.body in sizes],
        "results": [
            {
                "body": m.size,
                "measurement": m.name,
                **m.summary(),
                "capped": m.capped,
                "goal": g.get((m.size, m.name), ("", None))[0],
                "goal_met": g.get((m.size, m.name), ("", None))[1],
                "runs": [
                    {"seconds": s, "records": r, "bytes": b, "cpu_seconds": c}
                    for s, r, b, c in zip(m.runs_s, m.runs_records, m.runs_bytes, m.runs_cpu_s)
                ],
                **m.extra,
            }
            for m in results
        ],
        "markdown": md,
    }
    with open(out, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"\nJSON: {os.path.relpath(out, os.getcwd())}  (wall {meta['wall_seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
