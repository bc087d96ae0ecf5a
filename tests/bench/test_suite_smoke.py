"""The QUICK benchmark suite runs end to end: every workload of every peer gives a result.

Asserts no speed. Runs ``python -m tools.bench.suite --quick`` as ``make bench QUICK=1``
does, so the suite's own installer (apt-get for redis-server and nats-server, pip for the
``bench`` extra) is exercised on a fresh machine.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PEERS = {"plain copy", "mp.Queue", "faster-fifo", "zmq ipc", "Redis Streams", "NATS JetStream"}


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run([sys.executable, "-m", "tools.bench.suite", "--quick", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=280,
                          env=dict(os.environ, QUICK="1"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = glob.glob(str(out / "*.json"))
    assert len(files) == 1, proc.stdout[-2000:]
    assert glob.glob(str(out / "*.md"))
    with open(files[0]) as f:
        return json.load(f), proc.stdout


def test_every_peer_was_installed_and_started(quick_results):
    res, log = quick_results
    assert PEERS <= set(res["systems"])
    missing = {name: why for name, why in res["unavailable"].items() if name in PEERS}
    assert not missing, missing


def test_every_workload_of_every_peer_produced_a_result(quick_results):
    res, log = quick_results
    assert res["machine"]["cores"] and res["versions"]
    holes = []
    for key, w in res["results"].items():
        for name in PEERS:
            e = w["systems"][name]
            if not e["runs"] and not e.get("na"):
                holes.append(f"{key} / {name}: {e['errors'][-1:] or 'no result'}")
    assert not holes, "\n".join(holes)
    # each throughput workload and the latency one has real numbers from several peers
    for key, w in res["results"].items():
        done = [n for n in PEERS if w["systems"][n]["runs"]]
        assert len(done) >= (2 if w["kind"] == "durable" else 3), (key, done)


def test_shmq_rows_say_what_they_are(quick_results):
    """shmq's rows hold a number or a reason (e.g. "not available yet"), never a blank."""
    res, log = quick_results
    for key, w in res["results"].items():
        e = w["systems"]["shmq"]
        assert e["runs"] or e.get("na") or e["errors"], key
    for what in ("queues", "backlog"):
        assert res["extras"].get("shmq", {}).get(what), what
