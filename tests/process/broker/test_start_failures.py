"""A broker that fails to start removes every IPC object it made (issue 10, D14)."""

from __future__ import annotations

import os
import subprocess
import sys

from shmq.ring import shm
from tests.ipc_tracking import existing, store_objects


def _start(store_dir: str, name: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shmq", "broker", "--store", store_dir, "--name", name],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_late_start_failure_leaves_no_ipc_object(tmp_path, ipc_tracker):
    """A store path too long for the state segment fails after the liveness semaphore, the
    control queue and the doorbell exist (and the state segment itself was made)."""
    deep = tmp_path / ("a" * 200) / ("b" * 200) / ("c" * 120)
    store_dir = ipc_tracker.store(str(deep / "store"))
    name = ipc_tracker.name("sf")
    p = _start(store_dir, name)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("shmq broker: error: store path too long"), p.stderr
    assert shm.leftovers(name) == []
    assert existing(store_objects(store_dir)) == []
    again = _start(store_dir, name)  # the store was closed again (lock released, no traceback)
    assert again.returncode == 2 and "store path too long" in again.stderr, again.stderr
    assert os.path.exists(os.path.join(store_dir, "lock"))
