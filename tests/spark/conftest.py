"""Spark tests: one local SparkSession for the whole test run (starting a JVM costs seconds),
real broker processes writing real stores, and the same leak checks as the broker tests.

The session is created on first use, so a run that selects no Spark test never starts a JVM.
Without pyspark/pyarrow or a Java runtime these tests skip and say why (`make test` installs
both).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator

import pytest

from tests.ipc_tracking import ipc_tracker  # noqa: F401 (autouse fixture)
from tests.process.broker.conftest import broker_name, store_dir  # noqa: F401 (the broker tests' fixtures)

pytest.importorskip("pyspark", reason="the spark extra is not installed (make .venv/.installed-spark)")
pytest.importorskip("pyarrow", reason="the spark extra is not installed (make .venv/.installed-spark)")

SMALL = {
    "mappedFileSizeCommitLog": 4 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 1024,
    "maxHashSlotNum": 1009,
    "maxIndexNum": 40000,
}


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """local[2], UI off, log level ERROR, pushdown on; tests that change a conf set it back."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (make test installs openjdk-17-jre-headless)")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must run this venv's Python
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import shmq.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("shmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.extraJavaOptions", "-Dlog4j.rootLogger=ERROR")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(shmq.spark.ShmqDataSource)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def config() -> dict:
    return dict(SMALL)
