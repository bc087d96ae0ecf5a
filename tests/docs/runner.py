"""Runs a page's python blocks in a fresh process (run_page.py) and collects what each block
printed; whatever the page started is ended with it, whether it finished or timed out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from shmq.ring.reclaim import reclaim_dead_broker
from tests.docs.pages import ROOT, Page
from tests.docs.run_page import MARKER

TIMEOUT_S = 120.0
GRACE_S = 30.0  # how long processes of a page may take to end after it exited
SPARK_TIMEOUT_S = 600.0  # a Spark page starts a JVM and Spark's Python workers: minutes on a loaded machine
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_page.py")


@dataclass
class PageRun:
    returncode: int | None  # None: timed out and killed
    stdout: str
    stderr: str
    stragglers: bool = False  # processes of the page were still running after it exited
    block_out: dict[int, str] = field(default_factory=dict)  # index of the block -> what it printed
    block_err: dict[int, str] = field(default_factory=dict)


def page_env(tmp: str, broker_name: str) -> dict[str, str]:
    """HOME and the broker name of the page; this checkout's shmq first on the Python path; this
    Python's environment first on PATH, as for a user whose environment is activated (Spark
    starts its Python workers as the `python3` on PATH)."""
    env = dict(os.environ, HOME=tmp, SHMQ_BROKER=broker_name)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", os.defpath)])
    env.pop("PYSPARK_PYTHON", None)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def run_page(page: Page, tmp: str, broker_name: str, store_dir: str) -> PageRun:
    """Run ``page``'s blocks with cwd ``tmp`` in a process group of their own, which is killed
    on timeout, and ended if anything of it outlives the page; a broker killed with it has its
    IPC objects removed."""
    spec = os.path.join(tmp, ".snippets.json")
    with open(spec, "w", encoding="utf-8") as f:
        json.dump([page.path, [[b.line, b.code] for b in page.python]], f)
    proc = subprocess.Popen(
        [sys.executable, DRIVER, spec],
        cwd=tmp,
        env=page_env(tmp, broker_name),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=SPARK_TIMEOUT_S if "spark" in page.markers else TIMEOUT_S)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, err = proc.communicate()
        code = None
    stragglers = _end_group(proc.pid)
    if code is None or stragglers:
        reclaim_dead_broker(broker_name, store_dir)
    return PageRun(code, out, err, stragglers, _by_block(out), _by_block(err))


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _end_group(pgid: int) -> bool:
    """Whether processes of the group outlived the page by more than ``GRACE_S`` (a JVM takes
    a while to notice its Python went); those get SIGTERM, then SIGKILL after 10 s."""
    if _group_gone(pgid, GRACE_S):
        return False
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    if not _group_gone(pgid, 10):
        _kill_group(pgid)
    return True


def _group_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _by_block(text: str) -> dict[int, str]:
    """What was printed after each block's marker, by block index."""
    parts: dict[int, str] = {}
    for chunk in text.split(MARKER)[1:]:
        index, _, rest = chunk.partition("\n")
        parts[int(index)] = rest
    return parts
