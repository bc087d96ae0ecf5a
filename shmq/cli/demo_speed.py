"""The demo's two measured phases: throughput of batch sends and column pulls, and the latency
of paced sends to a push listener in another process.

Both time only the steady phase: every process connects first and waits at a barrier, so a
figure never includes process start-up, and the latency phase paces its sends (one per
``1 / rate`` s) so what it measures is the path of one message, not a queue of them. Times are
``time.monotonic_ns()``, one clock for every process of the host (CLOCK_MONOTONIC), so a
producer's stamp and a consumer's reading compare.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing as mp
import queue
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.context import SpawnContext
from multiprocessing.process import BaseProcess
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier, Event
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from shmq import (
    ConsumeContext,
    ConsumeFrom,
    ConsumeResult,
    Message,
    MessageBatch,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
)
from shmq.cli.demo_cluster import Target

BULK_TOPIC = "DemoBulk"
LATENCY_TOPIC = "DemoLatency"
SIZE = 100  # body bytes of both phases; the 1-byte warm-up messages are told apart by size
IN_FLIGHT = 4  # batches a producer keeps in flight
CONSUMERS = 2
WARMUP = b"w"


@dataclass
class Figures:
    """What a phase measured, for the summary."""

    sent: int = 0
    received: int = 0
    send_ns: int = 0
    receive_ns: int = 0
    latencies_ns: list[int] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    per_broker: dict[str, int] = field(default_factory=dict)  # messages consumed from each broker
    queues: dict[int, list[tuple[str, int]]] = field(default_factory=dict)  # pull consumer -> (broker, queue id)


def bulk_producer(
    target: Target, number: int, count: int, batch: int, ready: Barrier, sent: Synchronized[int], report: mp.Queue[Any]
) -> None:
    """Send ``count`` bodies in MessageBatch batches, ``IN_FLIGHT`` of them unacknowledged at a time."""
    p = Producer(f"demo-bulk-{number}", **target).start()
    try:
        bodies = [number.to_bytes(4, "little") + bytes(SIZE - 4)] * batch
        window: collections.deque[Any] = collections.deque()
        ready.wait(60)
        first = time.monotonic_ns()
        done = 0
        while done < count:
            n = min(batch, count - done)
            window.append((n, p.send_batch_async(MessageBatch(BULK_TOPIC, bodies[:n]))))
            done += n
            if len(window) >= IN_FLIGHT:
                _settle(window.popleft(), sent)
        while window:
            _settle(window.popleft(), sent)
        report.put(("bulk_producer", number, count, first, time.monotonic_ns()))
    finally:
        p.shutdown()


def _settle(entry: tuple[int, Any], sent: Synchronized[int]) -> None:
    n, future = entry
    future.result(30)
    with sent.get_lock():
        sent.value += n


def bulk_consumer(
    target: Target,
    number: int,
    expected: int,
    ready: Barrier,
    received: Synchronized[int],
    stop: Event,
    report: mp.Queue[Any],
) -> None:
    """Pull this member's share of the queues as columns (nothing decoded per message) until
    every consumer together has ``expected`` messages; the queues of a cluster are sorted by
    (broker, queue id), so each member reads some of every broker's."""
    pc = PullConsumer("demo-bulk", **target).start()
    try:
        mine = sorted(pc.fetch_queues(BULK_TOPIC), key=lambda mq: (mq.broker_name, mq.queue_id))[number::CONSUMERS]
        offsets = dict.fromkeys(mine, 0)
        per_broker = dict.fromkeys(sorted({mq.broker_name for mq in mine}), 0)
        got = 0
        first = last = 0
        ready.wait(60)
        while received.value < expected and not stop.is_set():
            k = 0
            for i, mq in enumerate(mine):
                # a short long-poll on the first queue when the last sweep found nothing: an idle
                # consumer sleeps instead of spinning
                res = pc.pull_batch(mq, offset=offsets[mq], max_nums=1024, timeout=0.05 if i == 0 and not k else 0)
                if res.next_offset != offsets[mq]:
                    offsets[mq] = res.next_offset
                    pc.commit(mq, res.next_offset)
                if res.batch is not None and len(res.batch):
                    n = int(np.count_nonzero(res.batch.body_len == SIZE))
                    per_broker[mq.broker_name] += n
                    k += n
            if k:
                last = time.monotonic_ns()
                first = first or last
                got += k
                with received.get_lock():
                    received.value += k
        report.put(("bulk_split", number, per_broker, [(mq.broker_name, mq.queue_id) for mq in mine]))
        report.put(("bulk_consumer", number, got, first, last))
    finally:
        pc.shutdown()


def latency_producer(target: Target, count: int, rate: float, listening: Event, report: mp.Queue[Any]) -> None:
    """Warm-up messages until the listener has one, then ``count`` sync sends at ``rate`` per
    second, each body led by ``time.monotonic_ns()`` read just before the call."""
    p = Producer("demo-latency", **target).start()
    try:
        deadline = time.monotonic() + 30
        while not listening.is_set() and time.monotonic() < deadline:
            p.send(Message(LATENCY_TOPIC, WARMUP))
            listening.wait(0.05)
        pad = bytes(SIZE - 8)
        start = time.perf_counter()
        for i in range(count):
            left = start + i / rate - time.perf_counter()
            if left > 0:
                time.sleep(left)  # sleeps, so the listener finds nothing waiting and parks
            p.send(Message(LATENCY_TOPIC, time.monotonic_ns().to_bytes(8, "little") + pad))
        report.put(("latency_sent", count))
    finally:
        p.shutdown()


