"""A full disk (issue 10 C9, C10): a broker on a small tmpfs or loop-mounted ext4 must never die;
sends get a clear disk-full error while reads go on, writes resume by themselves once space is
freed, a restart on the full disk works, and forced cleanup keeps unconsumed messages unless
cleanFileForciblyEnable says otherwise. Needs root (mount); skipped otherwise."""

from __future__ import annotations

import os
import time

import pytest

import shmq
from shmq import Message, Producer, PullConsumer, PullStatus, SendStatus
from shmq.codec import frames as P
from shmq.errors import BrokerError, DiskFullError
from tests.store.small_disk import MiB, fill, small_disk

CONFIG = {
    "mappedFileSizeCommitLog": MiB,
    "mappedFileSizeConsumeQueue": 20 * 4096,
    "maxHashSlotNum": 1009,
    "maxIndexNum": 4000,
}
BODY = 16000
_NOISE = os.urandom(BODY)  # incompressible: the producer compresses bodies over 4 KiB


def body(i: int) -> bytes:
    return b"%08d" % i + _NOISE[8:]


def send_until_full(p: Producer, topic: str, start: int, limit: int = 20_000) -> tuple[list[int], BrokerError]:
    """Send until the broker refuses for a full disk: the numbers acknowledged and the error."""
    acked = []
    for i in range(start, start + limit):
        try:
            r = p.send(Message(topic, body(i)))
        except BrokerError as e:
            return acked, e
        assert r.status is SendStatus.SEND_OK
        acked.append(i)
    raise AssertionError(f"{limit} sends and the disk is not full")


def read_all(c: PullConsumer, topic: str) -> list[int]:
    got = []
    for mq in c.fetch_queues(topic):
        offset = c.min_offset(mq)
        while True:
            r = c.pull(mq, "*", offset=offset, max_nums=32)
            if r.status is not PullStatus.FOUND:
                break
            got += [int(m.body[:8]) for m in r.messages]
            offset = r.next_begin_offset
    return sorted(got)


def assert_disk_full(e: BrokerError) -> None:
    assert e.code == P.SERVICE_NOT_AVAILABLE and "disk full" in str(e).lower(), e
    assert isinstance(e, DiskFullError), type(e)  # catchable as what it is


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
def test_full_disk_refuses_sends_keeps_reads_resumes_and_restarts(kind, broker_name, ipc_tracker):
    """Regression (issue 10 C9): filling the disk killed the broker with SIGBUS (exit 135), and
    a restart on the full disk died again in recovery."""
    with small_disk(kind) as mnt:
        store = ipc_tracker.store(os.path.join(mnt, "store"))
        filler = fill(mnt, 6 * MiB)
        # only the disk itself stops the writes (no ratio guard before it): the SIGBUS path
        config = dict(CONFIG, diskSpaceWarningLevelRatio=1.0, flushConsumerOffsetInterval=100)
        broker = shmq.Broker(store, broker_name, config)
        try:
            with Producer("pg", broker=broker_name) as p, PullConsumer("cg", broker=broker_name) as c:
                acked, err = send_until_full(p, "Fill", 0)
                assert_disk_full(err)
                assert len(acked) > 100
                assert broker.process.poll() is None, broker.log()
                with pytest.raises(BrokerError) as again:  # refused at once, not a crash later
                    p.send(Message("Fill", body(-1)))
                assert_disk_full(again.value)
                assert read_all(c, "Fill") == acked
                fill(mnt, 0)
                for mq in c.fetch_queues("Fill"):  # offsets persisted on a full disk (1: all still unconsumed)
                    c.commit(mq, 1)
                time.sleep(0.5)
                assert broker.process.poll() is None, broker.log()
                os.unlink(filler)  # space freed: writes come back without a restart
                deadline = time.monotonic() + 5
                while True:
                    try:
                        r = p.send(Message("Fill", body(10**7)))
                        break
                    except BrokerError as e:
                        assert_disk_full(e)
                        assert time.monotonic() < deadline, "sends still refused 5 s after space was freed"
                        time.sleep(0.05)
                assert r.status is SendStatus.SEND_OK
                acked.append(10**7)
                fill(mnt, 3 * MiB)
                more, err = send_until_full(p, "Fill", 10**6)  # fill it up again, to the last block
                assert_disk_full(err)
                acked += more
                assert broker.process.poll() is None, broker.log()
        finally:
            code = broker.stop()
        assert code == 0, broker.log()
        fill(mnt, 0)
        with shmq.Broker(store, broker_name, config) as again, PullConsumer("cg2", broker=broker_name) as c:
            assert read_all(c, "Fill") == sorted(acked)
            with Producer("pg2", broker=broker_name) as p:  # what it had reserved, then a clear refusal
                more, err = send_until_full(p, "Fill", 2 * 10**6)
            assert_disk_full(err)
            assert read_all(c, "Fill") == sorted(acked + more)
            assert again.process.poll() is None, again.log()


def test_restart_on_a_full_disk_after_a_crash_recovers_without_sigbus(broker_name, ipc_tracker):
    """Regression (issue 10 C9): recovery zeroed the cut tail of the commitlog through the
    mapping, and a hole there is a SIGBUS on a full disk."""
    with small_disk("tmpfs") as mnt:
        store = ipc_tracker.store(os.path.join(mnt, "store"))
        config = dict(CONFIG, diskSpaceWarningLevelRatio=1.0, warmMappedFileEnable=False)
        broker = shmq.Broker(store, broker_name, config)
        try:
            with Producer("pg", broker=broker_name) as p:
                acked = [i for i in range(200) if p.send(Message("Crash", body(i))).status is SendStatus.SEND_OK]
            broker.kill()  # abnormal: recovery cuts and zeroes the commitlog's tail
        finally:
            broker.stop()
        fill(mnt, 0)
        with shmq.Broker(store, broker_name, config) as again, PullConsumer("cg", broker=broker_name) as c:
            assert read_all(c, "Crash") == acked
            assert again.process.poll() is None, again.log()


@pytest.mark.parametrize("forcibly", [False, True])
def test_forced_cleanup_deletes_unconsumed_messages_only_with_the_rocketmq_key(forcibly, broker_name, ipc_tracker):
    """Regression (issue 10 C10): forced cleanup deleted acknowledged, unconsumed messages."""
    with small_disk("tmpfs") as mnt:
        store = ipc_tracker.store(os.path.join(mnt, "store"))
        config = dict(
            CONFIG, diskSpaceCleanForciblyRatio=0.2, cleanResourceInterval=300, deleteCommitLogFilesInterval=0
        )
        if forcibly:
            config["cleanFileForciblyEnable"] = True  # else the default
        with shmq.Broker(store, broker_name, config) as broker, Producer("pg", broker=broker_name) as p:
            acked = [i for i in range(1000) if p.send(Message("Keep", body(i))).status is SendStatus.SEND_OK]
            time.sleep(1.5)  # several cleanup rounds over diskSpaceCleanForciblyRatio
            with PullConsumer("cg", broker=broker_name) as c:
                got = read_all(c, "Keep")
            log = broker.log()
            assert broker.process.poll() is None, log
        if forcibly:  # RocketMQ's behaviour: deleted, and the loss is logged
            assert len(got) < len(acked) and set(got) <= set(acked)
            assert "unconsumed messages: Keep/" in log
        else:
            assert got == acked
            assert "holds unconsumed messages" in log
