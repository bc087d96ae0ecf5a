"""Which Python interpreter Spark's Python workers run, so that they can import shmq.

Spark starts its Python workers with the interpreter the SparkContext read from PYSPARK_PYTHON
when it started (default: whatever `python3` is on PATH). Such an interpreter usually lacks
shmq and its dependencies, and every read then fails inside a worker with a long Py4J trace.
`spark.dataSource.register()` pickles the data source together with that interpreter's name
after calling the source's `name()` on the driver, so `name()` calls `use_shmq_python()` and
the choice is fixed where it still applies, whatever the order of session and import was.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from shmq.errors import ConfigError

# the interpreter the user chose for the workers, read before this package set its default
USER_CHOICE = os.environ.get("PYSPARK_PYTHON")
# a SparkContext created after this import reads it: the workers run this interpreter
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

_CHECK = "import shmq, numpy, pyarrow"
_CHECK_TIMEOUT_S = 60.0


def use_shmq_python() -> None:
    """On the driver: make the active SparkContext start workers that can import shmq.

    Without a user's choice the workers run this interpreter (as when shmq.spark was imported
    before the session started). A chosen interpreter is kept if it imports shmq, and refused
    with a ConfigError saying what to do if it does not. In a worker (no active session) this
    does nothing, nor with Spark Connect (the server starts the workers: no SparkContext here)."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None:
        return
    try:
        sc = session.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect raises PySparkNotImplementedError, a class it may not export
        return
    if _same_interpreter(sc.pythonExec):
        return
    if sc.pythonExec != USER_CHOICE:  # pyspark's default, not the user's choice
        sc.pythonExec = sys.executable
        return
    if not _imports_shmq(sc.pythonExec):
        raise ConfigError(
            f"Spark's Python workers run {sc.pythonExec} (PYSPARK_PYTHON), which cannot import "
            f"shmq: install shmq[spark] into it, or set PYSPARK_PYTHON={sys.executable} "
            "before creating the SparkSession"
        )


def _same_interpreter(exe: str) -> bool:
    """`exe` (a path or a name on PATH) is this interpreter. Symlinks are not followed: a
    virtual environment's python is a link to the base one, yet has other packages."""
    found = shutil.which(exe)
    return found is not None and os.path.abspath(found) == os.path.abspath(sys.executable)


def _imports_shmq(exe: str) -> bool:
    """`exe` imports shmq and what its reads need; True when that cannot be told in time."""
    try:
        done = subprocess.run(
            [exe, "-c", _CHECK],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=_CHECK_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return True
    except OSError:
        return False
    return done.returncode == 0
