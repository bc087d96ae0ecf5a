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

import os
import random

import pytest

from tests.ha import pair_support as S


def test_master_host_dies_under_sync_master_load_and_the_promoted_replica_has_every_ack(ha_hosts):
    master, replica = ha_hosts
    summary = S.failover_round(master, replica, min_acked=300, kill_after=random.uniform(0, 0.3))
    assert summary["acked"] >= 300 and summary["stored"] >= summary["acked"]


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
    S.check_acked_on(S.read_all(replica, "r", "replica.json"), S.acked(acked_path))


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
    S.wait_until(
        lambda: S.log_end(rstore) == S.log_end(os.path.join(master.dir, "store")),
        30,
        "the replica to catch up",
        step=0.2,
    )
    S.check_acked_on(S.read_all(replica, "r", "replica.json"), S.acked(acked_path))
