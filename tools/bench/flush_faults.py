"""Why MappedFile.flush syncs only the written range: copies into a warmed segment while a
flusher syncs either nothing, the whole file (fdatasync) or the written range (msync).

A page written back is write-protected; the next store into it faults. A whole-file sync
also cleans the warmed pages ahead of the writer, so each of them faults once when filled.

    .venv/bin/python tools/bench/flush_faults.py [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

import numpy as np

from shmq.store.mapped_file import MappedFile, sync_range

SIZE = 256 << 20
CHUNK = 370_000  # a batch of 2,048 records of 100-byte bodies


def run(directory: str, mode: str) -> tuple[float, float]:
    """(median copy us per chunk, median flush ms) with ``mode`` in none / fdatasync / msync."""
    path = os.path.join(directory, f"{0:020d}")
    mf = MappedFile(path, SIZE)
    try:
        mf.warm()
        src = np.frombuffer(os.urandom(CHUNK), np.uint8)
        fd = os.open(path, os.O_RDONLY)
        stop = threading.Event()
        flushes: list[float] = []

        def flusher() -> None:
            while not stop.wait(0.05):
                t = time.perf_counter()
                if mode == "fdatasync":
                    os.fdatasync(fd)
                elif mode == "msync" and mf.wrote_position:
                    sync_range(mf._address, mf.wrote_position)
                flushes.append(time.perf_counter() - t)

        th = threading.Thread(target=flusher)
        th.start()
        copies = []
        pos = 0
        while pos + CHUNK < SIZE:
            t = time.perf_counter()
            mf.array[pos : pos + CHUNK] = src
            copies.append(time.perf_counter() - t)
            pos += CHUNK
            mf.wrote_position = pos
            time.sleep(0.001)
        stop.set()
        th.join()
        os.close(fd)
        return float(np.median(copies)) * 1e6, float(np.median(flushes or [0.0])) * 1e3
    finally:
        mf.destroy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="a folder on the disk to test (default: a temp folder)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        for mode in ("none", "fdatasync", "msync"):
            copy_us, flush_ms = run(d, mode)
            print(f"{mode:>9}: copy of {CHUNK:,} bytes p50 {copy_us:7.0f} us   flush p50 {flush_ms:6.2f} ms")


if __name__ == "__main__":
    main()
