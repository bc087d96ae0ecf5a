"""tools/bench/ha_bench.py's lag arithmetic (the runs themselves need HA and root: ``make``-free, by hand)."""
from __future__ import annotations

import numpy as np
import pytest

from tools.bench.ha_bench import lag_stats


def test_lag_of_a_replica_a_constant_20_ms_behind():
    t = np.arange(0, 3, 0.005)  # 3 s sampled every 5 ms
    master = (t * 100e6).astype(np.int64)  # 100 MB/s
    acked = np.where(t >= 0.02, master[np.maximum(np.arange(len(t)) - 4, 0)], -1)  # 4 samples = 20 ms behind
    s = lag_stats(t, master, acked)
    assert s["lag_ms_p50"] == pytest.approx(20, abs=0.01) and s["lag_ms_p99"] == pytest.approx(20, abs=0.01)
    assert s["lag_bytes_p50"] == pytest.approx(2e6, rel=0.01)
    assert s["lag_bytes_p50_first_third"] == pytest.approx(s["lag_bytes_p50_last_third"], rel=0.01)
    assert s["ingest_mb_s"] == pytest.approx(100, rel=0.01)
    assert s["samples_never_acked"] == 4  # the last 20 ms were not acked when the run ended


def test_a_falling_behind_replica_shows_in_the_thirds_and_acks_going_back_count_as_the_best_so_far():
    t = np.arange(0, 3, 0.005)
    master = (t * 100e6).astype(np.int64)
    acked = (t * 50e6).astype(np.int64)  # half the speed: the lag grows
    acked[100] = 0  # a reconnecting replica's slot reads low for a moment
    s = lag_stats(t, master, acked)
    assert s["lag_bytes_p50_last_third"] > 4 * s["lag_bytes_p50_first_third"]
    assert s["lag_bytes_p99"] <= 1.5e8
    assert s["samples_never_acked"] > len(t) // 3
