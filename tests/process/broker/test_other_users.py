"""Other users of the machine: a broker refuses names another user squats, and clients refuse a
broker that another user runs under the name they asked for (issue 10, B7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import shmq
from shmq import Producer
from shmq.errors import BrokerStartError, ForeignOwnerError
from shmq.ring import shm
from shmq.ring.channel import broker_bell_name
from shmq.ring.control import ControlQueue, sysv_key
from shmq.ring.doorbell import Doorbell
from shmq.ring.liveness import Liveness
from shmq.ring.state import StateReader
from tests.ipc_tracking import existing, remove, store_objects
from tests.waiting import wait_for

from .other_user import Stranger, stranger  # noqa: F401 (fixture)


def _broker_argv(store_dir: str, name: str) -> list[str]:
    return [sys.executable, "-m", "shmq", "broker", "--store", store_dir, "--name", name]


def _start_as(stranger: Stranger, store_dir: str, name: str) -> tuple[subprocess.Popen, str]:
    """The stranger's broker; returns once it serves (or fails the test with its log)."""
    log_path = os.path.join(stranger.home, f"{name}.log")
    with open(log_path, "wb") as log:
        p = stranger.popen(_broker_argv(store_dir, name), stdout=log, stderr=subprocess.STDOUT)
    serving = wait_for(lambda: p.poll() is not None or "serving store" in Path(log_path).read_text(), 30)
    assert serving and p.poll() is None, Path(log_path).read_text()
    return p, log_path


def test_clients_refuse_a_broker_another_user_runs_under_the_name(stranger, broker_name, ipc_tracker):
    store_dir = ipc_tracker.store(os.path.join(stranger.home, "store"))
    p, log_path = _start_as(stranger, store_dir, broker_name)
    try:
        with pytest.raises(ForeignOwnerError, match=f"belongs to uid {stranger.uid} \\({stranger.name}\\)"):
            Producer("pg", broker=broker_name, start_timeout=2.0).start()
        with pytest.raises(ForeignOwnerError):
            shmq.Admin(broker_name).topics()
        with pytest.raises(ForeignOwnerError):
            StateReader.open(broker_name)  # the monitor goes through this too
        assert "attached" not in Path(log_path).read_text()  # no channel was ever made for us
    finally:
        Stranger.stop(p)  # runuser reports the SIGTERM it passed on; the broker's log says how it ended
        assert f"broker {broker_name!r} stopped" in Path(log_path).read_text()
    assert shm.leftovers(broker_name) == [] and existing(store_objects(store_dir)) == []


def _squat_bell(name: str, _store: str) -> object:
    return Doorbell.create(broker_bell_name(name))


def _squat_control(_name: str, store: str) -> object:
    return ControlQueue.create(sysv_key(store, "control"))


def _squat_alive(_name: str, store: str) -> object:
    return Liveness.hold(sysv_key(store, "alive"))  # held: looks like a live broker


@pytest.mark.parametrize(
    "squat, what",
    [(_squat_bell, "/dev/shm/sem.shmq."), (_squat_control, "SysV message queue"), (_squat_alive, "SysV semaphore")],
    ids=["doorbell", "control", "liveness"],
)
def test_non_root_broker_refuses_a_squatted_name_in_one_line(stranger, broker_name, ipc_tracker, squat, what):
    """Root squats one of the names a non-root broker needs (a name any user can compute): the
    broker exits 2 with one line naming the owner, no traceback, and leaves nothing behind."""
    store_dir = ipc_tracker.store(os.path.join(stranger.home, "store"))
    squatter = squat(broker_name, store_dir)
    try:
        p = stranger.popen(
            _broker_argv(store_dir, broker_name), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        _out, err = p.communicate(timeout=30)
        assert p.returncode == 2, err
        assert "Traceback" not in err
        line = err.strip().splitlines()[-1]
        assert line.startswith("shmq broker: error:") and what in line and "belongs to uid 0 (root)" in line, err
        left = shm.leftovers(broker_name)
        assert left == (["sem." + broker_bell_name(broker_name)[1:]] if squat is _squat_bell else [])
        assert existing(store_objects(store_dir)) == (
            []
            if squat is _squat_bell
            else [
                (
                    "msg" if squat is _squat_control else "sem",
                    sysv_key(store_dir, "control" if squat is _squat_control else "alive"),
                )
            ]
        )
    finally:
        if isinstance(squatter, Doorbell):
            squatter.close()
            squatter.unlink()
        elif isinstance(squatter, ControlQueue):
            squatter.remove()
        else:
            squatter.release()  # type: ignore[attr-defined]


def test_root_broker_refuses_objects_of_another_user(stranger, broker_name, store_dir):
    """A leftover of another user under our name is not silently removed by a root broker (it may
    be that user's live broker): the start fails with its owner named."""
    code = (
        "from shmq.ring.doorbell import Doorbell; from shmq.ring.channel import broker_bell_name; "
        f"Doorbell.create(broker_bell_name({broker_name!r})).close()"
    )
    made = stranger.python(code)
    assert made.returncode == 0, made.stderr
    try:
        p = subprocess.run(_broker_argv(store_dir, broker_name), capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and "Traceback" not in p.stderr
        assert f"belongs to uid {stranger.uid} ({stranger.name})" in p.stderr
        assert existing(store_objects(store_dir)) == []
        with pytest.raises(BrokerStartError, match="belongs to uid"):
            shmq.Broker(store_dir, broker_name)  # which reclaims after a failed start: not the other user's
        assert shm.leftovers(broker_name) == ["sem." + broker_bell_name(broker_name)[1:]]
    finally:
        shm.remove_leftovers(broker_name)


def test_store_of_another_user_is_refused(stranger, store_dir):
    """Whoever owns the store folder can swap its files or hold its lock: refuse it, named."""
    os.makedirs(store_dir)
    os.chown(store_dir, stranger.uid, -1)
    p = subprocess.run(_broker_argv(store_dir, "x"), capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"store folder {store_dir} belongs to uid {stranger.uid} ({stranger.name})" in p.stderr
    assert existing(store_objects(store_dir)) == []


def test_queue_another_user_made_and_gave_to_root_is_refused(stranger, ipc_tracker, store_dir):
    """The creator of a SysV object may set its owner uid to anyone, root included (IPC_SET): a
    client checks the creator too."""
    from shmq.ring.owner import Trust  # here, so that the other tests of this file also run on older shmq

    key = sysv_key(store_dir, "control")
    code = (
        f"import sysv_ipc; mq = sysv_ipc.MessageQueue({key}, sysv_ipc.IPC_CREX, mode=0o666); mq.uid = 0; "
        "print(mq.uid, mq.cuid)"
    )
    made = stranger.python(code)
    try:
        assert made.returncode == 0, made.stderr
        assert made.stdout.split() == ["0", str(stranger.uid)]
        with pytest.raises(ForeignOwnerError, match=f"control queue {key:#x} belongs to uid {stranger.uid}"):
            Trust.client().check_queue(key)
    finally:
        remove([("msg", key)])
