"""A client run by another user against root's broker: one clear shmq error naming the owner,
whether the broker's state segment is closed to that user (the default, 0600) or readable
while its control queue and semaphores are not."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable
from multiprocessing.connection import Connection

import pytest

import shmq
from shmq.ring.state import state_name

ctx = mp.get_context("fork")
NOBODY = 65534


def _as_nobody(fn: Callable[[], object], out: Connection) -> None:
    """Run ``fn`` as uid/gid 65534 and report what it raised (type name, message)."""
    try:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        fn()
        out.send(("no error", ""))
    except BaseException as e:  # noqa: BLE001 - report whatever it is: the test judges it
        out.send((type(e).__name__, str(e)))
    finally:
        os._exit(0)


def _run_as_nobody(fn: Callable[[], object]) -> tuple[str, str]:
    mine, theirs = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_as_nobody, args=(fn, theirs))
    p.start()
    theirs.close()
    try:
        assert mine.poll(60), "the client did not answer"
        return mine.recv()
    finally:
        mine.close()
        p.join(30)


@pytest.fixture
def root_broker(store_dir, broker_name, config):
    if os.geteuid() != 0:
        pytest.skip("needs root (to run a client as another user)")
    with shmq.Broker(store_dir, broker_name, config) as broker:
        yield broker


def _clients(broker: str) -> list[Callable[[], object]]:
    return [
        lambda: shmq.Producer("pg", broker=broker, start_timeout=2).start(),
        lambda: shmq.Admin(broker).topics(),
        lambda: shmq.Admin(broker).create_topic("T"),
    ]


@pytest.mark.parametrize("which", [0, 1, 2], ids=["producer", "admin-read", "admin-call"])
def test_another_users_client_gets_one_clear_shmq_error(root_broker, broker_name, which):
    kind, message = _run_as_nobody(_clients(broker_name)[which])
    assert kind == "ForeignOwnerError", (kind, message)
    assert "uid 0 (root)" in message and "\n" not in message


@pytest.mark.parametrize("which", [0, 2], ids=["producer", "admin-call"])
def test_readable_state_but_closed_queue_is_the_same_clear_error(root_broker, broker_name, which):
    """The state segment readable by all (an operator's chmod): the SysV objects refuse the
    client with EACCES, which must not come out as ``sysv_ipc.PermissionsError``."""
    os.chmod(f"/dev/shm/{state_name(broker_name).lstrip('/')}", 0o644)
    kind, message = _run_as_nobody(_clients(broker_name)[which])
    assert kind == "ForeignOwnerError", (kind, message)
    assert "uid 0 (root)" in message and "\n" not in message
