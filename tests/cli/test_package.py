"""What a user of an installed package meets first: the `shmq` console script (the wheel: tests/package)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import shmq
from shmq import _speedups
from tests.cli import demo_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the console script pip made next to this interpreter, as a user runs it (not `python -m shmq`)
SHMQ = os.path.join(os.path.dirname(sys.executable), "shmq")


def _shmq(*args: str, timeout: float = 30, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SHMQ, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_version_is_the_package_version() -> None:
    out = _shmq("--version")
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert line.startswith(f"shmq {shmq.__version__} (compiled paths: "), line
    built = _speedups.compiled("_record", "check_record") is not None
    assert ("paths: on)" in line) == built, line  # on exactly when the extension is built


def test_bare_shmq_prints_help_not_an_error() -> None:
    """Before: "the following arguments are required: command" and status 2."""
    out = _shmq()
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: shmq")
    for command in ("broker", "replica", "admin", "demo"):
        assert command in out.stdout
    assert out.stderr == ""


def test_demo_runs_from_the_console_script(tmp_path, ipc_tracker) -> None:
    """A short demo, run outside the source tree so only the installed package is importable;
    it passes its own checks, reports both measured phases with figures, and leaves its store
    where --store says. No figure is compared with a speed: only that each is there."""
    store = ipc_tracker.store(str(tmp_path / "store"))
    p = demo_run.start(str(tmp_path), "--timeout", "60", "--store", store)
    ipc_tracker.names.append(f"demo{p.pid}")  # the demo names its broker after its process
    stdout, stderr = p.communicate(timeout=240)
    assert p.returncode == 0, stdout + stderr
    assert "PASS: every message arrived" in stdout
    for phase in ("1. checks", "2. throughput", "3. latency"):
        assert phase in stdout
    rows = demo_run.summary_rows(stdout)
    assert re.match(r"[\d,]+ msgs/s, [\d,.]+ MB/s: 6,000 messages of 100 B from 2 producers", rows["throughput: sends"])
    assert re.match(r"[\d,]+ msgs/s, [\d,.]+ MB/s: 2 pull consumers", rows["throughput: consumes"])
    assert rows["throughput: arrived"] == "6,000 of 6,000 sent"
    assert re.match(
        r"p50 [\d.]+ ms, p99 [\d.]+ ms, max [\d.]+ ms: 200 messages sent one at a time, 500 per second",
        rows["latency: send → listener"],
    )
    assert rows["latency: arrived"] == "200 of 200 sent"
    assert rows["clustering group (2 members)"].startswith("400 distinct, 0 lost")
    assert rows["ordered steps"] == "12 of 12, in order per order id: True"
    assert os.path.isdir(os.path.join(store, "commitlog"))


def test_demo_refuses_a_phase_of_nothing() -> None:
    out = _shmq("demo", "--bulk-messages", "0")
    assert out.returncode == 2
    assert "--bulk-messages 0: must be 1 or more" in out.stdout and "Traceback" not in out.stdout + out.stderr


def test_demo_options_parse_the_same_as_tools_demo() -> None:
    """`make demo DEMO_ARGS=...` and `shmq demo ...` take the same options."""
    cli = _shmq("demo", "--help")
    tool = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "demo.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert cli.returncode == 0 and tool.returncode == 0, cli.stderr + tool.stderr
    for option in (
        "--producers",
        "--messages",
        "--orders",
        "--steps",
        "--batch",
        "--bulk-messages",
        "--latency-messages",
        "--rate",
        "--timeout",
        "--keep",
        "--store",
    ):
        assert option in cli.stdout and option in tool.stdout