def latency_listener(target: Target, count: int, listening: Event, stop: Event, report: mp.Queue[Any]) -> None:
    """A PushConsumer whose listener notes each message's age as it gets it."""
    ages: list[int] = []

    def on_messages(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        now = time.monotonic_ns()
        for m in msgs:
            if len(m.body) == SIZE:
                ages.append(now - int.from_bytes(bytes(m.body[:8]), "little"))
            else:
                listening.set()
        return ConsumeResult.SUCCESS

    c = PushConsumer("demo-latency", **target, consume_from=ConsumeFrom.FIRST_OFFSET)
    c.subscribe(LATENCY_TOPIC, "*")
    c.register_listener(on_messages)
    c.start()
    try:
        reported = 0
        while len(ages) < count and not stop.is_set():
            time.sleep(0.1)
            if len(ages) > reported:
                report.put(("latency_progress", len(ages) - reported))
                reported = len(ages)
        report.put(("latency_ages", ages[:count]))
    finally:
        c.shutdown()


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def _failed(procs: Sequence[BaseProcess]) -> list[str]:
    return [f"{p.name} exit {p.exitcode}" for p in procs if p.exitcode not in (None, 0)]


def throughput(
    ctx: SpawnContext, target: Target, args: argparse.Namespace, console: Console, procs: list[BaseProcess]
) -> Figures:
    """Producers send batches while consumers pull columns; the rates of the steady phase."""
    total = args.producers * args.bulk_messages
    with Producer("demo-bulk-topic", **target) as p:  # the topic exists before consumers look it up
        p.send(Message(BULK_TOPIC, WARMUP))
    report: mp.Queue[Any] = ctx.Queue()
    ready = ctx.Barrier(args.producers + CONSUMERS)
    sent, received = ctx.Value("q", 0), ctx.Value("q", 0)
    stop = ctx.Event()
    mine = [
        ctx.Process(
            target=bulk_consumer, args=(target, i, total, ready, received, stop, report), name=f"bulk-consumer-{i}"
        )
        for i in range(CONSUMERS)
    ]
    mine += [
        ctx.Process(
            target=bulk_producer,
            args=(target, i, args.bulk_messages, args.batch, ready, sent, report),
            name=f"bulk-producer-{i}",
        )
        for i in range(args.producers)
    ]
    procs += mine
    for proc in mine:
        proc.start()
    ends: dict[str, list[tuple[int, int, int]]] = {"bulk_producer": [], "bulk_consumer": []}
    f = Figures()
    deadline = time.monotonic() + args.timeout
    with _progress(console) as progress:
        t_sent = progress.add_task("batches sent (messages)", total=total)
        t_recv = progress.add_task("columns pulled (messages)", total=total)
        while time.monotonic() < deadline and sum(map(len, ends.values())) < len(mine) and not _failed(mine):
            try:
                item = report.get(timeout=0.2)
            except queue.Empty:
                item = None
            if item is not None and item[0] == "bulk_split":
                for b, n in item[2].items():
                    f.per_broker[b] = f.per_broker.get(b, 0) + n
                f.queues[item[1]] = item[3]
            elif item is not None:
                kind, _, n, first, last = item
                ends[kind].append((n, first, last))
            progress.update(t_sent, completed=sent.value)
            progress.update(t_recv, completed=received.value)
    stop.set()
    for proc in mine:
        proc.join(10)
    f.failed = _failed(mine)
    prod, cons = ends["bulk_producer"], [e for e in ends["bulk_consumer"] if e[0]]
    f.sent = sum(n for n, _, _ in prod)
    f.received = sum(n for n, _, _ in ends["bulk_consumer"])
    if prod:
        f.send_ns = max(e[2] for e in prod) - min(e[1] for e in prod)
    if cons:
        f.receive_ns = max(e[2] for e in cons) - min(e[1] for e in cons)
    return f


def latency(
    ctx: SpawnContext, target: Target, args: argparse.Namespace, console: Console, procs: list[BaseProcess]
) -> Figures:
    """One producer's paced sends to a push listener in another process: the age of each on arrival."""
    report: mp.Queue[Any] = ctx.Queue()
    listening, stop = ctx.Event(), ctx.Event()
    mine = [
        ctx.Process(
            target=latency_listener,
            args=(target, args.latency_messages, listening, stop, report),
            name="latency-listener",
        ),
        ctx.Process(
            target=latency_producer,
            args=(target, args.latency_messages, args.rate, listening, report),
            name="latency-producer",
        ),
    ]
    procs += mine
    for proc in mine:
        proc.start()
    f = Figures()
    deadline = time.monotonic() + args.timeout
    with _progress(console) as progress:
        task = progress.add_task(f"paced sends, {args.rate:,.0f}/s (heard)", total=args.latency_messages)
        while time.monotonic() < deadline and not f.latencies_ns and not _failed(mine):
            try:
                item = report.get(timeout=0.2)
            except queue.Empty:
                continue
            if item[0] == "latency_progress":
                progress.advance(task, item[1])
            elif item[0] == "latency_sent":
                f.sent = item[1]
            else:
                f.latencies_ns = item[1]
    stop.set()
    for proc in mine:
        proc.join(10)
    while not f.sent:  # the producer's count may come after the listener's ages
        try:
            item = report.get(timeout=0.5)
        except queue.Empty:
            break
        if item[0] == "latency_sent":
            f.sent = item[1]
    f.received = len(f.latencies_ns)
    f.failed = _failed(mine)
    return f
