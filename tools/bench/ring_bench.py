"""Ring benchmark: one producer process -> one consumer process over a shmq channel.

Reports frames/s and MB/s for 100-byte frames written one at a time and in batches, and
the request/response round-trip latency through doorbells (with the default spin, and with
no spin so every wait really sleeps on the semaphore).

    .venv/bin/python tools/bench/ring_bench.py [--frames N] [--rounds N] [--ring-bytes N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np

from shmq.ring import shm
from shmq.ring.channel import Channel, broker_bell_name
from shmq.ring.doorbell import SPIN_SECONDS, Doorbell, park, wake
from shmq.ring.framing import CONSUMER, PRODUCER

FRAME = 100
KIND = 16
ctx = mp.get_context("fork")


def _produce(broker: str, client_id: int, frames: int, batch: int) -> None:
    ch = Channel.open(broker, client_id)
    ring = ch.requests
    payload = bytes(range(FRAME))
    batch_frames = [(KIND, payload)] * batch
    sent = 0
    while sent < frames:
        if batch == 1:
            done = 1 if ring.try_write(KIND, payload) else 0
        else:
            done = ring.write_batch(batch_frames[: frames - sent])
        if done:
            sent += done
            wake(ring, CONSUMER, ch.broker_bell)
        else:
            park(lambda: ring.writable(FRAME), [(ring, PRODUCER)], ch.client_bell, 10.0)
    ch.close()


def throughput(broker: str, bell: Doorbell, frames: int, batch: int, ring_bytes: int) -> tuple[float, float]:
    """(frames/s, MB/s of payload) for one producer process feeding this process."""
    ch = Channel.create(broker, 2, ring_bytes, bell, secret=1)
    proc = ctx.Process(target=_produce, args=(broker, 2, frames, batch))
    ring = ch.requests
    got = 0
    start = None
    proc.start()
    while got < frames:
        read = ring.read_batch(4096) if batch > 1 else [ring.read()] if ring.has_data() else []
        if read and read[0] is not None:
            if start is None:
                start = time.perf_counter()
            got += len(read)
            ring.release()
            wake(ring, PRODUCER, ch.client_bell)
        else:
            park(ring.has_data, [(ring, CONSUMER)], bell, 10.0)
    elapsed = time.perf_counter() - (start or 0)
    proc.join()
    ch.close()
    ch.unlink()
    return frames / elapsed, frames * FRAME / elapsed / 1e6


def _echo(broker: str, client_id: int, rounds: int, spin: float) -> None:
    bell = Doorbell.open(broker_bell_name(broker))
    ch = Channel.open(broker, client_id)
    for _ in range(rounds):
        park(ch.requests.has_data, [(ch.requests, CONSUMER)], bell, 10.0, spin)
        kind, view = ch.requests.read()
        ch.responses.try_write(kind, view)
        ch.requests.release()
        wake(ch.responses, CONSUMER, ch.client_bell)
    ch.close()
    bell.close()


def round_trip(broker: str, bell: Doorbell, rounds: int, spin: float) -> tuple[float, float]:
    """(p50, p99) microseconds of a 100-byte request answered by another process."""
    ch = Channel.create(broker, 3, 65536, bell, secret=1)
    proc = ctx.Process(target=_echo, args=(broker, 3, rounds, spin))
    proc.start()
    payload = bytes(FRAME)
    times = np.empty(rounds)
    for i in range(rounds):
        t0 = time.perf_counter()
        ch.requests.try_write(KIND, payload)
        wake(ch.requests, CONSUMER, ch.broker_bell)
        park(ch.responses.has_data, [(ch.responses, CONSUMER)], ch.client_bell, 10.0, spin)
        ch.responses.read()
        ch.responses.release()
        times[i] = time.perf_counter() - t0
    proc.join()
    ch.close()
    ch.unlink()
    warm = times[rounds // 10 :] * 1e6
    return float(np.percentile(warm, 50)), float(np.percentile(warm, 99))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20_000)
    parser.add_argument("--ring-bytes", type=int, default=1 << 20)
    args = parser.parse_args()
    broker = f"bench{os.getpid()}"
    bell = Doorbell.create(broker_bell_name(broker))
    try:
        for label, batch in (("single", 1), ("batch of 64", 64)):
            fps, mbs = throughput(broker, bell, args.frames, batch, args.ring_bytes)
            print(f"throughput {label:>12}: {fps:12,.0f} frames/s {mbs:8.1f} MB/s ({FRAME}-byte frames)")
        for label, spin in ((f"spin {SPIN_SECONDS * 1e6:.0f} us", SPIN_SECONDS), ("no spin", 0.0)):
            p50, p99 = round_trip(broker, bell, args.rounds, spin)
            print(f"round trip {label:>12}: p50 {p50:6.1f} us  p99 {p99:6.1f} us")
    finally:
        bell.close()
        bell.unlink()
        shm.remove_leftovers(broker)


if __name__ == "__main__":
    main()
