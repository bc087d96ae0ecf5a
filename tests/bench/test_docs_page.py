"""docs/BENCHMARKS.md is what `make bench-docs` makes from the committed results JSON.

A hand edit of the page, or a JSON replaced without regenerating the page, fails here. The
page's reproduce commands are checked against the suite's own options and workload names.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import subprocess
import sys

from tools.bench import docs_page
from tools.bench.suite.__main__ import parser
from tools.bench.suite.runner import selected, workloads
from tools.bench.suite.settings import settings


def _results() -> dict:
    with open(docs_page.JSON_PATH) as f:
        return json.load(f)


def test_the_committed_page_is_the_one_the_committed_json_makes() -> None:
    page = docs_page.PAGE_PATH.read_text()
    assert docs_page.render(_results()) == page, "docs/BENCHMARKS.md is stale or edited by hand: run make bench-docs"


def test_check_tells_a_stale_page_apart(tmp_path) -> None:
    """`--check` exits 0 on the committed page and 1 on a page with one figure changed."""
    ok = subprocess.run(
        [sys.executable, "-m", "tools.bench.docs_page", "--check"],
        capture_output=True,
        text=True,
        check=False,
        cwd=docs_page.ROOT,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    edited = tmp_path / "BENCHMARKS.md"
    edited.write_text(docs_page.PAGE_PATH.read_text().replace("| shmq |", "| shmq (edited) |", 1))
    stale = subprocess.run(
        [sys.executable, "-m", "tools.bench.docs_page", "--check", "--out", str(edited)],
        capture_output=True,
        text=True,
        check=False,
        cwd=docs_page.ROOT,
        timeout=60,
    )
    assert stale.returncode == 1 and "run it" in stale.stdout, stale.stdout + stale.stderr


def test_the_page_says_nothing_of_history_or_of_anyones_machine() -> None:
    page = docs_page.PAGE_PATH.read_text()
    assert not re.search(r"\bissue\s*#?\d+", page, re.IGNORECASE)
    assert not re.search(r"\bround\s+\d+|\b(second|third) round\b", page, re.IGNORECASE)
    for path in ("/work/", "/tmp/", "/home/", "/root/"):
        assert path not in page
    assert "DESIGN.md" not in page
    assert "/tmp/" not in docs_page.JSON_PATH.read_text()  # the published JSON has no run log


def test_every_reproduce_command_runs_the_rows_it_stands_beside() -> None:
    """Each `python -m tools.bench.suite ...` on the page parses with the suite's options, names
    systems of the run, and selects at least one workload (or the extras)."""
    res = _results()
    commands = re.findall(r"`python -m tools\.bench\.suite([^`]*)`", docs_page.PAGE_PATH.read_text())
    assert len(commands) > 10
    every = workloads(settings(False))
    for tail in commands:
        args = parser().parse_args(shlex.split(tail))
        for name in args.only or []:
            assert name in res["systems"], tail
        if args.workloads:
            assert selected(every, args.workloads) or "extras" in args.workloads, tail


def test_every_system_and_workload_of_the_run_is_on_the_page() -> None:
    res = _results()
    page = docs_page.PAGE_PATH.read_text()
    for name in res["systems"]:
        assert f"| {name} |" in page
    for key in res["results"]:
        assert shlex.quote(key) in page, key
    assert res["machine"]["cpu"] in page
    assert f"load average (1 min) {res['machine']['load_average_1m_at_start']}" in page


def test_a_failed_or_missing_system_gets_a_reason_not_a_figure() -> None:
    res = copy.deepcopy(_results())
    entry = res["results"]["latency 100B"]["systems"]["mp.Queue"]
    entry.update(runs=[], errors=["RunError: timed out waiting for client0 on /tmp/shmq-bench.x1/s\nTraceback ..."])
    page = docs_page.render(res)
    row = next(line for line in page.splitlines() if line.startswith("| mp.Queue | failed: "))
    assert "timed out waiting for client0 on …" in row and "Traceback" not in row and "/tmp/" not in row
