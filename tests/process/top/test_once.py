"""`shmq top` on a pipe: one frame of a running broker, every row, and exit 0."""

from __future__ import annotations

import os
import subprocess
import sys

import shmq
from shmq import Message, Producer


def test_one_frame_of_a_running_broker_on_a_pipe(store_dir, broker_name, config) -> None:
    with shmq.Broker(store_dir, name=broker_name, config=config):
        with Producer("once", broker=broker_name) as p:
            for i in range(30):
                p.send(Message(f"Piped{i:02d}", b"x"))
        out = subprocess.run(
            [sys.executable, "-m", "shmq", "top", "--name", broker_name, "--interval", "0.2"],
            capture_output=True,
            text=True,
            timeout=30,
            env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
        )
    assert out.returncode == 0, out.stderr
    assert f"shmq top - {broker_name}  ASYNC_MASTER" in out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith("Piped")]
    assert len(rows) == 30 and "more" not in out.stdout  # a pipe gets every row
    assert max(len(line) for line in out.stdout.splitlines()) > 120  # 160 columns, not 80: sparklines shown
