"""Transaction throughput: committed transactions per second from one TransactionProducer
(sync half send + local transaction + oneway END_TRANSACTION, the broker writing the op record
and the real message with one put), next to plain sync sends of the same producer thread.

Each round runs on a fresh store for ``--seconds`` per scenario; the median of ``--rounds`` is
reported, and each round checks that exactly the committed messages became visible.

    .venv/bin/python tools/bench/tx_bench.py [--seconds 3] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

import shmq
from shmq import Message, MessageQueue, Producer, PullConsumer, TransactionProducer, TransactionStatus

BODY = b"x" * 100
TOPIC = "TxBench"
CONFIG = {"mappedFileSizeCommitLog": 256 * 1024 * 1024, "warmAheadSize": 256 * 1024 * 1024}


def _loop(send, seconds: float, threads: int) -> int:
    """Call ``send()`` from ``threads`` threads for ``seconds``; the calls made."""
    counts = [0] * threads
    end = time.monotonic() + seconds

    def run(i: int) -> None:
        while time.monotonic() < end:
            send()
            counts[i] += 1

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts)


def _visible(name: str) -> int:
    with PullConsumer("bench-watch", broker=name) as c:
        return sum(
            c.max_offset(MessageQueue(TOPIC, name, q)) - c.min_offset(MessageQueue(TOPIC, name, q)) for q in range(4)
        )


def one_round(seconds: float, threads: int) -> tuple[float, float]:
    """(committed transactions/s, sync sends/s)."""
    with tempfile.TemporaryDirectory() as d, shmq.Broker(d, f"txbench{time.monotonic_ns() % 10**9}", CONFIG) as b:
        msg = Message(TOPIC, BODY)
        commit = TransactionStatus.COMMIT
        with TransactionProducer("bench-tx", broker=b.name, check=lambda m: commit) as tp:
            tp.send_in_transaction(msg, lambda m, a: commit)  # warm up: topic made, paths loaded
            t0 = time.monotonic()
            n = _loop(lambda: tp.send_in_transaction(msg, lambda m, a: commit), seconds, threads)
            tx_rate = n / (time.monotonic() - t0)
        deadline = time.monotonic() + 5
        while _visible(b.name) < n + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _visible(b.name) == n + 1, f"{_visible(b.name)} visible, {n + 1} committed"
        with Producer("bench-plain", broker=b.name) as p:
            p.send(msg)
            t0 = time.monotonic()
            n = _loop(lambda: p.send(msg), seconds, threads)
            send_rate = n / (time.monotonic() - t0)
    return tx_rate, send_rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    rounds = [one_round(args.seconds, args.threads) for _ in range(args.rounds)]
    for i, (tx, send) in enumerate(rounds, 1):
        print(f"round {i}: {tx:,.0f} committed transactions/s, {send:,.0f} sync sends/s")
    tx = statistics.median(r[0] for r in rounds)
    send = statistics.median(r[1] for r in rounds)
    print(
        f"median of {args.rounds} ({args.threads} thread(s), {len(BODY)}-byte bodies): {tx:,.0f} committed "
        f"transactions/s, {send:,.0f} sync sends/s ({tx / send:.2f} of a sync send)"
    )


if __name__ == "__main__":
    main()
