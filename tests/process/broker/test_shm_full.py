"""/dev/shm full (another user filled it): a broker must not die of SIGBUS (issue 10, B8).

Segments are allocated (posix_fallocate) before they are used, so no room is an error for the
client that asked for a channel, or a one-line start error, never a SIGBUS. Runs the broker and
its clients in a private mount namespace with a 16 MiB tmpfs on /dev/shm, so nothing else on
the machine sees the full /dev/shm; needs root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.ipc_tracking import existing, store_objects

CHILD = os.path.join(os.path.dirname(__file__), "shm_full_child.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _in_small_shm(store_dir: str, name: str, mode: str) -> dict:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a private /dev/shm needs root and unshare")
    script = 'mount -t tmpfs -o size=16m,mode=1777 tmpfs /dev/shm && exec "$@"'
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            sys.executable,
            CHILD,
            store_dir,
            name,
            mode,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_full_dev_shm_is_an_attach_error_not_a_crash(store_dir, broker_name):
    out = _in_small_shm(store_dir, broker_name, "attach")
    assert out["alive"], out
    assert "SharedMemoryFullError" in out["big"] and "no room in /dev/shm" in out["big"], out
    assert out["early_send"] == "SEND_OK" and out["late_send"] == "SEND_OK", out
    assert out["exit"] == 0, out
    assert out["leftovers"] == [] and existing(store_objects(store_dir)) == []


def test_full_dev_shm_at_start_is_one_line_and_leaves_nothing(store_dir, broker_name):
    out = _in_small_shm(store_dir, broker_name, "start")
    assert out["exit"] == 2, out
    lines = out["stderr"].strip().splitlines()
    assert "Traceback" not in out["stderr"] and lines[-1].startswith("shmq broker: error: no room in /dev/shm"), out
    assert out["leftovers"] == [] and existing(store_objects(store_dir)) == []
