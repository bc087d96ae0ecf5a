"""`shmq demo` (and `make demo`): a broker, producer and consumer processes, live progress, a verified summary.

What runs, each in its own OS process:
  - a broker on a temporary store (shmq.Broker);
  - PRODUCERS producers sending tagged messages (TagA / TagB) to topic DemoOrders, in batches
    and one by one;
  - one producer sending ordered messages: for each order id, steps 0..STEPS-1 to topic
    DemoSteps, routed by a hash selector so an order's steps share a queue;
  - a CLUSTERING push-consumer group of two members on DemoOrders (each message to one member);
  - a BROADCASTING push-consumer group of two members on DemoOrders with the filter "TagA"
    (every TagA message to both);
  - an orderly push consumer on DemoSteps.
Every consumer reports what it received; the summary checks that nothing was lost, that the
broadcast members each saw every TagA message, and that every order's steps arrived in order.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
import os
import queue
import shutil
import struct
import tempfile
import time
from collections import defaultdict
from typing import Any, Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import shmq
from shmq import ConsumeContext, ConsumeFrom, ConsumeResult, Message, MessageExt, MessageModel, Producer, PushConsumer
from shmq import SelectMessageQueueByHash

TOPIC = "DemoOrders"
STEPS_TOPIC = "DemoSteps"
_ID = struct.Struct("<IIQ")  # producer number, sequence, send time (ns)


def produce(broker: str, number: int, count: int, batch: int, report: "mp.Queue[Any]") -> None:
    """Send `count` messages, the first half in batches, the rest one by one (async)."""
    p = Producer(f"demo-producer-{number}", broker=broker).start()
    try:
        sent = 0
        half = count // 2
        while sent < half:
            n = min(batch, half - sent)
            msgs = [Message(TOPIC, _ID.pack(number, sent + i, time.time_ns()) + b"." * 84,
                            tags="TagA" if (sent + i) % 2 else "TagB", keys=f"p{number}-{sent + i}")
                    for i in range(n)]
            p.send_batch(msgs)
            sent += n
            report.put(("sent", n))
        futures = []
        for seq in range(half, count):
            futures.append(p.send_async(Message(TOPIC, _ID.pack(number, seq, time.time_ns()) + b"." * 84,
                                                tags="TagA" if seq % 2 else "TagB", keys=f"p{number}-{seq}")))
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


def produce_steps(broker: str, orders: int, steps: int, report: "mp.Queue[Any]") -> None:
    """For each order, its steps in sequence, all to the queue the order id hashes to."""
    p = Producer("demo-steps", broker=broker).start()
    try:
        for step in range(steps):
            for order in range(orders):
                p.send(Message(STEPS_TOPIC, struct.pack("<II", order, step), tags="Step"),
                       selector=SelectMessageQueueByHash(), arg=order)
            report.put(("steps_sent", orders))
    finally:
        p.shutdown()


def consume(broker: str, role: str, member: int, report: "mp.Queue[Any]", stop: Event, offsets: str) -> None:
    """A push consumer: reports every message id it gets, in batches, until told to stop.

    Broadcast members keep their offsets under ``offsets`` (in the demo's store, not in
    ~/.shmq); their default instance names are unique and their files go at shutdown."""
    if role == "steps":
        c = PushConsumer("demo-steps", broker=broker, consume_from=ConsumeFrom.FIRST_OFFSET)
        c.subscribe(STEPS_TOPIC, "*")
    else:
        model = MessageModel.CLUSTERING if role == "cluster" else MessageModel.BROADCASTING
        c = PushConsumer(f"demo-{role}", broker=broker, model=model, consume_from=ConsumeFrom.FIRST_OFFSET,
                         consume_message_batch_max_size=32, offset_store_dir=offsets)
        c.subscribe(TOPIC, "*" if role == "cluster" else "TagA")
    pending: list[tuple[int, ...]] = []

    def on_messages(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeResult:
        now = time.time_ns()
        for m in msgs:
            if role == "steps":
                pending.append(struct.unpack("<II", bytes(m.body[:8])))
            else:
                number, seq, born = _ID.unpack(bytes(m.body[:16]))
                pending.append((number, seq, now - born))
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


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The demo's options, shared by `shmq demo` and tools/demo.py (`make demo DEMO_ARGS=...`)."""
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--messages", type=int, default=20_000, help="per producer")
    ap.add_argument("--orders", type=int, default=50)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--keep", action="store_true", help="keep the store directory")
    ap.add_argument("--store", help="make the store in this directory (absent or empty; kept afterwards, "
                                    "e.g. for `make spark`) instead of a temporary one")


