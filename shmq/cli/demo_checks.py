"""The demo's checks phase: tagged, batched and ordered messages through both consumer models.

What runs, each in its own OS process, on the demo's broker (or cluster):
  - PRODUCERS producers sending tagged messages (TagA / TagB) to topic DemoOrders, in batches
    and one by one;
  - one producer sending ordered messages: for each order id, steps 0..STEPS-1 to topic
    DemoSteps, routed by a hash selector so an order's steps share a queue;
  - a CLUSTERING push-consumer group of two members on DemoOrders (each message to one member);
  - a BROADCASTING push-consumer group of two members on DemoOrders with the filter "TagA"
    (every TagA message to both);
  - an orderly push consumer on DemoSteps.
Every consumer reports what it received; the checks are that nothing was lost or duplicated,
that the broadcast members each saw every TagA message, and that every order's steps arrived
in order. Nothing here is timed: the demo's measured phases are in demo_speed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import struct
import time
from collections import defaultdict
from multiprocessing.context import SpawnContext
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from typing import Any

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
    MessageExt,
    MessageModel,
    Producer,
    PushConsumer,
    SelectMessageQueueByHash,
)
from shmq.cli.demo_cluster import Target

TOPIC = "DemoOrders"
STEPS_TOPIC = "DemoSteps"
_ID = struct.Struct("<II")  # producer number, sequence
PAD = b"." * 92  # bodies of 100 bytes
Got = dict[str, dict[int, list[Any]]]


def produce(target: Target, number: int, count: int, batch: int, report: mp.Queue[Any]) -> None:
    """Send `count` messages, the first half in batches, the rest one by one (async)."""
    p = Producer(f"demo-producer-{number}", **target).start()
    try:
        sent = 0
        half = count // 2
        while sent < half:
            n = min(batch, half - sent)
            msgs = [
                Message(
                    TOPIC,
                    _ID.pack(number, sent + i) + PAD,
                    tags="TagA" if (sent + i) % 2 else "TagB",
                    keys=f"p{number}-{sent + i}",
                )
                for i in range(n)
            ]
            p.send_batch(msgs)
            sent += n
            report.put(("sent", n))
        futures = []
        for seq in range(half, count):
            futures.append(
                p.send_async(
                    Message(
                        TOPIC, _ID.pack(number, seq) + PAD, tags="TagA" if seq % 2 else "TagB", keys=f"p{number}-{seq}"
                    )
                )
            )
            if len(futures) >= 256:
                for f in futures:
                    f.result(10)
                report.put(("sent", len(futures)))
                futures = []
        for f in futures:
            f.result(10)
        report.put(("sent", len(futures)))
    finally:
        p.shutdown()


def produce_steps(target: Target, orders: int, steps: int, report: mp.Queue[Any]) -> None:
    """For each order, its steps in sequence, all to the queue the order id hashes to."""
    p = Producer("demo-steps", **target).start()
    try:
        for step in range(steps):
            for order in range(orders):
                p.send(
                    Message(STEPS_TOPIC, struct.pack("<II", order, step), tags="Step"),
                    selector=SelectMessageQueueByHash(),
                    arg=order,
                )
            report.put(("steps_sent", orders))
    finally:
        p.shutdown()


def consume(target: Target, role: str, member: int, report: mp.Queue[Any], stop: Event, offsets: str) -> None:
    """A push consumer: reports every message id it gets, in batches, until told to stop.

    Broadcast members keep their offsets under ``offsets`` (in the demo's store, not in
    ~/.shmq); their default instance names are unique and their files go at shutdown."""
    if role == "steps":
        c = PushConsumer("demo-steps", **target, consume_from=ConsumeFrom.FIRST_OFFSET)
        c.subscribe(STEPS_TOPIC, "*")
    else:
        model = MessageModel.CLUSTERING if role == "cluster" else MessageModel.BROADCASTING
        c = PushConsumer(
            f"demo-{role}",
            **target,
            model=model,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            consume_message_batch_max_size=32,
            offset_store_dir=offsets,
        )
        c.subscribe(TOPIC, "*" if role == "cluster" else "TagA")
    pending: list[tuple[int, ...]] = []

    def on_messages(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        # (order, step) or (producer, sequence)
        pending.extend(struct.unpack("<II", bytes(m.body[:8])) for m in msgs)
        return ConsumeResult.SUCCESS

    c.register_listener(on_messages, orderly=(role == "steps"))
    c.start()
    try:
        while not stop.is_set():
            time.sleep(0.1)
            if pending:
                chunk, pending[:] = list(pending), []
                report.put((role, member, chunk))
        time.sleep(0.2)
    finally:
        c.shutdown()
        if pending:
            report.put((role, member, list(pending)))


def run_checks(
    ctx: SpawnContext,
    target: Target,
    store: str,
    args: argparse.Namespace,
    console: Console,
    procs: list[BaseProcess],
) -> tuple[list[tuple[str, str]], bool]:
    """Start the phase's processes, show their progress, and check what the consumers got:
    the summary's rows and whether every check passed."""
    report: mp.Queue[Any] = ctx.Queue()
    stop = ctx.Event()
    total = args.producers * args.messages
    tag_a = sum(1 for s in range(args.messages) if s % 2) * args.producers
    steps_total = args.orders * args.steps
    got: Got = {r: defaultdict(list) for r in ("cluster", "broadcast", "steps")}
    offsets = os.path.join(store, "consumer-offsets")
    consumers: list[BaseProcess] = [
        ctx.Process(target=consume, args=(target, role, m, report, stop, offsets), name=f"{role}-{m}")
        for role, members in (("cluster", 2), ("broadcast", 2), ("steps", 1))
        for m in range(members)
    ]
    producers: list[BaseProcess] = [
        ctx.Process(target=produce, args=(target, i, args.messages, args.batch, report), name=f"producer-{i}")
        for i in range(args.producers)
    ]
    producers.append(
        ctx.Process(target=produce_steps, args=(target, args.orders, args.steps, report), name="steps-producer")
    )
    mine = consumers + producers
    procs += mine
    for p in mine:
        p.start()
    sent = steps_sent = 0
    with Progress(
        TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        t_sent = progress.add_task("sent", total=total)
        t_steps = progress.add_task("ordered steps sent", total=steps_total)
        t_cl = progress.add_task("clustering group received", total=total)
        t_bc = [progress.add_task(f"broadcast member {m} (TagA)", total=tag_a) for m in range(2)]
        t_st = progress.add_task("orderly consumer received", total=steps_total)
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            try:
                item = report.get(timeout=0.2)
            except queue.Empty:
                item = None
            if item is not None:
                if item[0] == "sent":
                    sent += item[1]
                elif item[0] == "steps_sent":
                    steps_sent += item[1]
                else:
                    got[item[0]][item[1]].extend(item[2])
            cl = len({x for m in got["cluster"].values() for x in m})
            bc = [len(set(got["broadcast"][m])) for m in range(2)]
            progress.update(t_sent, completed=sent)
            progress.update(t_steps, completed=steps_sent)
            progress.update(t_cl, completed=cl)
            for m in range(2):
                progress.update(t_bc[m], completed=bc[m])
            progress.update(t_st, completed=len(got["steps"][0]))
            if cl == total and bc == [tag_a, tag_a] and len(got["steps"][0]) >= steps_total:
                break
            if any(p.exitcode not in (None, 0) for p in mine):
                break
    stop.set()
    for p in consumers:
        p.join(10)
    while True:  # the last reports sent on the way out
        try:
            item = report.get(timeout=0.3)
        except queue.Empty:
            break
        if item[0] not in ("sent", "steps_sent"):
            got[item[0]][item[1]].extend(item[2])
    for p in producers:
        p.join(10)
    return _evaluate(args, got, steps_total, tag_a, mine, offsets)


def _evaluate(
    args: argparse.Namespace, got: Got, steps_total: int, tag_a: int, procs: list[BaseProcess], offsets: str
) -> tuple[list[tuple[str, str]], bool]:
    cluster = [(n, s) for m in got["cluster"].values() for n, s in m]
    cluster_ids = set(cluster)
    expected = {(n, s) for n in range(args.producers) for s in range(args.messages)}
    expected_a = {(n, s) for n, s in expected if s % 2}
    lost = len(expected - cluster_ids)
    dups = len(cluster) - len(cluster_ids)
    bc_ok = all(set(got["broadcast"][m]) == expected_a for m in range(2))
    last_step: dict[int, int] = {}
    in_order = True
    for order, step in got["steps"][0]:
        if step < last_step.get(order, -1):
            in_order = False
        last_step[order] = max(step, last_step.get(order, -1))
    steps_ok = in_order and len({tuple(x) for x in got["steps"][0]}) == steps_total
    producers = f"{args.producers} producer{'s' * (args.producers > 1)}"
    rows = [
        (
            "messages sent",
            (f"{len(expected):,} by {producers}, half in batches of {args.batch}, half one by one (async)"),
        ),
        (
            "clustering group (2 members)",
            (
                f"{len(cluster_ids):,} distinct, {lost} lost, {dups} duplicates, "
                f"split {[len(v) for v in got['cluster'].values()]}"
            ),
        ),
        (
            "broadcast group (TagA, 2 members)",
            f"each got all {tag_a:,} TagA messages"
            if bc_ok
            else f"MISSING: got {[len(v) for v in got['broadcast'].values()]} of {tag_a:,}",
        ),
        ("ordered steps", f"{len(got['steps'][0]):,} of {steps_total:,}, in order per order id: {in_order}"),
    ]
    left = [os.path.join(d, f) for d, _, fs in os.walk(offsets) for f in fs]
    rows.append(
        (
            "broadcast offset files left",
            ", ".join(left) if left else "none (default instance names are per process; their files go at shutdown)",
        )
    )
    failed = [f"{p.name} exit {p.exitcode}" for p in procs if p.exitcode not in (None, 0)]
    if failed:
        rows.append(("process failures", ", ".join(failed)))
    return rows, lost == 0 and bc_ok and steps_ok and not failed and not left
