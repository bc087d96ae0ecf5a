"""The QUICK benchmark suite runs end to end: every workload of every peer gives a result.

Asserts no speed. Runs ``python -m tools.bench.suite --quick`` as ``make bench QUICK=1``
does, so the suite's own installer (apt-get for redis-server and nats-server, pip for the
``bench`` extra) is exercised on a fresh machine.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from shmq.ring import shm
from tests.ipc_tracking import existing, remove, store_objects

ROOT = Path(__file__).resolve().parents[2]
# iceoryx2 is not among them: it publishes wheels for glibc >= 2.34 only, so where pip cannot
# install it its rows say why and its own tests below skip with that reason
PEERS = {"plain copy", "mp.Queue", "faster-fifo", "zmq ipc", "Redis Streams", "NATS JetStream"}
# the push latency extras (shmq x 2 send APIs, faster-fifo, zmq) add ~4 spawned runs, the cluster row 2 more,
# the worker-pool row (2 workers) ~10 s
TIMEOUT = 420
# the suite stops itself at TIMEOUT and gets a minute to stop what it started: pytest-timeout's
# default (300 s) must not kill the test first, or the suite's servers are left running
pytestmark = pytest.mark.timeout(TIMEOUT + 120)
STOPPED = re.compile(r"shmq: broker (\S+) on (\S+) stopped")


@dataclass(frozen=True)
class SuiteRun:
    pid: int
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool

    def tail(self) -> str:
        return self.stdout[-3000:] + self.stderr[-3000:]


def _terminate(proc: subprocess.Popen) -> tuple[str, str]:
    """SIGTERM lets the suite stop what it started; SIGKILL only if it has not within a minute."""
    proc.terminate()
    try:
        return proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def _run_suite(out: Path) -> SuiteRun:
    """Run the QUICK suite as ``make bench QUICK=1`` does, ended by SIGTERM past ``TIMEOUT``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.bench.suite", "--quick", "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, QUICK="1"),
    )
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
        timed_out = False
    except subprocess.TimeoutExpired:
        stdout, stderr = _terminate(proc)
        timed_out = True
    return SuiteRun(proc.pid, proc.returncode, stdout, stderr, timed_out)


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory) -> tuple[SuiteRun, Path]:
    out = tmp_path_factory.mktemp("bench")
    return _run_suite(out), out


@pytest.fixture(scope="module")
def quick_results(suite_run):
    run, out = suite_run
    assert not run.timed_out, f"the suite took over {TIMEOUT} s:\n{run.tail()}"
    assert run.returncode == 0, run.tail()
    files = glob.glob(str(out / "*.json"))
    assert len(files) == 1, run.stdout[-2000:]
    assert glob.glob(str(out / "*.md"))
    with open(files[0]) as f:
        return json.load(f), run.stdout


def test_shmq_brokers_are_stopped_and_leave_no_ipc_object(suite_run):
    """Whatever happened in the run (a failed workload, a crashed broker, a timeout), the suite
    stops its shmq brokers and nothing of theirs stays in /dev/shm or the SysV tables.

    The brokers are named ``bench<suite pid>`` (``...s`` for SYNC_FLUSH), and their SysV keys
    derive from the stores the adapter names when it stops them: only this run's objects count.
    """
    run, _ = suite_run
    stopped = {m.group(1): m.group(2) for m in STOPPED.finditer(run.stdout)}
    names = [f"bench{run.pid}", f"bench{run.pid}s"]
    names += [f"cb{run.pid}{sep}b{i}" for sep in ("", "-") for i in range(2)]  # the cluster rows' brokers
    names.append(f"pb{run.pid}")  # the worker-pool rows' broker
    in_shm = [entry for name in names for entry in shm.leftovers(name)]
    sysv = existing(o for store in stopped.values() for o in store_objects(store))
    for name in names:
        shm.remove_leftovers(name)
    remove(sysv)
    assert names[0] in stopped, f"the shmq adapter did not stop its broker:\n{run.tail()}"
    assert not in_shm, f"left in /dev/shm: {in_shm}"
    assert not sysv, f"SysV objects left: {sysv}"


def test_every_peer_was_installed_and_started(quick_results):
    res, _log = quick_results
    assert set(res["systems"]) >= PEERS
    missing = {name: why for name, why in res["unavailable"].items() if name in PEERS}
    assert not missing, missing


