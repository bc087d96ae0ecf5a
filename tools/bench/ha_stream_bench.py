#!/usr/bin/env python
"""HA sender streaming rate on loopback: how fast `shmq ha` hands a backlog to one replica.

    .venv/bin/python tools/bench/ha_stream_bench.py               # 256 MiB of 100 B records, 3 runs
    .venv/bin/python tools/bench/ha_stream_bench.py --mib 32 --runs 1

A store is filled directly (MessageStore.put of 256-record batches of 100 B bodies, no index),
a broker is started on it (haListenPort 0: it spawns no sender) and this script starts
`python -m shmq ha` itself. A lean receiver in this process does the handshake with the real
ReplicaSession, reports offset 0, then reads frames with recv_into (headers parsed, bodies
CRC-checked against the files afterwards), reporting its offset every 4 MiB like a replica.
Each run is a new connection from offset 0; the figure is log bytes / seconds from the first
report to the last byte, median (min-max) of the runs. The replica's own store append is not
part of this figure (see the replica's benchmark).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import numpy as np

import shmq
from shmq.codec import record as fmt
from shmq.ha import protocol as P
from shmq.ha.shared import HASegment
from shmq.store.message_store import MessageStore
from shmq.store.write.hooks import PutRequest

TOKEN = "bench"
SEGMENT = 128 * 1024 * 1024
CONFIG = {
    "mappedFileSizeCommitLog": SEGMENT,
    "messageIndexEnable": False,
    "flushDiskType": "ASYNC_FLUSH",
    "haListenPort": 0,
}
REPORT_EVERY = 4 << 20


def fill(store_dir: str, target: int) -> int:
    """Write about ``target`` bytes of 100 B records; the commitlog's max offset."""
    store = MessageStore(store_dir, CONFIG).start()
    try:
        rng = np.random.default_rng(1)
        blob = rng.integers(0, 256, 256 * 100 + 100, dtype=np.uint8).tobytes()
        props = [fmt.message_properties(tags="TagA") for _ in range(256)]
        batch = fmt.encode_batch("HaBench", [blob[i : i + 100] for i in range(256)], props)
        while store.commitlog.max_offset < target:
            store.put(PutRequest(batch, ["HaBench"], None, 0, user_batch=True))
        return store.commitlog.max_offset
    finally:
        store.shutdown()


def file_crc(store_dir: str, end: int) -> int:
    crc, offset = 0, 0
    while offset < end:
        with open(os.path.join(store_dir, "commitlog", f"{offset:020d}"), "rb") as f:
            data = f.read(min(SEGMENT, end - offset))
        crc = zlib.crc32(data, crc)
        offset += len(data)
    return crc


def receive(port: int, end: int) -> tuple[float, int]:
    """One replica connection from offset 0 to ``end``: (seconds, crc of the bytes)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    session = P.ReplicaSession(TOKEN.encode(), "bench", 16 << 20)
    events: list[P.Event] = []
    while not any(isinstance(e, P.Welcome) for e in events):
        events += session.receive(sock.recv(65536))
        out = session.take_output()
        if out:
            sock.sendall(out)
    leftover = bytes(session._buf)  # a partial frame after WELCOME: the raw loop below goes on from it
    buf = bytearray(8 << 20)
    view = memoryview(buf)
    have = len(leftover)
    buf[:have] = leftover
    offset, crc, reported = 0, 0, 0
    body_left = 0  # bytes of the current frame's body still to come
    is_data = False
    t0 = time.perf_counter()
    sock.sendall(P.encode_report(0))
    pos = 0
    while offset < end:
        if pos == have:
            pos = have = 0
        n = sock.recv_into(view[have:])
        if not n:
            raise ConnectionError("the sender closed the connection")
        have += n
        while pos < have:
            if body_left:
                take = min(body_left, have - pos)
                if is_data:
                    crc = zlib.crc32(view[pos : pos + take], crc)
                    offset += take
                body_left -= take
                pos += take
                continue
            if have - pos < P.FRAME.size:
                buf[: have - pos] = buf[pos:have]
                have -= pos
                pos = 0
                break
            frame_offset, size = P.FRAME.unpack_from(buf, pos)
            pos += P.FRAME.size
            is_data = frame_offset >= 0
            if is_data and frame_offset != offset:
                raise AssertionError(f"frame at {frame_offset}, replica at {offset}")
            body_left = size
        if offset - reported >= REPORT_EVERY:
            sock.sendall(P.encode_report(offset))
            reported = offset
    seconds = time.perf_counter() - t0
    sock.close()
    return seconds, crc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256, help="log to stream (MiB of 100 B records)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32768, help="haTransferBatchSize")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="ha-stream-bench-")
    store_dir = os.path.join(tmp, "store")
    name = f"habench{os.getpid()}"
    try:
        t0 = time.perf_counter()
        end = fill(store_dir, args.mib << 20)
        print(f"filled {end / 2**20:.0f} MiB in {time.perf_counter() - t0:.1f} s")
        want_crc = file_crc(store_dir, end)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        conf = os.path.join(tmp, "ha.conf")
        with open(conf, "w") as f:
            f.write(
                f"mappedFileSizeCommitLog={SEGMENT}\nhaListenPort={port}\nhaAuthToken={TOKEN}\n"
                f"haTransferBatchSize={args.batch}\n"
            )
        with shmq.Broker(store_dir, name, CONFIG):
            with open(os.path.join(tmp, "ha.log"), "wb") as log:
                sender = subprocess.Popen(
                    [sys.executable, "-m", "shmq", "ha", "--store", store_dir, "--name", name, "--config", conf],
                    stdout=log,
                    stderr=log,
                )
            try:
                ha = HASegment.open(name, read_only=True)
                deadline = time.monotonic() + 15
                while int(ha.header["listen_port"][0]) != port:
                    if sender.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(Path(os.path.join(tmp, "ha.log")).read_text())
                    time.sleep(0.01)
                ha.close()
                rates = []
                for i in range(args.runs):
                    seconds, crc = receive(port, end)
                    if crc != want_crc:
                        raise SystemExit(f"run {i}: received bytes differ from the master's commitlog")
                    rates.append(end / 2**20 / seconds)
                    print(f"run {i + 1}: {end / 2**20:.0f} MiB in {seconds:.2f} s = {rates[-1]:.0f} MiB/s")
            finally:
                sender.send_signal(signal.SIGTERM)
                sender.wait(10)
        print(
            f"HA sender streaming (loopback, 100 B records, haTransferBatchSize={args.batch}): median "
            f"{statistics.median(rates):.0f} MiB/s (min {min(rates):.0f}, max {max(rates):.0f}, {args.runs} runs); "
            "goal >= 200 MB/s"
        )
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
