"""Every snippet of the user docs (README.md, docs/**/*.md) runs as written, one test per page.

The convention is in pages.py: a page's ```python blocks run in order in one fresh process
(cwd and HOME a fresh temp dir, SHMQ_BROKER a unique name, 120 s), which must exit 0 with no
traceback on stderr; `shmq ...` lines of shell blocks must parse. A page's processes, its
broker's IPC objects, its client semaphores and its temp dir are gone when its test ends.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile

import pytest

import shmq
from tests.docs.pages import Page, page_paths, parse_error, parse_page, shmq_command_lines
from tests.docs.runner import PageRun, run_page
from tests.ipc_tracking import IpcTracker, client_semaphores


def _spark_missing() -> str | None:
    """Why a Spark page cannot run here, None if it can."""
    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (make .venv/.installed-spark)"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (make test installs openjdk-17-jre-headless)"
    return None


@pytest.mark.parametrize("path", page_paths())
def test_page_snippets_run(path: str, ipc_tracker: IpcTracker, monkeypatch: pytest.MonkeyPatch) -> None:
    page = parse_page(path)
    refused = [
        f"{path}:{line}: `{cmd}`: {why}"
        for line, cmd in shmq_command_lines(page)
        if (why := parse_error(cmd)) is not None
    ]
    assert not refused, "shmq refuses these command lines:\n" + "\n".join(refused)
    if not page.python:
        return
    if "spark" in page.markers and (why := _spark_missing()) is not None:
        pytest.skip(f"{path} has Spark snippets: {why}")
    tmp = tempfile.mkdtemp(prefix="shmq-snippets-")
    try:
        name = ipc_tracker.name("doc")
        store = ipc_tracker.store(os.path.join(tmp, "store"))
        run = _run(page, tmp, name, store, monkeypatch)
        _check(page, run)
        assert client_semaphores(store) == [], "client liveness semaphores left"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(page: Page, tmp: str, name: str, store: str, monkeypatch: pytest.MonkeyPatch) -> PageRun:
    """The page's blocks, with a broker around them if the page says it needs one (started the
    way a user starts it: named by SHMQ_BROKER alone)."""
    if "broker" not in page.markers:
        return run_page(page, tmp, name, store)
    monkeypatch.setenv("SHMQ_BROKER", name)
    with shmq.Broker(store):
        return run_page(page, tmp, name, store)


def _check(page: Page, run: PageRun) -> None:
    where = f"{page.path}, output:\n{run.stdout[-3000:]}\nstderr:\n{run.stderr[-6000:]}"
    assert run.returncode is not None, f"timed out; {where}"
    assert run.returncode == 0, f"exit status {run.returncode}; {where}"
    assert "Traceback (most recent call last)" not in run.stderr, f"a traceback; {where}"
    assert not run.stragglers, f"processes left running after the page ended; {where}"
    if page.path == "README.md":
        _check_readme_use(page, run)


def _check_readme_use(page: Page, run: PageRun) -> None:
    """The Use section's first block sends, consumes what it sent, and says nothing on stderr
    (it used to end with errors: the consumer outlived the broker)."""
    use = next(i for i, b in enumerate(page.python) if b.heading == "Use")
    out, err = run.block_out[use], run.block_err[use]
    assert err == "", err
    assert out.splitlines()[0].startswith("SendStatus.SEND_OK "), out
    assert "consumed Orders TagA order-1 b'body'" in out, out
