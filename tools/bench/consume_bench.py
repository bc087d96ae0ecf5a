"""End-to-end benchmark: one producer process -> broker process -> one consumer process, 100-byte bodies.

Scenarios:
- batch: ``send_batch_async`` of a ``MessageBatch`` of 2,048 bodies, 4 batches in flight ->
  ``PullConsumer.pull_batch`` (columnar, nothing decoded per message);
- message: ``send_oneway`` -> ``PushConsumer`` with a per-message listener (MessageExt objects).

End to end, the figure is messages / (time the consumer got the last message - time the
producer started); CLOCK_MONOTONIC is system-wide, so the two processes' stamps compare. The
"drain" figures time the consumer alone over a backlog stored beforehand: what the consume
side can take when the producer is not the bottleneck. Each scenario runs
``--rounds`` times on a fresh store and the median is reported (the dev machines are shared).

    .venv/bin/python tools/bench/consume_bench.py [--batch-messages N] [--messages N] [--rounds R]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import tempfile
import threading
import time
from collections import deque

import shmq
from shmq import ConsumeFrom, ConsumeResult, Message, MessageBatch, Producer, PullConsumer, PullStatus, PushConsumer

BODY = b"x" * 100
TOPIC = "Bench"
# set explicitly, so the figures do not move with the defaults: whole segments warmed ahead
CONFIG = {"mappedFileSizeCommitLog": 256 * 1024 * 1024, "warmAheadSize": 256 * 1024 * 1024}
BATCH = 2048
IN_FLIGHT = 4


def _produce(name: str, count: int, batch: bool, start_at, ready) -> None:
    with Producer("bench-producer", broker=name) as p:
        ready.wait()
        start_at.value = time.monotonic()
        if batch:
            msgs = MessageBatch(TOPIC, [BODY] * BATCH)
            in_flight: deque = deque()
            for _ in range(count // BATCH):
                in_flight.append(p.send_batch_async(msgs))
                if len(in_flight) >= IN_FLIGHT:
                    in_flight.popleft().result()
            for f in in_flight:
                f.result()
        else:
            msg = Message(TOPIC, BODY)
            for _ in range(count):
                p.send_oneway(msg)
            p.send(msg)  # everything before it is stored


def _pull(name: str, count: int, done_at, ready, start_at=None) -> None:
    with PullConsumer("bench-pull", broker=name) as c:
        queues = c.fetch_queues(TOPIC)
        offsets = {mq: c.min_offset(mq) if start_at is not None else c.max_offset(mq) for mq in queues}
        if start_at is not None:
            start_at.value = time.monotonic()
        ready.set()
        got = 0
        while got < count:
            for mq in queues:
                r = c.pull_batch(mq, offset=offsets[mq], max_nums=4096, timeout=0.05)
                if r.status is PullStatus.FOUND:
                    got += len(r.batch)
                offsets[mq] = r.next_begin_offset
        done_at.value = time.monotonic()


def _push(name: str, count: int, done_at, ready, start_at=None) -> None:
    finished = threading.Event()
    lock = threading.Lock()
    got = [0]

    def listener(msgs, ctx) -> ConsumeResult:
        with lock:
            got[0] += len(msgs)
            if got[0] >= count:
                finished.set()
        return ConsumeResult.SUCCESS

    drain = start_at is not None
    c = PushConsumer(
        "bench-push", broker=name, consume_from=ConsumeFrom.FIRST_OFFSET if drain else ConsumeFrom.LAST_OFFSET
    )
    c.subscribe(TOPIC)
    c.register_listener(listener)
    if drain:
        start_at.value = time.monotonic()
    with c:
        if not drain:
            time.sleep(0.3)  # queues assigned, start offsets taken
        ready.set()
        finished.wait()
        done_at.value = time.monotonic()


def run(count: int, batch: bool, drain: bool = False) -> float:
    """msgs/s of one round; ``drain``: store everything first, then time the consumer alone."""
    if batch or drain:  # whole batches
        count = count // BATCH * BATCH
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="shmq-consume-bench-") as store:
        name = f"cbench{int(time.time() * 1000) % 10**8}"
        with shmq.Broker(store, name, CONFIG):
            with Producer("bench-setup", broker=name) as p:
                for qid in range(4):  # the topic exists before the consumer looks for its queues
                    p.send(Message(TOPIC, BODY), selector=lambda queues, msg, arg: queues[arg], arg=qid)
            start_at, done_at, ready = ctx.Value("d", 0.0), ctx.Value("d", 0.0), ctx.Event()
            producer = ctx.Process(target=_produce, args=(name, count, True if drain else batch, start_at, ready))
            consumer = ctx.Process(
                target=_pull if batch else _push, args=(name, count, done_at, ready) + ((start_at,) if drain else ())
            )
            if drain:
                ready.set()
                producer.start()
                producer.join()
                ready.clear()
                consumer.start()
            else:
                producer.start()
                consumer.start()
                producer.join()
            consumer.join()
            if producer.exitcode or consumer.exitcode:
                raise RuntimeError(f"benchmark process failed: {producer.exitcode}, {consumer.exitcode}")
            return count / (done_at.value - start_at.value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-messages", type=int, default=1_000_000)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for label, count, batch, drain in (
        ("send_batch -> pull_batch", args.batch_messages, True, False),
        ("send_oneway -> PushConsumer", args.messages, False, False),
        ("drain backlog: pull_batch", args.batch_messages, True, True),
        ("drain backlog: PushConsumer", args.messages, False, True),
    ):
        rates = [run(count, batch, drain) for _ in range(args.rounds)]
        print(
            f"{label:30s} median {statistics.median(rates):>12,.0f} msgs/s   "
            f"rounds: {', '.join(f'{r:,.0f}' for r in rates)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
