"""``make bench`` restricted to its replicated rows gives shmq numbers for SYNC_MASTER and ASYNC_MASTER.

Runs ``python -m tools.bench.suite --quick --only shmq --workloads replicated`` (about 20 s: two
master/replica pairs on loopback, the SYNC_FLUSH and plain brokers the adapter always starts).
Regression: the SYNC_MASTER pair was named ``bench<pid>s``, the SYNC_FLUSH broker's name, so its
master refused to start ("already running") and the sync row only ever said "failed".
"""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path

import pytest

from shmq.ring import shm
from tools.bench.suite.runner import selected, workloads
from tools.bench.suite.settings import settings

ROOT = Path(__file__).resolve().parents[2]


def test_workload_words_select_by_substring_and_none_selects_all():
    wl = workloads(settings(True))
    keys = [k for k, _, _ in selected(wl, ["replicated"])]
    assert keys == ["replicated sync 8 senders 100B", "replicated async 8 senders 100B"]
    assert [k for k, _, _ in selected(wl, ["latency", "durable"])] == ["latency 100B", "durable 8 senders 100B"]
    assert selected(wl, None) == wl and selected(wl, []) == wl
    assert selected(wl, ["extras"]) == []


def test_replicated_rows_alone_give_shmq_numbers_for_both_roles(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tools.bench.suite",
            "--quick",
            "--only",
            "shmq",
            "--workloads",
            "replicated",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the suite stops what it started on SIGTERM
        out, _ = proc.communicate(timeout=60)
        pytest.fail(f"the replicated rows took over 150 s:\n{out[-3000:]}")
    finally:
        names = [f"bench{proc.pid}{suffix}" for suffix in ("", "s", "sm", "am", "smr", "amr")]
        left = [entry for name in names for entry in shm.remove_leftovers(name)]
    assert proc.returncode == 0, out[-3000:]
    assert not left, f"the suite left these in /dev/shm: {left}"
    (js,) = glob.glob(str(tmp_path / "*.json"))
    res = json.loads(Path(js).read_text())
    assert res["workloads"] == ["replicated"]
    assert sorted(res["results"]) == ["replicated async 8 senders 100B", "replicated sync 8 senders 100B"]
    for key, w in res["results"].items():
        e = w["systems"]["shmq"]
        assert e["runs"] and not e["errors"], (key, e["errors"])
        assert e["msgs_s"]["median"] > 0 and 0 < e["p50_us"]["median"] <= e["p99_us"]["median"]
    assert not res["extras"], "the queue-scaling and backlog extras run only with the word extras"
    assert f"broker bench{proc.pid}sm on" in out and f"broker bench{proc.pid}am on" in out
    (md,) = glob.glob(str(tmp_path / "*.md"))
    text = Path(md).read_text()
    assert "## Replication: a master with one replica" in text
    assert "## Throughput" not in text and "queue-count scaling" not in text