def main(argv: list[str] | None = None) -> int:
    """tools/demo.py's entry point: the same options as `shmq demo`."""
    ap = argparse.ArgumentParser(prog="demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    return run(ap.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run the demo with parsed options; 0 when every check of the summary passes."""
    console = Console()
    if args.store:
        if os.path.isdir(args.store) and os.listdir(args.store):
            console.print(f"[bold red]--store {args.store}[/]: not empty (the demo counts on a store of its own)")
            return 2
        os.makedirs(args.store, exist_ok=True)
        store, args.keep = os.path.abspath(args.store), True
    else:
        store = tempfile.mkdtemp(prefix="shmq-demo-")
    name = f"demo{os.getpid()}"
    ctx = mp.get_context("spawn")
    report: "mp.Queue[Any]" = ctx.Queue()
    stop = ctx.Event()
    total = args.producers * args.messages
    tag_a = sum(1 for s in range(args.messages) if s % 2) * args.producers
    steps_total = args.orders * args.steps
    got: dict[str, dict[int, list[Any]]] = {r: defaultdict(list) for r in ("cluster", "broadcast", "steps")}
    procs: list[BaseProcess] = []
    console.rule("[bold]shmq demo")
    console.print(f"store: {store}   broker name: {name}")
    ok = False
    try:
        with shmq.Broker(store, name=name, config={"flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": 64 << 20}):
            offsets = os.path.join(store, "consumer-offsets")
            consumers: list[BaseProcess] = [
                ctx.Process(target=consume, args=(name, role, m, report, stop, offsets), name=f"{role}-{m}")
                for role, members in (("cluster", 2), ("broadcast", 2), ("steps", 1)) for m in range(members)]
            producers: list[BaseProcess] = [
                ctx.Process(target=produce, args=(name, i, args.messages, args.batch, report), name=f"producer-{i}")
                for i in range(args.producers)]
            producers.append(ctx.Process(target=produce_steps, args=(name, args.orders, args.steps, report),
                                         name="steps-producer"))
            procs = consumers + producers
            for p in consumers:
                p.start()
            t0 = time.perf_counter()
            for p in producers:
                p.start()
            sent = steps_sent = 0
            send_done = None
            with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=console) as progress:
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
                    if sent == total and send_done is None:
                        send_done = time.perf_counter()
                    cl = len({(n, s) for m in got["cluster"].values() for n, s, _ in m})
                    progress.update(t_sent, completed=sent)
                    progress.update(t_steps, completed=steps_sent)
                    progress.update(t_cl, completed=cl)
                    for m in range(2):
                        progress.update(t_bc[m], completed=len({(n, s) for n, s, _ in got["broadcast"][m]}))
                    progress.update(t_st, completed=len(got["steps"][0]))
                    if (cl == total and all(len({(n, s) for n, s, _ in got["broadcast"][m]}) == tag_a for m in range(2))
                            and len(got["steps"][0]) >= steps_total):
                        break
                    if any(p.exitcode not in (None, 0) for p in procs):
                        break
            recv_done = time.perf_counter()
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
            ok = _summary(console, args, got, total, tag_a, steps_total, t0, send_done, recv_done, procs, store)
    finally:
        stop.set()
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(5)
        if args.keep:
            console.print(f"store kept at {store}")
        else:
            shutil.rmtree(store, ignore_errors=True)
    return 0 if ok else 1


def _summary(console: Console, args: argparse.Namespace, got: dict[str, dict[int, list[Any]]], total: int,
             tag_a: int, steps_total: int, t0: float, send_done: float | None, recv_done: float,
             procs: list[BaseProcess], store: str) -> bool:
    cluster = [(n, s, lat) for m in got["cluster"].values() for n, s, lat in m]
    cluster_ids = {(n, s) for n, s, _ in cluster}
    expected = {(n, s) for n in range(args.producers) for s in range(args.messages)}
    expected_a = {(n, s) for n, s in expected if s % 2}
    lost = len(expected - cluster_ids)
    dups = len(cluster) - len(cluster_ids)
    bc_ok = all({(n, s) for n, s, _ in got["broadcast"][m]} == expected_a for m in range(2))
    last_step: dict[int, int] = {}
    in_order = True
    for order, step in got["steps"][0]:
        if step < last_step.get(order, -1):
            in_order = False
        last_step[order] = max(step, last_step.get(order, -1))
    steps_ok = in_order and len({tuple(x) for x in got["steps"][0]}) == steps_total
    lats = sorted(lat for _, _, lat in cluster)
    pct: Callable[[float], float] = ((lambda q: lats[min(len(lats) - 1, int(q * len(lats)))] / 1e6) if lats
                                     else (lambda q: float("nan")))
    send_s = (send_done or recv_done) - t0
    t = Table(title="summary", show_header=True)
    t.add_column("check")
    t.add_column("result")
    t.add_row("messages sent", f"{total:,} by {args.producers} producers in {send_s:.2f} s "
                               f"({total / send_s:,.0f} msgs/s, process start-up included)")
    t.add_row("clustering group (2 members)", f"{len(cluster_ids):,} distinct, {lost} lost, {dups} duplicates, "
                                              f"split {[len(v) for v in got['cluster'].values()]}")
    t.add_row("broadcast group (TagA, 2 members)", f"each got all {tag_a} TagA messages" if bc_ok else
              f"MISSING: got {[len(v) for v in got['broadcast'].values()]} of {tag_a}")
    t.add_row("ordered steps", f"{len(got['steps'][0]):,} of {steps_total:,}, in order per order id: {in_order}")
    t.add_row("end-to-end latency (clustering)", f"p50 {pct(0.5):.2f} ms, p99 {pct(0.99):.2f} ms")
    t.add_row("end to end", f"all received {recv_done - t0:.2f} s after the first send")
    used = sum(os.stat(os.path.join(d, f)).st_blocks * 512 for d, _, fs in os.walk(store) for f in fs)
    t.add_row("store", f"{store} ({used / 2**20:.1f} MiB on disk in commitlog/, consumequeue/, index/, config/; "
                       "segments are pre-allocated sparse files)")
    offsets = os.path.join(store, "consumer-offsets")
    left = [os.path.join(d, f) for d, _, fs in os.walk(offsets) for f in fs]
    t.add_row("broadcast offset files left", ", ".join(left) if left else "none (default instance names are "
                                                                           "per process; their files go at shutdown)")
    failed = [f"{p.name} exit {p.exitcode}" for p in procs if p.exitcode not in (None, 0)]
    if failed:
        t.add_row("process failures", ", ".join(failed))
    console.print(t)
    ok = lost == 0 and bc_ok and steps_ok and not failed and not left
    console.print("[bold green]PASS[/]: every message arrived" if ok else "[bold red]FAIL[/]: see the summary")
    return ok

