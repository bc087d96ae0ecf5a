"""A master and a replica on two hosts joined only by TCP: the faults the HA issue names.

- the master host dies under a SYNC_MASTER load: every acknowledged message is on the
  replica and, after `shmq admin promote`, readable at the queue offset the master gave it, in
  order, none twice;
- the replica is SIGKILLed under load and restarted: it catches up to a byte-identical log;
- the link goes down (or loses every packet) under SYNC_MASTER: sends end with
  FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE within the timeout, never hang, never say OK for
  what the replica lacks; once the link heals replication resumes by itself.
"""
from __future__ import annotations

import json
import os
import random
import sys
import time

import pytest

from tests.ha import pair_support as S


def _read_all(host, broker: str, out_name: str) -> dict[int, list[tuple[int, str]]]:
    out = os.path.join(host.dir, out_name)
    r = host.run_python(S.READ_ALL, broker, "T", out, timeout=60)
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        return {int(q): [(o, k) for o, k in rows] for q, rows in json.load(f).items()}


def _check_acked_on(got: dict[int, list[tuple[int, str]]], acked: list[tuple[str, int, int]]) -> None:
    """Every acknowledged key is at the queue offset the master gave it; no key twice; per queue
    the keys rise with the offset (one producer sending in order)."""
    at = {(q, o): k for q, rows in got.items() for o, k in rows}
    missing = [(k, q, o) for k, q, o in acked if at.get((q, o)) != k]
    assert missing == [], f"{len(missing)} acknowledged messages are not where the master put them: {missing[:5]}"
    keys = [k for rows in got.values() for _, k in rows]
    assert len(keys) == len(set(keys)), "a message is stored twice"
    for q, rows in got.items():
        nums = [int(k[1:]) for _, k in rows]
        assert nums == sorted(nums), f"queue {q} is out of order"


def test_master_host_dies_under_sync_master_load_and_the_promoted_replica_has_every_ack(ha_hosts):
    master, replica = ha_hosts
    S.start_master(master, "SYNC_MASTER")
    S.start_replica(replica, master)
    acked_path, status_path = os.path.join(master.dir, "acked"), os.path.join(master.dir, "status")
    master.python(S.PRODUCE, "m", "T", acked_path, status_path)
    S.wait_until(lambda: os.path.exists(acked_path) and len(S.acked(acked_path)) >= 300, 60, "300 acknowledged sends")
    time.sleep(random.uniform(0, 0.3))
    master.kill_all()  # the broker, its HA sender and the producer die together: the host is gone
    acked = S.acked(acked_path)
    assert len(acked) >= 300
    conf = S.write_conf(replica, "promoted", {"mappedFileSizeCommitLog": S.SEGMENT, "haListenPort": 0})
    out = replica.run([sys.executable, "-m", "shmq", "admin", "promote", "--store", S.replica_store(replica),
                       "--name", "r", "--config", conf], timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    S.wait_serving(replica, "r")
    _check_acked_on(_read_all(replica, "r", "after-promote.json"), acked)
    # the promoted store takes sends
    more = os.path.join(replica.dir, "more")
    r = replica.run_python(S.PRODUCE, "r", "T", more, more + ".status", 5, timeout=60)
    assert r.returncode == 0, r.stderr
    assert len(S.acked(more)) == 5


def test_replica_killed_under_load_catches_up_byte_identical(ha_hosts):
    master, replica = ha_hosts
    S.start_master(master, "ASYNC_MASTER")
    S.start_replica(replica, master)
    acked_path, status_path = os.path.join(master.dir, "acked"), os.path.join(master.dir, "status")
    prod = master.python(S.PRODUCE, "m", "T", acked_path, status_path, 4000)
    S.wait_until(lambda: S.status(status_path)["sent"] >= 800, 60, "800 sends")
    replica.kill_all()
    S.start_replica(replica, master)  # recovers its store, reports its offset, catches up
    assert prod.wait(120) == 0
    mstore, rstore = os.path.join(master.dir, "store"), S.replica_store(replica)
    S.wait_until(lambda: S.log_end(rstore) == S.log_end(mstore), 60, "the replica to catch up", step=0.2)
    m, r = S.commitlog_bytes(mstore).rstrip(b"\0"), S.commitlog_bytes(rstore).rstrip(b"\0")
    assert r == m
    _check_acked_on(_read_all(replica, "r", "replica.json"), S.acked(acked_path))


@pytest.mark.parametrize("fault", ["down", "loss"])
def test_partition_under_sync_master_times_out_then_heals(ha_hosts, fault):
    master, replica = ha_hosts
    S.start_master(master, "SYNC_MASTER")
    S.start_replica(replica, master)
    acked_path, status_path = os.path.join(master.dir, "acked"), os.path.join(master.dir, "status")
    prod = master.python(S.PRODUCE, "m", "T", acked_path, status_path)
    S.wait_until(lambda: os.path.exists(acked_path) and len(S.acked(acked_path)) >= 50, 60, "50 acknowledged sends")
    link = master.link
    assert link is not None
    link.down() if fault == "down" else link.loss(100)

    def failed() -> int:
        st = S.status(status_path)["statuses"]
        return st.get("FLUSH_SLAVE_TIMEOUT", 0) + st.get("SLAVE_NOT_AVAILABLE", 0)

    S.wait_until(lambda: failed() >= 3, 20, "sends answered FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE")
    # each of them ended within syncFlushTimeout (1 s) plus slack: nothing hangs
    assert S.status(status_path)["slowest"] < 3.0
    before = len(S.acked(acked_path))
    link.up() if fault == "down" else link.clear()
    S.wait_until(lambda: len(S.acked(acked_path)) >= before + 50, 30, "acknowledged sends again after healing")
    prod.kill()
    prod.wait()
    # no OK was ever given for a message the replica lacks
    rstore = S.replica_store(replica)
    S.wait_until(lambda: S.log_end(rstore) == S.log_end(os.path.join(master.dir, "store")), 30,
                 "the replica to catch up", step=0.2)
    _check_acked_on(_read_all(replica, "r", "replica.json"), S.acked(acked_path))
