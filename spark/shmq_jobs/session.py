"""The SparkSession a job runs in, and the `shmq` source registered on it."""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator

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

    builder = (SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.showConsoleProgress", "false"))
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
