"""Retry path benchmark: messages/s through RECONSUME_LATER -> %RETRY%<group> -> redelivery.

A backlog of ``--messages`` 100-byte messages is stored first; a PushConsumer (clustering,
per-message listener) answers RECONSUME_LATER to each message's first delivery and SUCCESS to
its second. The figure is messages / (time the last message came back with reconsume_times 1
- consumer start): every message takes the whole loop once (listener, SEND_BACK frame, the
broker's read + rewrite + internal put under SCHEDULE_TOPIC_XXXX, the delay service's delivery
into the retry topic, the pull from it). Delay levels are 1 ms so the figure is the path's cost,
not the wait. The baseline is the same consumer answering SUCCESS at once (plain consume).
Each scenario runs ``--rounds`` times on a fresh store; medians are reported.

    .venv/bin/python tools/bench/retry_bench.py [--messages N] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

import shmq
from shmq import ConsumeFrom, ConsumeResult, MessageBatch, Producer, PushConsumer

BODY = b"x" * 100
TOPIC = "RetryBench"
CONFIG = {"mappedFileSizeCommitLog": 256 * 1024 * 1024, "messageDelayLevel": " ".join(["1ms"] * 18)}


def _store_backlog(name: str, count: int) -> None:
    with Producer("bench-producer", broker=name) as p:
        for k in range(0, count, 1000):
            p.send_batch(MessageBatch(TOPIC, [BODY] * min(1000, count - k)))


def _run(count: int, retry: bool) -> float:
    """Seconds for ``count`` messages to be consumed (once more after a RECONSUME_LATER if ``retry``)."""
    with tempfile.TemporaryDirectory() as d:
        name = f"retry-bench-{int(time.time() * 1000) % 100000}"
        with shmq.Broker(d, name, CONFIG):
            _store_backlog(name, count)
            done = threading.Event()
            lock = threading.Lock()
            finished = [0]

            def listener(msgs, ctx) -> ConsumeResult:
                if retry and msgs[0].reconsume_times == 0:
                    return ConsumeResult.RECONSUME_LATER
                with lock:
                    finished[0] += len(msgs)
                    if finished[0] >= count:
                        done.set()
                return ConsumeResult.SUCCESS

            c = PushConsumer("bench-retry", broker=name, consume_from=ConsumeFrom.FIRST_OFFSET)
            c.subscribe(TOPIC)
            c.register_listener(listener)
            start = time.monotonic()
            c.start()
            if not done.wait(300):
                raise RuntimeError(f"only {finished[0]} of {count} messages came back")
            elapsed = time.monotonic() - start
            c.shutdown()
            return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for label, retry in (("consume, SUCCESS at once", False), ("RECONSUME_LATER -> retry topic -> redelivery", True)):
        rates = [args.messages / _run(args.messages, retry) for _ in range(args.rounds)]
        print(
            f"{label:48s} median {statistics.median(rates):9,.0f} msg/s   "
            f"(runs: {', '.join(f'{r:,.0f}' for r in rates)})"
        )


if __name__ == "__main__":
    main()
