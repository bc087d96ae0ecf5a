"""A replica whose disk is full: it keeps serving what it has, says so once (not once per
reconnect), and catches up by itself once space is freed. Needs root (a small tmpfs)."""

from __future__ import annotations

import os
import time

import shmq
from shmq import Message
from shmq.client.producer.producer import Producer
from tests.ha.conftest import SEGMENT, Pair
from tests.ha.fake_master import commitlog_bytes, wait_reports
from tests.store.small_disk import MiB, fill, small_disk
from tests.waiting import wait_for


def send(pair: Pair, n: int) -> None:
    """``n`` incompressible 3 KB messages to the master (the log grows by what is sent)."""
    with Producer("pg", broker=pair.master_name) as p:
        for _ in range(n):
            p.send(Message("Orders", os.urandom(3000)))


def test_a_full_disk_is_logged_once_per_state_and_the_replica_catches_up_when_freed(pair: Pair, ipc_tracker) -> None:
    """Regression: past diskSpaceWarningLevelRatio the replica reconnected every
    haReconnectInterval, got past the handshake, failed its first append and logged both
    ``following master`` and ``closed: disk full`` each time (forever, every second by default)."""
    send(pair, 100)
    fake = pair.fake()
    with small_disk("tmpfs") as mnt:
        store = ipc_tracker.store(os.path.join(mnt, "replica"))
        replica = shmq.Broker(store, pair.replica_name, pair.config_file(fake.address))
        try:
            assert wait_reports(fake, pair.master_end(), 30)
            held = pair.master_end()
            filler = fill(mnt, 3 * MiB)  # over diskSpaceWarningLevelRatio (90 %), room for small files
            send(pair, 400)  # more than a segment: the replica must open a new one
            assert wait_for(lambda: "closed: disk full" in replica.log(), 30), replica.log()
            connections = fake.connections
            time.sleep(3)  # 30 reconnects at haReconnectInterval (100 ms) if it still retried blindly
            log = replica.log()
            assert log.count("closed: disk full") == 1, log
            assert log.count("writes are refused") == 1, log  # the reason is not wrapped in itself
            assert log.count("is full (") == 1, log  # the store's own line, once
            assert log.count("following master") == 1, log
            assert fake.connections == connections, "reconnected while the disk was still full"
            with shmq.PullConsumer("cg", broker=pair.replica_name) as c:  # what it holds is served
                queues = c.fetch_queues("Orders")
                assert sum(c.max_offset(mq) for mq in queues) >= 100
                assert c.pull(queues[0], offset=0, max_nums=4, timeout=0).status is shmq.PullStatus.FOUND
            os.unlink(filler)
            end = pair.master_end()
            assert end > held
            assert wait_reports(fake, end, 30), replica.log()
            log = replica.log()
            assert log.count("has room again") == 1 and log.count("following master") == 2, log
            assert commitlog_bytes(store, SEGMENT, end) == commitlog_bytes(pair.master_store, SEGMENT, end)
        finally:
            replica.stop()
