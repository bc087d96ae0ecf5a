"""scan.py: what a store (or every store of a cluster's store root) holds, per topic, and how
far behind each consumer group is."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from shmq.spark.layout import parse_topic_option
from shmq.spark.stores import open_stores
from shmq_jobs import render
from shmq_jobs.lag import lag_for_stores
from shmq_jobs.session import job_parser, job_session, run_job, topic_option, wide_console
from shmq_jobs.summary import topic_summaries


def parser() -> argparse.ArgumentParser:
    ap = job_parser(
        "scan.py",
        (
            "Per-topic counts, bytes, store time range, top tags and keys of a shmq store (read with Spark, "
            "no broker needed), and the consumer lag of every group that committed offsets."
        ),
        with_out=False,
    )
    ap.add_argument("--top", type=int, default=5, help="tags and keys shown per topic (default 5)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    return ap


def main(argv: list[str] | None = None, spark: Any = None, console: Console | None = None) -> int:
    """Run the scan; `spark`: an existing session to use (left running), else one is made."""
    args = parser().parse_args(argv)
    topics = parse_topic_option(args.topic)
    stores = open_stores(args.store)  # before Spark starts: a wrong path is a one-line error
    store = stores.path
    with job_session("shmq-scan", args.master, spark) as session:
        df = session.read.format("shmq").options(**topic_option(topics)).load(store)
        summaries = topic_summaries(df, args.top)
    lags, problems = lag_for_stores(stores.stores(), topics)
    out = console or wide_console()
    if args.json:
        out.file.write(render.to_json(render.report(store, summaries, lags, problems)) + "\n")
    else:
        render.print_report(out, store, summaries, lags, problems)
    return 0


def run() -> int:
    """The script's entry point (session.run_job)."""
    return run_job("scan.py", main)
