#!/usr/bin/env python
"""What one durable sync of a small dirty range costs here: the floor of a SYNC_FLUSH send.

    .venv/bin/python tools/bench/sync_floor.py [--dir DIR] [--rounds N] [--records K]

A SYNC_FLUSH broker answers a group of sends only after one sync of what they appended; no
answer can come sooner than this sync, whatever the broker does around it. Per variant: a
64 MiB file filled with zeros and fdatasync'd first (a warmed commitlog segment: its blocks
are allocated and on disk, so a sync writes data only, no metadata), then ``--rounds`` times
``--records`` records of 200 B appended with pwrite (as ``CommitLog`` writes under
SYNC_FLUSH) and one sync of them, timed. Variants: fdatasync and fsync of the file, msync
(MS_SYNC) of the mapped range written since the last sync (what ``MappedFile.flush`` does),
and pwritev2 with RWF_DSYNC on the last record (write and sync in one call; its time includes
the writes). ``--dir``: the filesystem to measure (default: the temporary directory, where
the benchmark suite keeps its stores). Each variant runs twice, interleaved; median and p99.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import statistics
import tempfile
import time
from collections.abc import Callable

SIZE = 64 << 20
RECORD = b"x" * 200
PAGE = mmap.PAGESIZE
MS_SYNC = 4
_libc = ctypes.CDLL(None, use_errno=True)
_libc.msync.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

Sync = Callable[[int, int, int, int], None]  # (fd, address, flushed position, written position)


def _fdatasync(fd: int, address: int, lo: int, hi: int) -> None:
    os.fdatasync(fd)


def _fsync(fd: int, address: int, lo: int, hi: int) -> None:
    os.fsync(fd)


def _msync_range(fd: int, address: int, lo: int, hi: int) -> None:
    start = lo & ~(PAGE - 1)
    if _libc.msync(address + start, hi - start, MS_SYNC) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def measure(directory: str, sync: Sync | None, rounds: int, records: int) -> list[int]:
    """ns per round; ``sync`` None: the last record of each round is written with RWF_DSYNC."""
    path = os.path.join(directory, "sync_floor.seg")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        zeros = bytes(1 << 20)
        for off in range(0, SIZE, len(zeros)):
            os.pwrite(fd, zeros, off)
        os.fdatasync(fd)
        with mmap.mmap(fd, SIZE) as mm:
            buf = ctypes.c_char.from_buffer(mm)
            address = ctypes.addressof(buf)
            pos = flushed = 0
            out = []
            for _ in range(rounds):
                if sync is None:
                    t = time.perf_counter_ns()
                    for i in range(records):
                        os.pwritev(fd, [RECORD], pos, os.RWF_DSYNC if i == records - 1 else 0)
                        pos += len(RECORD)
                else:
                    for _ in range(records):
                        os.pwrite(fd, RECORD, pos)
                        pos += len(RECORD)
                    t = time.perf_counter_ns()
                    sync(fd, address, flushed, pos)
                out.append(time.perf_counter_ns() - t)
                flushed = pos
            del buf
        return out
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--records", type=int, default=8, help="records appended before each sync")
    a = ap.parse_args()
    fs = os.statvfs(a.dir)
    print(
        f"{a.dir}: {a.rounds} rounds of {a.records} x {len(RECORD)} B then one sync "
        f"(block size {fs.f_bsize}); load average {os.getloadavg()[0]:.2f}"
    )
    variants: list[tuple[str, Sync | None]] = [
        ("fdatasync", _fdatasync),
        ("msync range", _msync_range),
        ("fsync", _fsync),
        ("pwritev2 RWF_DSYNC", None),
    ]
    results: dict[str, list[int]] = {name: [] for name, _ in variants}
    for _ in range(2):
        for name, sync in variants:
            results[name] += measure(a.dir, sync, a.rounds, a.records)
    for name, ns in results.items():
        ns.sort()
        print(
            f"  {name:20s} median {statistics.median(ns) / 1000:7.1f} us   p99 {ns[int(len(ns) * 0.99)] / 1000:8.1f} us"
        )
    print(f"  load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
