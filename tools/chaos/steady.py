"""The steady load beside an attack run: one producer and one consumer that must not notice.

The producer sends numbered messages with sync ``send`` at a fixed rate and records, per send,
when it started (CLOCK_MONOTONIC, the same clock in every process), how long it took and
whether it was acknowledged. The consumer (a clustering ``PushConsumer``) records every
number it receives. Both write what they saw to a JSON file when told to stop (SIGTERM), so
the harness can compare acknowledged with read and cut the latencies into attack windows.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import shmq

TOPIC = "ChaosSteady"
GROUP = "chaos-steady"


def _stopper() -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def produce(broker: str, rate: float, out: str) -> None:
    """Sync sends at ``rate`` per second until SIGTERM; write sends and errors to ``out``."""
    stop = _stopper()
    p = shmq.Producer("chaos-steady-producer", broker=broker, send_msg_timeout=3.0).start()
    sends: list[tuple[float, float, int]] = []  # (start, latency us, seq or -1 when not acked)
    errors: dict[str, int] = {}
    gap = 1.0 / rate
    seq = 0
    next_at = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if now < next_at:
            time.sleep(next_at - now)
        next_at += gap
        t = time.monotonic()
        try:
            r = p.send(shmq.Message(TOPIC, str(seq).encode()))
            ok = r.status is shmq.SendStatus.SEND_OK
            if not ok:
                errors[r.status.name] = errors.get(r.status.name, 0) + 1
        except shmq.ShmqError as e:
            ok = False
            key = f"{type(e).__name__}: {str(e)[:80]}"
            errors[key] = errors.get(key, 0) + 1
        sends.append((t, (time.monotonic() - t) * 1e6, seq if ok else -1))
        seq += 1
        if next_at < time.monotonic() - 1.0:  # fell behind (a stall): do not burst to catch up
            next_at = time.monotonic()
    try:
        p.shutdown()
    except shmq.ShmqError as e:
        errors[f"shutdown: {e}"] = 1
    _dump(out, {"sends": sends, "errors": errors})


def consume(broker: str, out: str) -> None:
    """A clustering PushConsumer from the first offset until SIGTERM; write what it read to ``out``."""
    stop = _stopper()
    seen: set[int] = set()
    lock = threading.Lock()

    def listener(msgs: list[Any], _ctx: object) -> shmq.ConsumeResult:
        with lock:
            seen.update(int(m.body) for m in msgs)
        return shmq.ConsumeResult.SUCCESS

    c = shmq.PushConsumer(GROUP, broker=broker, consume_from=shmq.ConsumeFrom.FIRST_OFFSET)
    c.subscribe(TOPIC, "*")
    c.register_listener(listener)
    c.start()
    while not stop.is_set():
        stop.wait(0.2)
        with lock:
            _dump(out + ".count", {"read": len(seen)})
    c.shutdown()
    with lock:
        _dump(out, {"read": sorted(seen)})


def _dump(path: str, obj: object) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


if __name__ == "__main__":
    role, name, out = sys.argv[1], sys.argv[2], sys.argv[3]
    if role == "produce":
        produce(name, float(sys.argv[4]), out)
    else:
        consume(name, out)
