"""The replica daemon against a master made of protocol.MasterSession over a real socket that
streams a real master store's commitlog: mirroring, serving consumers, refusing producers,
reconnecting, refusing hostile input, truncating a diverged tail, and promotion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import shmq
from shmq import ConsumeFrom, ConsumeResult, Message, PullConsumer, PullStatus, PushConsumer
from shmq.client.admin import Admin
from shmq.client.producer.producer import Producer
from shmq.codec import record as fmt
from shmq.errors import ReplicaReadOnlyError
from shmq.ha import protocol
from shmq.ha.protocol import Epoch
from tests.ha.conftest import SEGMENT, Pair, stop_pid
from tests.ha.fake_master import commitlog_bytes, wait_reports
from tests.waiting import wait_for

E1 = Epoch(1, 0, b"\x01" * 16)
BODY = 3000


def _queue(qid: int):
    return lambda queues, msg, arg: queues[qid]


def _fill(pair: Pair, n: int = 450) -> dict[int, list[bytes]]:
    """Messages over more than one commitlog segment on 3 queues of Orders, some on Other; the
    bodies sent per queue of Orders."""
    Admin(pair.master_name).create_topic("Orders", queues=3)
    sent: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    with Producer("pg", broker=pair.master_name) as p:
        for i in range(n):
            body = b"%06d" % i + os.urandom(BODY)  # incompressible: the log grows by what is sent
            r = p.send(Message("Orders", body), selector=_queue(i % 3))
            sent[r.queue.queue_id].append(body)
        for i in range(20):
            p.send(Message("Other", b"other-%d" % i))
    assert pair.master_end() > n * BODY
    return sent


def _record_starts(data: bytes) -> list[int]:
    starts, pos = [], 0
    while pos + 8 <= len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        if int.from_bytes(data[pos + 4 : pos + 8], "big") == fmt.BLANK_MAGIC or size <= 0:
            pos = (pos // SEGMENT + 1) * SEGMENT
            continue
        starts.append(pos)
        pos += size
    return starts


def test_replica_mirrors_the_master_and_serves_consumers(pair: Pair) -> None:
    sent = _fill(pair)
    with PullConsumer("cg", broker=pair.master_name) as c:
        c.commit(shmq.MessageQueue("Orders", pair.master_name, 0), 7)
    time.sleep(0.3)  # the master persists consumerOffset.json every 100 ms
    fake = pair.fake()
    replica = pair.replica(fake.address)
    end = pair.master_end()
    assert wait_reports(fake, end)
    assert commitlog_bytes(pair.replica_store, SEGMENT, end) == commitlog_bytes(pair.master_store, SEGMENT, end)

    with pytest.raises(ReplicaReadOnlyError, match=f"replica.*{fake.address}"):
        Producer("pg", broker=pair.replica_name, start_timeout=3.0).start()

    name = pair.replica_name
    with PullConsumer("cg", broker=name) as c:
        queues = c.fetch_queues("Orders")
        assert [q.queue_id for q in queues] == [0, 1, 2]  # the master's topic config, not the default 4
        assert c.fetch_consume_offset(queues[0], from_store=True) == 7  # the master's committed offset
        for mq in queues:
            got: list[bytes] = []
            while True:
                r = c.pull(mq, offset=len(got), max_nums=64, timeout=0)
                if r.status is not PullStatus.FOUND:
                    break
                got += [m.body for m in r.messages]
            assert got == sent[mq.queue_id]
        # long polling on the replica: woken when the client thread appends what the master took
        result: list = []
        waiter = threading.Thread(target=lambda: result.append(c.pull(queues[1], offset=len(sent[1]), timeout=60.0)))
        waiter.start()
        time.sleep(0.2)
        t = time.monotonic()
        with Producer("pg", broker=pair.master_name) as p:
            p.send(Message("Orders", b"late"), selector=_queue(1))
        waiter.join(90)
        assert result and result[0].status is PullStatus.FOUND and result[0].messages[0].body == b"late"
        assert time.monotonic() - t < 20  # woken by the append, not by the 60 s timeout
        sent[1].append(b"late")

    got_push: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    lock = threading.Lock()

    def listener(msgs, ctx):
        with lock:
            for m in msgs:
                got_push[m.queue_id].append(m.body)
        return ConsumeResult.SUCCESS

    pc = PushConsumer("pcg", broker=name, consume_from=ConsumeFrom.FIRST_OFFSET)
    pc.subscribe("Orders", "*")
    pc.register_listener(listener, orderly=True)
    pc.start()
    try:
        assert wait_for(lambda: sum(map(len, got_push.values())) >= sum(map(len, sent.values())), 20)
    finally:
        pc.shutdown()
    assert got_push == sent
    replica.stop()
    assert "following master" in replica.log()


def test_replica_reconnects_after_the_master_closes(pair: Pair) -> None:
    _fill(pair, 200)
    fake = pair.fake(close_after=4 * 32768)
    pair.replica(fake.address)
    end = pair.master_end()
    assert wait_reports(fake, end)
    assert fake.connections >= 2
    assert commitlog_bytes(pair.replica_store, SEGMENT, end) == commitlog_bytes(pair.master_store, SEGMENT, end)


def _head(path: str) -> bytes:
    """The first 4 KiB of a (possibly large, sparse) file."""
    with open(path, "rb") as f:
        return f.read(4096)


def _wrong_offset(at: int) -> bytes:
    return protocol.frame_header(at + 64, 16) + b"x" * 16


def _garbage(at: int) -> bytes:
    return b"\xff" * 200


def _oversized(at: int) -> bytes:
    return protocol.frame_header(at, 0xFFFF_FFFF)


def _bad_record(at: int) -> bytes:
    return protocol.frame_header(at, 256) + os.urandom(256)


@pytest.mark.parametrize("bad", [_wrong_offset, _garbage, _oversized, _bad_record])
def test_hostile_frames_close_the_connection_and_append_nothing(pair: Pair, bad) -> None:
    _fill(pair, 20)
    fake = pair.fake(bad=bad)
    replica = pair.replica(fake.address)
    assert wait_for(lambda: fake.closed_by_replica >= 2, 10)  # closed, reconnected, closed again
    assert set(fake.reports) == {0}
    replica.stop()
    assert "closed" in replica.log()
    assert not any(
        os.path.getsize(os.path.join(d, f)) and any(_head(os.path.join(d, f)))
        for d in [os.path.join(pair.replica_store, "commitlog")]
        if os.path.isdir(d)
        for f in os.listdir(d)
    )


def test_a_master_without_the_token_feeds_nothing(pair: Pair) -> None:
    _fill(pair, 20)
    fake = pair.fake(token=b"not-the-token", trust_any=True)
    replica = pair.replica(fake.address, haAuthToken="the-token")
    assert wait_for(lambda: fake.connections >= 2, 10)
    assert fake.reports == []
    replica.stop()
    assert "did not prove haAuthToken" in replica.log()
    cl = os.path.join(pair.replica_store, "commitlog")
    assert not os.path.isdir(cl) or not any(any(Path(os.path.join(cl, f)).read_bytes()) for f in os.listdir(cl))


def test_a_refusing_master_with_the_wrong_token_gets_no_report(pair: Pair) -> None:
    fake = pair.fake(token=b"master-token")
    pair.replica(fake.address, haAuthToken="replica-token")
    assert wait_for(lambda: fake.connections >= 2, 10)
    assert fake.reports == []


def test_diverged_tail_is_cut_and_kept_then_a_foreign_master_is_refused(pair: Pair) -> None:
    _fill(pair, 200)
    end = pair.master_end()
    master_log = commitlog_bytes(pair.master_store, SEGMENT, end)
    cut = _record_starts(master_log)[100]
    first = pair.fake(epochs=[E1])
    replica = pair.replica(first.address)
    assert wait_reports(first, end)
    port = first.port
    first.close()
    # the master it follows now took over at ``cut``: the replica's tail past it was never shared
    e2 = Epoch(2, cut, b"\x02" * 16)
    second = pair.fake(epochs=[E1, e2], limit=cut, port=port)
    assert wait_for(lambda: cut in second.reports, 10)
    assert max(second.reports) == cut
    diverged = os.path.join(pair.replica_store, "diverged", f"{fmt.offset_file_name(cut)}.log")
    with open(diverged, "rb") as f:
        assert f.read() == master_log[cut:]
    with open(os.path.join(pair.replica_store, "config", "epochs.json")) as f:
        assert [Epoch.from_json(e) for e in json.load(f)["epochs"]] == [E1, e2]
    second.close()
    # a master with no epoch in common: not followed, the replica stays up and serves
    third = pair.fake(epochs=[Epoch(7, 0, b"\x07" * 16)], port=port)
    assert wait_for(lambda: "stopped following" in replica.log(), 10)
    time.sleep(0.5)
    assert third.connections == 1 and third.reports == []
    with PullConsumer("cg", broker=pair.replica_name) as c:
        r = c.pull(shmq.MessageQueue("Orders", pair.replica_name, 0), offset=0, max_nums=8, timeout=0)
        assert r.status is PullStatus.FOUND
    replica.stop()
    assert commitlog_bytes(pair.replica_store, SEGMENT, cut) == master_log[:cut]


def test_promote_turns_the_replica_into_a_master(pair: Pair) -> None:
    sent = _fill(pair, 60)
    fake = pair.fake()
    replica = pair.replica(fake.address)
    assert wait_reports(fake, pair.master_end())
    fake.close()
    conf = pair.config_file(fake.address)  # no brokerName in it, and no --name: the name the replica served under
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "shmq",
            "admin",
            "promote",
            "--store",
            pair.replica_store,
            "--config",
            conf,
            "--timeout",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1 and "ASYNC_MASTER" in out.stdout and repr(pair.replica_name) in out.stdout
    pid = int(out.stdout.split("(pid ")[1].split(";")[0])
    assert replica.process.wait(5) == 0
    try:
        with Producer("pg", broker=pair.replica_name) as p:
            r = p.send(Message("Orders", b"after-promotion"), selector=_queue(0))
            assert r.status is shmq.SendStatus.SEND_OK and r.queue_offset == len(sent[0])
        with PullConsumer("cg", broker=pair.replica_name) as c:
            r = c.pull(shmq.MessageQueue("Orders", pair.replica_name, 0), offset=0, max_nums=64, timeout=0)
            assert [m.body for m in r.messages] == sent[0] + [b"after-promotion"]
    finally:
        stop_pid(pid)


def test_shmq_broker_with_role_slave_runs_the_replica(pair: Pair) -> None:
    _fill(pair, 20)
    fake = pair.fake()
    r = shmq.Broker(pair.replica_store, pair.replica_name, {**_replica_conf(), "haMasterAddress": fake.address})
    try:
        assert wait_reports(fake, pair.master_end())
        with pytest.raises(ReplicaReadOnlyError):
            Producer("pg", broker=pair.replica_name).start()
    finally:
        r.stop()


def _replica_conf() -> dict:
    from tests.ha.conftest import REPLICA

    return dict(REPLICA)


def test_a_silent_master_gets_heartbeat_reports_then_is_dropped(pair: Pair) -> None:
    fake = pair.fake(bad=lambda at: b"")  # WELCOME, then not a byte
    t = time.monotonic()
    replica = pair.replica(fake.address, haHousekeepingInterval=800)
    assert wait_for(lambda: fake.closed_by_replica >= 1, 10)
    assert time.monotonic() - t >= 0.8
    assert len(fake.reports) >= 3 and set(fake.reports) == {0}  # the first report, then every 200 ms
    replica.stop()
    assert "said nothing for 0.8 s" in replica.log()


def test_a_master_with_another_segment_size_is_not_followed(pair: Pair) -> None:
    _fill(pair, 20)
    fake = pair.fake()
    fake.segment_size = 2 * SEGMENT
    replica = pair.replica(fake.address)
    assert wait_for(lambda: fake.connections >= 2, 10)
    assert fake.reports == []
    replica.stop()
    assert "mappedFileSizeCommitLog must be equal" in replica.log()


def test_shmq_replica_command(pair: Pair) -> None:
    """`shmq replica --master` follows that address; without one it is refused in one line."""
    out = subprocess.run(
        [sys.executable, "-m", "shmq", "replica", "--store", pair.replica_store, "--name", pair.replica_name],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and out.stderr.startswith("shmq replica: error:") and "haMasterAddress" in out.stderr
    _fill(pair, 20)
    fake = pair.fake()
    conf = pair.config_file("127.0.0.1:1")  # overridden by --master
    with open(os.path.join(pair.tmp, "replica-cli.log"), "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "shmq",
                "replica",
                "--store",
                pair.replica_store,
                "--name",
                pair.replica_name,
                "--config",
                conf,
                "--master",
                fake.address,
            ],
            stdout=log,
            stderr=log,
        )
    try:
        assert wait_reports(fake, pair.master_end(), 20)
    finally:
        proc.terminate()
        assert proc.wait(20) == 0


def test_good_frames_before_a_bad_one_in_one_run_are_kept(pair: Pair) -> None:
    """Frames of one recv run are appended together: those before a frame at the wrong offset stay."""
    _fill(pair, 40)
    n = 32768
    fake = pair.fake()
    good = protocol.frame_header(0, n) + fake._read(0, n)
    fake.bad = lambda at: (good if at == 0 else b"") + protocol.frame_header(n + 8, 16) + b"x" * 16
    replica = pair.replica(fake.address)
    assert wait_for(lambda: n in fake.reports and fake.closed_by_replica >= 2, 10)
    assert set(fake.reports) == {0, n}
    replica.stop()
    assert f"frame at offset {n + 8}, but the replica's log ends at {n}" in replica.log()
    assert commitlog_bytes(pair.replica_store, SEGMENT, n) == commitlog_bytes(pair.master_store, SEGMENT, n)


def test_a_killed_replica_catches_up_after_restart(pair: Pair) -> None:
    _fill(pair, 100)
    fake = pair.fake()
    replica = pair.replica(fake.address)
    assert wait_reports(fake, pair.master_end())
    replica.kill()  # SIGKILL: recovery of the replica's store at the next start
    pair.replicas.remove(replica)  # its leftovers go when the next replica of its name starts
    with Producer("pg", broker=pair.master_name) as p:
        for i in range(100):
            p.send(Message("Orders", os.urandom(BODY)), selector=_queue(i % 3))
    end = pair.master_end()
    pair.replica(fake.address)
    assert wait_reports(fake, end)
    assert commitlog_bytes(pair.replica_store, SEGMENT, end) == commitlog_bytes(pair.master_store, SEGMENT, end)
    with PullConsumer("cg", broker=pair.replica_name) as c:
        assert sum(c.max_offset(mq) for mq in c.fetch_queues("Orders")) == 200


def test_a_master_with_data_but_no_epochs_is_not_followed(pair: Pair) -> None:
    """Regression: a sender that could not read the master's epochs.json announced none; the
    replica followed, adopted the empty list, and after its next restart refused its own store."""
    _fill(pair, 20)
    fake = pair.fake(epochs=[])
    replica = pair.replica(fake.address)
    assert wait_for(lambda: fake.connections >= 2, 10)
    assert fake.reports == []
    replica.stop()
    assert "announces no epoch history" in replica.log()


def test_promote_without_a_name_needs_one_recorded(pair: Pair, tmp_path) -> None:
    """A store no replica ever served records no name: promote asks for --name instead of
    starting a broker under a name no client uses."""
    store = str(tmp_path / "never-a-replica")
    out = subprocess.run(
        [sys.executable, "-m", "shmq", "admin", "promote", "--store", store, "--timeout", "5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "records no replica name" in out.stderr and "--name" in out.stderr


def test_promote_refuses_a_master(pair: Pair) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "shmq",
            "admin",
            "promote",
            "--store",
            pair.master_store,
            "--name",
            pair.master_name,
            "--timeout",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and "is a master already" in out.stderr
    assert pair.master.process.poll() is None


def test_a_bad_record_deep_in_a_burst_is_cut_and_never_reported(pair: Pair) -> None:
    """A whole segment of frames arrives in one burst (appended unchecked, checked at its end)
    with a corrupt record in the middle: the records before it are kept and reported, nothing
    from it on is kept, and no report ever goes past it."""
    _fill(pair, 400)
    fake = pair.fake()
    seg = fake._read(0, SEGMENT)
    bad = next(s for s in _record_starts(seg) if s > SEGMENT // 2)
    size = int.from_bytes(seg[bad : bad + 4], "big")
    corrupt = bytearray(seg)
    corrupt[bad + size - 60] ^= 1  # inside its body: the body CRC fails
    frames = b"".join(
        protocol.frame_header(at, len(corrupt[at : at + 32768])) + corrupt[at : at + 32768]
        for at in range(0, SEGMENT, 32768)
    )
    fake.bad = lambda at: frames if at == 0 else b""
    replica = pair.replica(fake.address)
    assert wait_for(lambda: bad in fake.reports and fake.connections >= 2, 10)  # cut, reconnected from there
    replica.stop()
    assert max(fake.reports) == bad
    assert f"record at offset {bad}: body CRC mismatch" in replica.log()
    got = commitlog_bytes(pair.replica_store, SEGMENT, SEGMENT)
    assert got[:bad] == seg[:bad] and not any(got[bad:])
