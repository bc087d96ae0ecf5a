"""Run inside a private mount namespace whose /dev/shm is a small tmpfs (see test_shm_full.py).

``attach``: a broker serves, /dev/shm is filled to the last page, a client asks for a large
ring, then space is freed and it asks again. ``start``: /dev/shm is full before the broker
starts. Prints one JSON object with what happened; removes its filler whatever happens.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import shmq
from shmq import Message, Producer
from shmq.errors import ShmqError
from shmq.ring import shm

FILLER = "/dev/shm/filler"
SMALL = {
    "mappedFileSizeCommitLog": 16 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 4096,
    "maxHashSlotNum": 1009,
    "maxIndexNum": 40000,
}


def fill() -> None:
    """Write /dev/shm full (another user's file would do the same)."""
    fd = os.open(FILLER, os.O_CREAT | os.O_WRONLY, 0o600)
    chunk = b"\xab" * 4096
    try:
        while True:
            os.write(fd, chunk)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)


def attach(store: str, name: str) -> dict:
    out: dict = {}
    broker = shmq.Broker(store, name, SMALL)
    try:
        with Producer("early", broker=name, ring_bytes=65536) as early:
            fill()
            try:
                Producer("big", broker=name, ring_bytes=4 << 20, start_timeout=5.0).start()
                out["big"] = "attached"
            except ShmqError as e:
                out["big"] = f"{type(e).__name__}: {e}"
            out["alive"] = broker.process.poll() is None
            out["early_send"] = early.send(Message("T", b"still served")).status.name
            os.unlink(FILLER)
            with Producer("late", broker=name, ring_bytes=4 << 20) as late:
                out["late_send"] = late.send(Message("T", b"room again")).status.name
    finally:
        if os.path.exists(FILLER):
            os.unlink(FILLER)
        out["exit"] = broker.stop()
        out["log"] = broker.log()[-2000:]
    return out


def start(store: str, name: str) -> dict:
    fill()
    try:
        p = subprocess.run(
            [sys.executable, "-m", "shmq", "broker", "--store", store, "--name", name],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.unlink(FILLER)
    return {"exit": p.returncode, "stderr": p.stderr}


if __name__ == "__main__":
    store_dir, broker_name, mode = sys.argv[1:4]
    result = (attach if mode == "attach" else start)(store_dir, broker_name)
    result["leftovers"] = shm.leftovers(broker_name)
    print(json.dumps(result))
