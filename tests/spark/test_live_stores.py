"""The `shmq` source on stores that are being written or were left by a crash or a replica: a
scan returns a consistent prefix of each queue (never a torn, duplicated or skipped row), takes
no lock, and sees every acknowledged message."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

import shmq
from shmq import Message, Producer
from shmq.client.admin import Admin
from shmq.ha.shared import HASegment
from tests.ha.sender_support import conf_file, free_port
from tests.ipc_tracking import IpcTracker
from tests.spark.live_producer import body, queue_of
from tests.spark.support import as_dict, load, run, with_ms
from tests.waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRODUCER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "live_producer.py")
COLUMNS = ("queue_id", "queue_offset", "msg_id", "properties", "body")
# small files: a live scan meets commitlog and consume-queue files being rolled
ROLLING = {"mappedFileSizeCommitLog": 128 * 1024, "mappedFileSizeConsumeQueue": 100 * 20}


class LiveProducer:
    """live_producer.py in a child process; `acked()` reads what it has been told is stored."""

    def __init__(self, broker: str, tmp: str) -> None:
        self.acked_path = os.path.join(tmp, "acked")
        self.stop_path = os.path.join(tmp, "stop")
        self.proc = subprocess.Popen(
            [sys.executable, PRODUCER, broker, self.acked_path, self.stop_path],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT},
            stdin=subprocess.DEVNULL,
        )

    def acked(self) -> list[tuple[str, int, int]]:
        try:
            with open(self.acked_path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return []
        return [(m, int(q), int(o)) for m, q, o in (ln.split() for ln in lines if ln.count(" ") == 2)]

    def wait_acked(self, n: int, timeout: float = 30) -> None:
        assert wait_for(lambda: len(self.acked()) >= n, timeout), (len(self.acked()), self.proc.poll())

    def stop(self) -> None:
        open(self.stop_path, "w").close()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def producer(broker_name: str, tmp_path: Any) -> Iterator[LiveProducer]:
    p: LiveProducer | None = None

    def start() -> LiveProducer:
        nonlocal p
        p = LiveProducer(broker_name, str(tmp_path))
        return p

    yield start  # type: ignore[misc]
    if p is not None:
        p.stop()


def _scan(spark: Any, store_dir: str) -> dict[tuple[int, int], dict]:
    """The Live rows by (queue id, queue offset), checked whole: unique msg ids, a contiguous run of
    offsets from 0 in every queue, and every body the one its message was sent with."""
    rows, _ = run(spark, load(spark, store_dir, topic="Live").select(*COLUMNS))
    got = {(r.queue_id, r.queue_offset): as_dict(r) for r in rows}
    assert len(got) == len(rows) == len({r.msg_id for r in rows})
    for q in {q for q, _ in got}:
        offsets = sorted(o for qq, o in got if qq == q)
        assert offsets == list(range(len(offsets))), (q, offsets[:3], len(offsets))
    for r in got.values():
        i = int(r["properties"]["i"])
        assert r["body"] == body(i) and r["queue_id"] == queue_of(i)
    return got


def _has_all(got: dict[tuple[int, int], dict], acked: list[tuple[str, int, int]]) -> None:
    missing = [a for a in acked if got.get((a[1], a[2]), {}).get("msg_id") != a[0]]
    assert not missing, (len(missing), missing[:3])


def test_scans_while_a_producer_sends_only_grow(
    spark: Any, store_dir: str, broker_name: str, config: dict, producer: Any
) -> None:
    with shmq.Broker(store_dir, name=broker_name, config={**config, **ROLLING}):
        p = producer()
        p.wait_acked(400)
        seen: dict[tuple[int, int], dict] = {}
        counts = []
        for _ in range(3):
            acked = p.acked()
            got = _scan(spark, store_dir)
            _has_all(got, acked)  # everything acknowledged before the scan began is in it
            assert all(got[k]["msg_id"] == v["msg_id"] for k, v in seen.items())  # earlier rows stay as they were
            seen = got
            counts.append(len(got))
        p.stop()
        final = _scan(spark, store_dir)
        acked = p.acked()
    assert counts == sorted(counts) and counts[-1] > counts[0], counts
    _has_all(final, acked)
    assert len(final) == len(acked)  # the producer stopped: the last scan sees exactly what it sent
    assert len(os.listdir(os.path.join(store_dir, "commitlog"))) > 1
    assert len(os.listdir(os.path.join(store_dir, "consumequeue", "Live", "0"))) > 1


def test_a_crashed_store_reads_without_a_lock(
    spark: Any, store_dir: str, broker_name: str, config: dict, producer: Any
) -> None:
    broker = shmq.Broker(store_dir, name=broker_name, config={**config, **ROLLING})
    try:
        p = producer()
        p.wait_acked(600)
        broker.kill()  # SIGKILL mid-send
        p.proc.wait(20)
    finally:
        broker.stop()  # removes what the killed broker left
    acked = p.acked()
    got = _scan(spark, store_dir)
    _has_all(got, acked)
    assert len(got) >= len(acked)
    # the scan took no lock: a broker starts on the store (recovering it), and a scan meanwhile
    # sees at least what the crashed store held
    with shmq.Broker(store_dir, name=broker_name, config={**config, **ROLLING}):
        during = _scan(spark, store_dir)
    assert {k: v["msg_id"] for k, v in got.items()}.items() <= {k: v["msg_id"] for k, v in during.items()}.items()


def test_a_replica_store_reads_as_its_master(spark: Any, tmp_path: Any, ipc_tracker: IpcTracker, config: dict) -> None:
    """A real replica (the HA client of `shmq broker` as SLAVE) following a real master's HA
    sender over loopback TCP: the replica's store scans to the same rows as the master's."""
    port, token = free_port(), "spark-replica"
    mname, rname = ipc_tracker.name("m"), ipc_tracker.name("r")
    mstore, rstore = ipc_tracker.store(str(tmp_path / "master")), ipc_tracker.store(str(tmp_path / "replica"))
    mconf = conf_file(str(tmp_path / "m.conf"), {**config, "haListenPort": port, "haAuthToken": token})
    rconf = conf_file(
        str(tmp_path / "r.conf"),
        {
            **config,
            "brokerRole": "SLAVE",
            "haMasterAddress": f"127.0.0.1:{port}",
            "haAuthToken": token,
            "haReconnectInterval": 100,
            "haSendHeartbeatInterval": 200,
        },
    )
    with shmq.Broker(mstore, mname, mconf):
        ha = HASegment.open(mname, read_only=True)
        try:
            Admin(mname).create_topic("Orders", queues=3)
            with Producer("pg", broker=mname) as prod:
                for i in range(150):
                    prod.send(
                        Message(
                            "Orders" if i % 5 else "Pay",
                            b"r%05d" % i + bytes(i % 300),
                            tags=f"t{i % 4}",
                            keys=f"k{i}",
                            properties={"i": str(i)},
                        )
                    )
            with shmq.Broker(rstore, rname, rconf) as replica:
                end = ha.master_offset
                assert wait_for(lambda: any(r.acked_offset == end for r in ha.replicas()), 30), replica.log()
                time.sleep(0.2)  # the replica dispatches its consume queues right after writing
                rows_r, _ = run(spark, with_ms(load(spark, rstore)))
        finally:
            ha.close()
    rows_m, _ = run(spark, with_ms(load(spark, mstore)))
    master = sorted((as_dict(r) for r in rows_m), key=lambda r: r["commitlog_offset"])
    replica_rows = sorted((as_dict(r) for r in rows_r), key=lambda r: r["commitlog_offset"])
    assert len(master) == 150
    assert replica_rows == master
