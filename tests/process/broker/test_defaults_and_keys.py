"""A broker with default config fits a laptop; config keys act or are refused at start."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

import shmq
from shmq import Message, Producer
from shmq.errors import ConfigError

LIMIT = 200 << 20


def _disk_bytes(root: str) -> int:
    """Blocks the store really takes (sparse files count what is allocated, not their size)."""
    total = 0
    for d, _dirs, files in os.walk(root):
        for n in files:
            total += os.stat(os.path.join(d, n)).st_blocks * 512
    return total


def test_default_broker_with_three_tiny_messages_stays_small(store_dir, broker_name):
    with shmq.Broker(store_dir, broker_name) as b:
        with Producer("pg", broker=broker_name) as p:
            for i in range(3):
                p.send(Message("Tiny", b"m%d" % i))
        disk = rss = 0
        for _ in range(20):  # the background allocator prepares the next segment meanwhile
            disk = max(disk, _disk_bytes(store_dir))
            rss = max(rss, psutil.Process(b.pid).memory_info().rss)
            time.sleep(0.1)
    assert disk < LIMIT, f"store takes {disk >> 20} MiB on disk"
    assert rss < LIMIT, f"broker RSS {rss >> 20} MiB"


def _cli(store_dir: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shmq", "broker", "--store", store_dir, *args],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    "role, conf_text, why",
    [
        ("SLAVE", "brokerRole=SLAVE\n", "brokerRole=SLAVE needs haMasterAddress=host:port (or shmq replica --master)"),
        (
            "SYNC_MASTER",
            "brokerRole=SYNC_MASTER\nhaListenPort=0\n",
            "brokerRole=SYNC_MASTER needs haListenPort > 0: replicas acknowledge sends through the HA sender",
        ),
    ],
)
def test_roles_that_cannot_keep_their_promise_are_refused(tmp_path, store_dir, broker_name, role, conf_text, why):
    conf = tmp_path / "broker.conf"
    conf.write_text(conf_text)
    out = _cli(store_dir, "--name", broker_name, "--config", str(conf))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"shmq broker: error: {why}"]
    with pytest.raises(ConfigError, match=f"brokerRole={role}"):
        shmq.Broker(store_dir, broker_name, str(conf))
    assert not os.path.exists(os.path.join(store_dir, "commitlog"))  # nothing was written


def test_broker_name_from_the_config(store_dir, broker_name, config):
    with shmq.Broker(store_dir, config=dict(config, brokerName=broker_name)) as b:
        assert b.name == broker_name
        with Producer("pg", broker=broker_name) as p:
            assert p.send(Message("Named", b"x")).status is shmq.SendStatus.SEND_OK
    with pytest.raises(ConfigError, match="contradicts brokerName"):
        shmq.Broker(store_dir, broker_name + "x", dict(config, brokerName=broker_name))


def test_cli_refuses_a_name_contradicting_broker_name_and_unsupported_keys(tmp_path, store_dir, broker_name):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName={broker_name}\n")
    out = _cli(store_dir, "--name", broker_name + "x", "--config", str(conf))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "contradicts brokerName" in out.stderr
    conf.write_text("osPageCacheBusyTimeOutMills=1000\n")
    out = _cli(store_dir, "--name", broker_name, "--config", str(conf))
    assert out.returncode == 2 and "'osPageCacheBusyTimeOutMills' is not supported yet" in out.stderr


def test_broker_log_and_root_made_by_the_launcher_are_private(tmp_path, broker_name, ipc_tracker):
    """shmq.Broker creates the store root and broker.log before the broker runs: both as
    private as the store's own files, whatever the umask."""
    store = ipc_tracker.store(str(tmp_path / "fresh"))
    old = os.umask(0)
    try:
        with shmq.Broker(store, broker_name):
            assert os.stat(store).st_mode & 0o777 == 0o700
            assert os.stat(os.path.join(store, "broker.log")).st_mode & 0o777 == 0o600
    finally:
        os.umask(old)
