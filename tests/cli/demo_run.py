"""A short `shmq demo` run from the console script, and the rows of its summary (shared by the
demo's tests: one broker in test_package.py, a cluster in test_demo_cluster.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

SHMQ = os.path.join(os.path.dirname(sys.executable), "shmq")
# 2 producers x 200 checked messages, 4 orders x 3 steps, 2 x 3,000 bulk messages, 200 paced at 500/s
SMALL = ["--producers", "2", "--messages", "200", "--orders", "4", "--steps", "3", "--bulk-messages", "3000"]
SMALL += ["--batch", "64", "--latency-messages", "200", "--rate", "500"]


def start(cwd: str, *args: str) -> subprocess.Popen[str]:
    """`shmq demo` with the small sizes and ``args``, in ``cwd``; its summary one line per row."""
    return subprocess.Popen(
        [SHMQ, "demo", *SMALL, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "400"},
    )


def summary_rows(stdout: str) -> dict[str, str]:
    """The summary table's rows: what -> result."""
    return {m.group(1).strip(): m.group(2) for m in re.finditer(r"^│ ([^│]+?) +│ (.+?) +│$", stdout, re.MULTILINE)}
