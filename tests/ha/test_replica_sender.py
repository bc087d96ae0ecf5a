"""The replica daemon against the real HA sender (`shmq ha`) of a real master broker."""

from __future__ import annotations

import os
import subprocess
import sys

import shmq
from shmq import Message, PullConsumer, PullStatus
from shmq.client.admin import Admin
from shmq.client.producer.producer import Producer
from shmq.ha.shared import HASegment
from tests.ha.conftest import BASE, REPLICA, SEGMENT
from tests.ha.fake_master import commitlog_bytes
from tests.ha.sender_support import conf_file, free_port
from tests.ipc_tracking import IpcTracker
from tests.waiting import wait_for


def test_replica_follows_the_real_sender(tmp_path, ipc_tracker: IpcTracker) -> None:
    port = free_port()
    token = "s3cret"
    mname, rname = ipc_tracker.name("m"), ipc_tracker.name("r")
    mstore, rstore = ipc_tracker.store(str(tmp_path / "master")), ipc_tracker.store(str(tmp_path / "replica"))
    mconf = conf_file(str(tmp_path / "master.conf"), {**BASE, "haListenPort": port, "haAuthToken": token})
    rconf = conf_file(
        str(tmp_path / "replica.conf"), {**REPLICA, "haMasterAddress": f"127.0.0.1:{port}", "haAuthToken": token}
    )
    sender = None
    with shmq.Broker(mstore, mname, mconf) as master:
        ha = HASegment.open(mname, read_only=True)
        try:
            if not wait_for(lambda: int(ha.header["sender_pid"][0]) != 0, 10):  # the broker did not start one
                log = open(os.path.join(mstore, "ha.log"), "ab")  # noqa: SIM115 - the sender process writes it
                sender = subprocess.Popen(
                    [sys.executable, "-m", "shmq", "ha", "--store", mstore, "--name", mname, "--config", mconf],
                    stdout=log,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                )
                log.close()
            Admin(mname).create_topic("Orders", queues=2)
            with Producer("pg", broker=mname) as p:
                for i in range(300):
                    p.send(Message("Orders", b"%05d" % i + os.urandom(4000)), selector=lambda qs, m, a, i=i: qs[i % 2])
            with shmq.Broker(rstore, rname, rconf) as replica:
                end = ha.master_offset
                assert end > SEGMENT
                assert wait_for(lambda: any(r.acked_offset == end for r in ha.replicas()), 20), (
                    ha.replicas(),
                    replica.log(),
                )
                assert commitlog_bytes(rstore, SEGMENT, end) == commitlog_bytes(mstore, SEGMENT, end)
                assert [r.name for r in ha.replicas()] == [rname]
                with Producer("pg", broker=mname) as p:  # live: streamed as it is written
                    p.send(Message("Orders", b"live"), selector=lambda qs, m, a: qs[0])
                with PullConsumer("cg", broker=rname) as c:
                    # the sender passes a changed topics.json on within a second (SLOW_MS): a replica
                    # that caught up sooner shows the topic as its own dispatch made it until then
                    assert wait_for(lambda: len(c.fetch_queues("Orders")) == 2, 30)
                    queues = c.fetch_queues("Orders")
                    assert [q.queue_id for q in queues] == [0, 1]
                    r = c.pull(queues[0], offset=150, max_nums=8, timeout=10.0)
                    assert r.status is PullStatus.FOUND and r.messages[0].body == b"live"
        finally:
            ha.close()
            if sender is not None:
                sender.terminate()
                sender.wait(10)
    assert master.process.returncode == 0