def test_every_workload_of_every_peer_produced_a_result(quick_results):
    res, _log = quick_results
    assert res["machine"]["cores"] and res["versions"]
    holes = []
    for key, w in res["results"].items():
        for name in PEERS:
            e = w["systems"][name]
            if not e["runs"] and not e.get("na"):
                holes.append(f"{key} / {name}: {e['errors'][-1:] or 'no result'}")
    assert not holes, "\n".join(holes)
    # each throughput workload and the latency one has real numbers from several peers (the
    # replicated ones: Redis with a replica; shmq's own rows are checked below)
    for key, w in res["results"].items():
        done = [n for n in PEERS if w["systems"][n]["runs"]]
        assert len(done) >= {"durable": 2, "replicated": 1}.get(w["kind"], 3), (key, done)
        if w["kind"] == "replicated":  # shmq has HA: its SYNC_MASTER and ASYNC_MASTER rows have numbers
            assert w["systems"]["shmq"]["runs"], (key, w["systems"]["shmq"]["errors"][-1:])


def test_shmq_rows_say_what_they_are(quick_results):
    """shmq's rows hold a number or a reason (e.g. "not available yet"), never a blank."""
    res, _log = quick_results
    for key, w in res["results"].items():
        e = w["systems"]["shmq"]
        assert e["runs"] or e.get("na") or e["errors"], key
    for what in ("queues", "backlog", "push"):
        assert res["extras"].get("shmq", {}).get(what), what
    cluster = res["extras"]["shmq"]["cluster"]
    assert set(cluster["brokers"]) == {"2"}, cluster["brokers"]  # the QUICK run's broker count
    pop = res["extras"]["shmq"]["pop"]
    assert set(pop["workers"]) == {"2"}, pop  # the QUICK run's worker count
    for row in pop["workers"].values():
        assert all(row[k].get("msgs_s") for k in ("pop", "push", "pool", "redis")), row


def _iceoryx2_or_skip(res: dict) -> None:
    assert "iceoryx2" in res["systems"], "the iceoryx2 peer is not in the suite"
    why = res["unavailable"].get("iceoryx2")
    if why:
        pytest.skip(f"iceoryx2 could not be installed or started here: {why}")


def test_iceoryx2_has_a_number_for_every_row_it_applies_to(quick_results):
    """The no-persistence shared-memory reference: every throughput row (1 -> 1 and 4 -> 2,
    per message and batch, each size of the run) and the round trip, each run complete (the suite raises
    when a consumer received fewer messages than were sent)."""
    res, _log = quick_results
    _iceoryx2_or_skip(res)
    for key, w in res["results"].items():
        e = w["systems"]["iceoryx2"]
        if w["kind"] in ("tput", "latency"):
            assert e["runs"] and not e["errors"], (key, e["errors"][-1:])
        else:
            assert e.get("na") and not e["runs"], (key, e)
    assert res["versions"].get("iceoryx2")


def test_iceoryx2_delivers_every_message_in_each_pattern():
    """A few thousand messages through each of the peer's paths, in-process (seconds): the
    lossless configuration (no safe overflow, publishers retry) and the stop handshake of the
    round trip. Skips, with pip's reason, where iceoryx2 cannot be imported."""
    pytest.importorskip("iceoryx2", reason="iceoryx2 (bench extra) is not installed: no wheel for this platform?")
    from tools.bench.suite import core
    from tools.bench.suite.peers.iox import Iceoryx2

    system = Iceoryx2()
    assert system.install() is None
    system.start(str(ROOT))
    try:
        for i, (producers, consumers, api) in enumerate(
            [(1, 1, "msg"), (1, 1, "batch"), (4, 2, "msg"), (4, 2, "batch")]
        ):
            spec = core.TputSpec(producers, consumers, 100, api, 4_000 if api == "msg" else 20_000, 100, 5.0, f"t{i}")
            r = core.run_tput(system, spec)
            assert r["messages"] == spec.count and not r["capped"], (spec.key, r)
        lat = core.run_latency(system, core.LatencySpec(100, 300, 5.0, "lat"))
        assert lat["rounds"] == 300 and 0 < lat["p50_us"] <= lat["p99_us"]
    finally:
        system.stop()
    assert not system.held
