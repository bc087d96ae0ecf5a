"""A store whose config/ folder turns read-only under a running broker (a bind mount of it
remounted read-only; root only, skipped otherwise): the broker goes on serving sends and reads,
says once that topics.json, consumerOffset.json or delayOffset.json cannot be written (not on
every pass of its loop, tick or interval), and writes them by itself once the folder is writable
again."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator

import pytest

import shmq
from shmq import Message, MessageQueue, Producer, PullConsumer, PullStatus, SendStatus
from tests.waiting import wait_for

from .conftest import SMALL


@contextlib.contextmanager
def read_only(folder: str) -> Iterator[None]:
    """``folder`` read-only (bind-mounted on itself, remounted ro) until the block ends; the
    mount goes whatever happens. A mount holding files open for writing cannot be made
    read-only (EBUSY): config/ holds none between writes, the store's other folders do."""
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    if subprocess.run(["mount", "--bind", folder, folder], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", folder], check=True, capture_output=True)
        yield
    finally:
        if subprocess.run(["umount", folder], capture_output=True).returncode:
            subprocess.run(["umount", "-l", folder], capture_output=True)


def test_a_read_only_config_folder_is_logged_once_and_written_when_writable_again(store_dir, broker_name):
    """Regression: ``writing topics.json failed: [Errno 30]`` was logged on every pass of the
    loop (248 lines in 5 idle seconds, forever); consumerOffset.json every interval."""
    broker = shmq.Broker(store_dir, broker_name, dict(SMALL, flushConsumerOffsetInterval=100))
    try:
        with Producer("pg", broker=broker_name) as p, PullConsumer("cg", broker=broker_name) as c:
            for i in range(10):
                assert p.send(Message("Old", b"m%d" % i)).status is SendStatus.SEND_OK
            with read_only(os.path.join(store_dir, "config")):
                assert p.send(Message("Fresh", b"x")).status is SendStatus.SEND_OK  # auto-created
                c.commit(MessageQueue("Old", broker_name, 0), 1)
                for i in range(4):  # delivered on several ticks: each writes delayOffset.json
                    p.send(Message("Later", b"d%d" % i, delay_level=1))
                    time.sleep(0.3)
                assert wait_for(lambda: "writing delayOffset.json failed" in broker.log(), 10), broker.log()
                assert wait_for(lambda: "writing consumerOffset.json failed" in broker.log(), 10), broker.log()
                assert "writing topics.json failed" in broker.log()
                time.sleep(3)  # about 150 passes of an idle loop, 30 offset intervals
                log = broker.log()
                for name in ("topics.json", "consumerOffset.json", "delayOffset.json"):
                    assert log.count(f"writing {name} failed") == 1, log
                assert "Read-only file system" in log
                got = []
                for mq in c.fetch_queues("Old"):  # reads go on
                    r = c.pull(mq, offset=0, max_nums=32, timeout=0)
                    if r.status is PullStatus.FOUND:
                        got += [m.body for m in r.messages]
                assert sorted(got) == sorted(b"m%d" % i for i in range(10))
                assert broker.process.poll() is None
            assert wait_for(lambda: "writing topics.json works again" in broker.log(), 20), broker.log()
            assert wait_for(lambda: "writing consumerOffset.json works again" in broker.log(), 20), broker.log()
            assert wait_for(lambda: "writing delayOffset.json works again" in broker.log(), 20), broker.log()
            with open(os.path.join(store_dir, "config", "topics.json")) as f:
                assert "Fresh" in json.load(f)["topicConfigTable"]
            with open(os.path.join(store_dir, "config", "consumerOffset.json")) as f:
                assert json.load(f)["offsetTable"]["Old@cg"] == {"0": 1}
    finally:
        code = broker.stop()
    assert code == 0, broker.log()
    assert broker.log().count("writing topics.json failed") == 1
