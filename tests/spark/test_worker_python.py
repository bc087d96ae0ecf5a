"""Spark's Python workers can import shmq whichever comes first, the session or `import
shmq.spark`; an interpreter the user chose that cannot is refused in one line at register().

Each test runs a user's script in a fresh Python with its own local[1] JVM (the shared session
of conftest.py has long imported shmq.spark). `python3` on the script's PATH, pyspark's default
worker, is this Python without its site-packages: it cannot import shmq's dependencies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import shmq
from shmq import Message, Producer

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "usual_order.py")


def _user_env(tmp_path) -> dict[str, str]:
    """The environment of a user who never set PYSPARK_PYTHON, whose `python3` lacks shmq."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (make test installs openjdk-17-jre-headless)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bare = bin_dir / "python3"
    bare.write_text(f'#!/bin/sh\nexec "{sys._base_executable}" -S "$@"\n')
    bare.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def test_session_first_then_import_reads_the_store(store_dir, broker_name, config, tmp_path) -> None:
    env = _user_env(tmp_path)
    with shmq.Broker(store_dir, name=broker_name, config=config):
        p = Producer("pg", broker=broker_name).start()
        try:
            for i in range(7):
                p.send(Message("Usual", b"m%d" % i))
        finally:
            p.shutdown()
    done = subprocess.run(
        [sys.executable, SCRIPT, store_dir], capture_output=True, text=True, timeout=240, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "7"


def test_chosen_python_without_shmq_is_refused_in_one_line(tmp_path) -> None:
    env = _user_env(tmp_path)
    env["PYSPARK_PYTHON"] = str(tmp_path / "bin" / "python3")
    done = subprocess.run(
        [sys.executable, SCRIPT, str(tmp_path / "unused")],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )
    assert done.returncode == 3, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert (
        last.startswith(
            f"Spark's Python workers run {env['PYSPARK_PYTHON']} (PYSPARK_PYTHON), which cannot import shmq"
        )
        and f"PYSPARK_PYTHON={sys.executable}" in last
    )
    assert "Traceback" not in done.stderr and "Py4J" not in done.stderr
