"""Cost of body compression on sync sends of large bodies (issue 14, part 5).

200 sync ``send`` calls of 64 KiB bodies against a broker process, for a random body (does not
shrink: compression can only cost) and a text body (shrinks ~10x), with compression at its
default threshold (``compress_msg_body_over_howmuch=4096``, RocketMQ's) and off (``None``).
Each case runs ``--rounds`` times on one fresh store; medians of the wall time and of the
stored bytes per message are printed as one table.

    .venv/bin/python tools/bench/compress_bench.py [--sends N] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import shmq
from shmq import Message, Producer

SIZE = 64 * 1024
CONFIG = {"mappedFileSizeCommitLog": 256 * 1024 * 1024}


def _bodies() -> dict[str, bytes]:
    words = b"order shipped customer warehouse invoice payment refund parcel".split()
    text = b" ".join(words[(i * 7 + i // 3) % len(words)] + str(i).encode() for i in range(SIZE // 6))[:SIZE]
    return {"random": os.urandom(SIZE), "text": text}


def _run(broker: str, body: bytes, threshold: int | None, sends: int) -> tuple[float, float]:
    """Seconds for ``sends`` sync sends and the mean stored commitlog bytes per message."""
    with Producer("bench", broker=broker, compress_msg_body_over_howmuch=threshold) as p:
        p.send(Message("Bench", b"warm"))
        first = last = None
        t0 = time.perf_counter()
        for _ in range(sends):
            r = p.send(Message("Bench", body))
            first = r.phys_offsets[0] if first is None else first
            last = r.phys_offsets[0]
        elapsed = time.perf_counter() - t0
    assert first is not None and last is not None
    return elapsed, (last - first) / max(sends - 1, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sends", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"{'body':8} {'compression':12} {'ms/200 sends':>13} {'stored B/msg':>13}")
    with tempfile.TemporaryDirectory() as d, shmq.Broker(d, name=f"cbench{os.getpid()}", config=CONFIG) as b:
        for name, body in _bodies().items():
            for label, threshold in (("on (4 KiB)", 4096), ("off", None)):
                runs = [_run(b.name, body, threshold, args.sends) for _ in range(args.rounds)]
                ms = statistics.median(r[0] for r in runs) * 1000 * 200 / args.sends
                stored = statistics.median(r[1] for r in runs)
                print(f"{name:8} {label:12} {ms:13.1f} {stored:13.0f}")


if __name__ == "__main__":
    main()
