"""tools/bench/ha_bench.py: its lag arithmetic, and one short real run on two hosts (needs root)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.ha import hosts
from tools.bench.ha_bench import lag_stats

ROOT = Path(__file__).resolve().parents[2]


def test_lag_of_a_replica_a_constant_20_ms_behind():
    t = np.arange(0, 3, 0.005)  # 3 s sampled every 5 ms
    master = (t * 100e6).astype(np.int64)  # 100 MB/s
    acked = np.where(t >= 0.02, master[np.maximum(np.arange(len(t)) - 4, 0)], -1)  # 4 samples = 20 ms behind
    s = lag_stats(t, master, acked)
    assert s["lag_ms_p50"] == pytest.approx(20, abs=0.01) and s["lag_ms_p99"] == pytest.approx(20, abs=0.01)
    assert s["lag_bytes_p50"] == pytest.approx(2e6, rel=0.01)
    assert s["lag_bytes_p50_first_third"] == pytest.approx(s["lag_bytes_p50_last_third"], rel=0.01)
    assert s["lag_ms_p50_first_third"] == pytest.approx(20, abs=0.01) == s["lag_ms_p50_last_third"]
    assert s["ingest_mb_s"] == pytest.approx(100, rel=0.01)
    assert s["samples_never_acked"] == 4  # the last 20 ms were not acked when the run ended


def test_a_falling_behind_replica_shows_in_the_thirds_and_acks_going_back_count_as_the_best_so_far():
    t = np.arange(0, 3, 0.005)
    master = (t * 100e6).astype(np.int64)
    acked = (t * 50e6).astype(np.int64)  # half the speed: the lag grows
    acked[100] = 0  # a reconnecting replica's slot reads low for a moment
    s = lag_stats(t, master, acked)
    assert s["lag_bytes_p50_last_third"] > 4 * s["lag_bytes_p50_first_third"]
    assert s["lag_ms_p50_last_third"] > 2 * s["lag_ms_p50_first_third"]
    assert s["lag_bytes_p99"] <= 1.5e8
    assert s["samples_never_acked"] > len(t) // 3


def test_only_the_samples_while_the_master_moves_count():
    """The load's start and shutdown (master idle, replica at its end) do not dilute the figures."""
    t = np.arange(0, 4, 0.005)
    moving = (t >= 0.5) & (t < 3.5)  # 0.5 s of imports before, 0.5 s of shutdown after
    master = (np.clip(t, 0.5, 3.5) - 0.5) * 100e6
    master = master.astype(np.int64)
    acked = np.concatenate([master[:4], master[:-4]])  # 20 ms behind throughout
    s = lag_stats(t, master, acked)
    assert s["samples"] == int(moving.sum()) + 1
    assert s["seconds"] == pytest.approx(3.0, abs=0.01)
    assert s["ingest_mb_s"] == pytest.approx(100, rel=0.01)
    assert s["lag_bytes_p50"] == pytest.approx(2e6, rel=0.01)  # not 0: the idle samples are left out
    assert s["lag_ms_p50"] == pytest.approx(20, abs=0.01)
    assert s["samples_never_acked"] == 0  # the replica acked the end during the shutdown


@pytest.mark.skipif(hosts.unavailable() is not None, reason=str(hosts.unavailable()))
def test_a_short_run_on_two_hosts_measures_every_row(tmp_path):
    """Keep-up, catch-up and both sender rows, each on a fresh host pair over a veth (about 30 s)."""
    out = tmp_path / "ha.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "tools/bench/ha_bench.py",
            "--reps",
            "1",
            "--seconds",
            "3",
            "--catchup-mib",
            "16",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        log, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()  # hosts.pair() of the next run sweeps the namespaces named after this pid
        log, _ = proc.communicate()
        pytest.fail(f"ha_bench took over 240 s:\n{log[-3000:]}")
    assert proc.returncode == 0, log[-3000:]
    res = json.loads(out.read_text())
    k = res["keepup"]
    assert k["ingest_mb_s"] > 0 and k["samples"] > 50 and k["seconds"] > 1
    assert 0 <= k["lag_bytes_p50"] <= k["lag_bytes_p99"] and 0 <= k["lag_ms_p50"] <= k["lag_ms_p99"]
    c = res["catchup"]
    assert c["backlog_mb"] >= 16 * 2**20 / 1e6 and c["catchup_mb_s"] > 0
    for role in ("SYNC_MASTER", "ASYNC_MASTER"):
        r = res[f"senders {role}"]
        assert r["msgs_s"] > 0 and 0 < r["p50_us"] <= r["p99_us"], role
    assert res["sync_over_async"] > 0
    pid_ns = [
        line
        for line in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()
        if f"-{proc.pid}-" in line
    ]
    assert not pid_ns, f"namespaces left behind: {pid_ns}"
