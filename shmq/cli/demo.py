"""`shmq demo` (and `make demo`): what shmq is, in three phases on one broker (or, with
`--brokers N`, a cluster of a name server and N brokers), each process its own.

1. checks: tagged messages sent in batches and one by one, a clustering group, a broadcasting
   group with a tag filter and an orderly consumer; every message must arrive, each broadcast
   member must see every TagA message, and each order's steps must arrive in order;
2. throughput: producers send MessageBatch batches (a few in flight) while pull consumers read
   columns; the send and consume rates of the steady phase, process start-up left out;
3. latency: one producer sends at a steady pace (one message per ms by default, never a
   backlog) to a PushConsumer listener in another process; how long after its send each
   message reached the listener.

On a cluster every client attaches through the name server, and the summary also shows the
split: the messages consumed from each broker and the queues each pull consumer read.
The summary says what each figure is; the demo exits 0 when every check passed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import tempfile
from multiprocessing.process import BaseProcess

from rich.console import Console
from rich.table import Table

from shmq.cli import demo_cluster, demo_speed
from shmq.cli.demo_checks import STEPS_TOPIC, TOPIC, run_checks
from shmq.cli.help_format import ParagraphHelpFormatter
from shmq.errors import ShmqError


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The demo's options, shared by `shmq demo` and tools/demo.py (`make demo DEMO_ARGS=...`)."""
    ap.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="brokers to serve the demo; above 1, a cluster: a name server and that many brokers",
    )
    ap.add_argument("--producers", type=int, default=3, help="producer processes of the checks and throughput phases")
    ap.add_argument("--messages", type=int, default=20_000, help="per producer, checks phase")
    ap.add_argument("--orders", type=int, default=50, help="order ids of the ordered producer, checks phase")
    ap.add_argument("--steps", type=int, default=20, help="steps per order, checks phase")
    ap.add_argument("--batch", type=int, default=128, help="messages per batch")
    ap.add_argument("--bulk-messages", type=int, default=200_000, help="per producer, throughput phase")
    ap.add_argument("--latency-messages", type=int, default=2_000, help="paced sends of the latency phase")
    ap.add_argument("--rate", type=float, default=1_000, help="sends per second of the latency phase")
    ap.add_argument("--timeout", type=float, default=180, help="seconds each phase may take")
    ap.add_argument("--keep", action="store_true", help="keep the store directory")
    ap.add_argument(
        "--store",
        help="make the store in this directory (absent or empty; kept afterwards, "
        "e.g. for `make spark`) instead of a temporary one",
    )


