"""Clients a script leaves open: at exit they shut down quietly (offsets committed, the broker
told), not from a forked child's exit; a broker that stops first is reported in one line, not
per client or thread."""

from __future__ import annotations

import os
import subprocess
import sys

import shmq
from shmq import PullConsumer

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "left_open.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(SCRIPT))))


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    return subprocess.run(
        [sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def test_clients_left_open_shut_down_quietly_at_exit(store_dir, broker_name, config) -> None:
    with shmq.Broker(store_dir, broker_name, config):
        done = _run(broker_name, "open")
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert done.stdout.split() == ["consumed", "11"]  # the forked child's exit left the clients alone
        with PullConsumer("cg-push", broker=broker_name) as c:
            queues = c.fetch_queues("Left")
            # the push consumer's offsets: committed by its shutdown at exit (nothing else commits them)
            assert sum(max(c.fetch_consume_offset(mq, from_store=True), 0) for mq in queues) == 11


def test_a_broker_stopped_first_is_one_line(store_dir, broker_name) -> None:
    done = _run(broker_name, "broker-first", store_dir)
    assert done.returncode == 0 and done.stdout.split() == ["consumed", "10"], done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lost broker {broker_name!r}: "), done.stderr
