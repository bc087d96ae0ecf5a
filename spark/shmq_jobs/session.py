"""The SparkSession a job runs in, and the `shmq` source registered on it."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console

PIPE_WIDTH = 120


@contextlib.contextmanager
def job_session(app_name: str, master: str | None, spark: Any = None) -> Iterator[Any]:
    """`spark` when given (a test's or a notebook's session: left running); else a session of
    its own, stopped on the way out. No `master` keeps what spark-submit was given (`--master`),
    or local[*] when the script runs under plain `python`."""
    if spark is not None:
        _register(spark)
        yield spark
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the executors' Python must have shmq
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if master:
        builder = builder.master(master)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    try:
        _register(session)
        yield session
    finally:
        session.stop()


def _register(spark: Any) -> None:
    import shmq.spark

    spark.dataSource.register(shmq.spark.ShmqDataSource)


def topic_option(topics: list[str] | None) -> dict[str, str]:
    """The `topic` option of the shmq source for `--topic` (none: every user topic)."""
    return {"topic": ",".join(topics)} if topics else {}


def wide_console() -> Console:
    """A console for the tables: a terminal's own width, else (a pipe, a log, make) PIPE_WIDTH
    columns rather than rich's 80, so topic and group names are not cut."""
    console = Console()
    return console if console.is_terminal else Console(width=PIPE_WIDTH)


def job_parser(prog: str, description: str, with_out: bool) -> argparse.ArgumentParser:
    """The arguments every job takes: STORE_DIR, OUT when it writes, --topic and --master."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument(
        "store",
        metavar="STORE_DIR",
        help="the directory a broker or replica was started with, or a cluster's store root (a directory of stores)",
    )
    if with_out:
        ap.add_argument("out", metavar="OUT", help="output directory or URL (file:, hdfs://, s3a://...)")
    ap.add_argument(
        "--topic",
        help="comma list of topics (default: every user topic; system topics such as %%RETRY%%group only when named)",
    )
    ap.add_argument("--master", help="Spark master (default: spark-submit's --master, else local[*])")
    return ap


def run_job(prog: str, main: Callable[[], int]) -> int:
    """A script's entry point: a path that is not a store or a bad topic name is one line and
    exit status 2 (no traceback, no Spark started)."""
    from shmq.errors import BadTopicError, NotAStoreError

    try:
        return main()
    except (NotAStoreError, BadTopicError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