def main(argv: list[str] | None = None) -> int:
    """tools/demo.py's entry point: the same options as `shmq demo`."""
    ap = argparse.ArgumentParser(prog="demo", description=__doc__, formatter_class=ParagraphHelpFormatter)
    add_arguments(ap)
    return run(ap.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run the demo with parsed options; 0 when every check of the summary passes."""
    console = Console()
    for option in ("brokers", "producers", "messages", "orders", "steps", "batch", "bulk_messages", "latency_messages"):
        if getattr(args, option) < 1:
            console.print(f"[bold red]--{option.replace('_', '-')} {getattr(args, option)}[/]: must be 1 or more")
            return 2
    if args.rate <= 0:
        console.print(f"[bold red]--rate {args.rate}[/]: must be above 0")
        return 2
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
    procs: list[BaseProcess] = []
    console.rule("[bold]shmq demo")
    ok = False
    try:
        config = {"flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": 64 << 20}
        topics = (TOPIC, STEPS_TOPIC, demo_speed.BULK_TOPIC, demo_speed.LATENCY_TOPIC)
        with demo_cluster.serving(store, name, config, args.brokers, topics) as target:
            console.print(f"store: {store}   {demo_cluster.describe(target, args.brokers)}")
            console.rule("1. checks: tags, batches, broadcast, order")
            rows, ok = run_checks(ctx, target, store, args, console, procs)
            console.rule("2. throughput: batch sends, column pulls")
            bulk = demo_speed.throughput(ctx, target, args, console, procs)
            console.rule("3. latency: paced sends to a push listener")
            lat = demo_speed.latency(ctx, target, args, console, procs)
        rows += _speed_rows(args, bulk, lat)
        if args.brokers > 1:
            rows += demo_cluster.split_rows(bulk.per_broker, bulk.queues)
        ok = ok and _speed_ok(args, bulk, lat)
        used = sum(os.stat(os.path.join(d, f)).st_blocks * 512 for d, _, fs in os.walk(store) for f in fs)
        rows.append(
            (
                "store",
                (
                    f"{store} ({used / 2**20:.1f} MiB on disk in {_layout(name, args.brokers)}; "
                    "segments are pre-allocated sparse files)"
                ),
            )
        )
        table = Table(title="summary", show_header=True)
        table.add_column("what")
        table.add_column("result")
        for row in rows:
            table.add_row(*row)
        console.print(table)
        console.print("[bold green]PASS[/]: every message arrived" if ok else "[bold red]FAIL[/]: see the summary")
    except ShmqError as e:  # the broker or cluster did not come up, or the routes did not
        console.print(f"[bold red]FAIL[/]: {e}")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(5)
        if args.keep:
            console.print(f"store kept at {store}")
        else:
            shutil.rmtree(store, ignore_errors=True)
    return 0 if ok else 1


def _layout(name: str, brokers: int) -> str:
    """Where the store's files are: one store, or one per broker of the cluster."""
    dirs = "commitlog/, consumequeue/, index/, config/"
    if brokers == 1:
        return dirs
    return f"a store per broker ({name}-b0/ to {name}-b{brokers - 1}/), each with {dirs}"


def _rate(messages: int, ns: int) -> str:
    if ns <= 0:
        return "no figure (nothing timed)"
    per_s = messages / (ns / 1e9)
    return f"{per_s:,.0f} msgs/s, {per_s * demo_speed.SIZE / 1e6:,.1f} MB/s"


def _speed_rows(args: argparse.Namespace, bulk: demo_speed.Figures, lat: demo_speed.Figures) -> list[tuple[str, str]]:
    total = args.producers * args.bulk_messages
    rows = [
        (
            "throughput: sends",
            (
                f"{_rate(bulk.sent, bulk.send_ns)}: {bulk.sent:,} messages of {demo_speed.SIZE} B "
                f"from {args.producers} producer{'s' * (args.producers > 1)} in batches of {args.batch}, "
                f"{demo_speed.IN_FLIGHT} in flight each, from the first send to the last "
                f"acknowledgement ({bulk.send_ns / 1e9:.2f} s, processes already started)"
            ),
        ),
        (
            "throughput: consumes",
            (
                f"{_rate(bulk.received, bulk.receive_ns)}: {demo_speed.CONSUMERS} pull consumers "
                f"reading columns, from the first message received to the last "
                f"({bulk.receive_ns / 1e9:.2f} s)"
            ),
        ),
        ("throughput: arrived", f"{bulk.received:,} of {total:,} sent"),
    ]
    ages = sorted(lat.latencies_ns)
    if ages:
        pick = [ages[min(len(ages) - 1, int(q * len(ages)))] / 1e6 for q in (0.5, 0.99)] + [ages[-1] / 1e6]
        rows.append(
            (
                "latency: send → listener",
                (
                    f"p50 {pick[0]:.2f} ms, p99 {pick[1]:.2f} ms, max {pick[2]:.2f} ms: {len(ages):,} messages sent "
                    f"one at a time, {args.rate:,.0f} per second, by one producer; the time from just before each "
                    "send to its arrival in a push consumer's listener in another process"
                ),
            )
        )
    else:
        rows.append(("latency: send → listener", "no figure: the listener heard nothing"))
    rows.append(("latency: arrived", f"{lat.received:,} of {args.latency_messages:,} sent"))
    failed = bulk.failed + lat.failed
    if failed:
        rows.append(("process failures", ", ".join(failed)))
    return rows


def _speed_ok(args: argparse.Namespace, bulk: demo_speed.Figures, lat: demo_speed.Figures) -> bool:
    """Every message of both phases arrived, and no process of theirs failed (speed is never checked)."""
    return (
        bulk.sent == bulk.received == args.producers * args.bulk_messages
        and lat.received == args.latency_messages
        and not bulk.failed + lat.failed
    )
