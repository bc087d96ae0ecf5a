"""Whose IPC objects a client trusts, and the owners the kernel reports (issue 10, B7)."""

from __future__ import annotations

import os

import pytest
import sysv_ipc

from shmq.errors import ForeignOwnerError
from shmq.ring.owner import Trust, refuse_squatters, sysv_owner
from shmq.ring.state import StateReader, StateWriter


def test_trust_accepts_its_users_and_its_group_only():
    trust = Trust(frozenset({1000, 0}), gid=50)
    trust.check("x", 1000, 7)
    trust.check("x", 0, 0)
    trust.check("x", 2000, 50)  # a member of the broker's shmGroup
    with pytest.raises(ForeignOwnerError, match="x belongs to uid 2000"):
        trust.check("x", 2000, 51)
    with pytest.raises(ForeignOwnerError, match="belongs to uid 2000"):
        trust.check("x", 0, 7, creator=2000)  # made by 2000, then given to root with IPC_SET
    with pytest.raises(ForeignOwnerError):
        Trust(frozenset({1000})).check("x", 2000, 50)  # no group: a gid alone proves nothing


def test_client_trusts_a_group_only_if_it_is_a_member():
    mine = os.getegid()
    assert Trust.client(mine).gid == mine
    assert Trust.client(None).gid is None
    stranger_gid = max([mine, *os.getgroups()]) + 12345
    assert Trust.client(stranger_gid).gid is None
    assert Trust.client().uids == {os.geteuid(), 0}


def test_state_segment_announces_the_shm_group(broker_name, store_dir):
    gid = os.getegid()
    writer = StateWriter.create(broker_name, store_dir, 1, 2, shm_gid=gid)
    try:
        reader = StateReader.open(broker_name)
        assert reader.trust.gid == gid
        reader.close()
    finally:
        writer.close()
        writer.unlink()
    writer = StateWriter.create(broker_name, store_dir, 1, 2)
    try:
        reader = StateReader.open(broker_name)
        assert reader.trust.gid is None
        reader.close()
    finally:
        writer.close()
        writer.unlink()


def test_sysv_owner_and_own_objects_are_no_squatters(broker_name, store_dir):
    mq = sysv_ipc.MessageQueue(None, sysv_ipc.IPC_CREX, mode=0o600)
    try:
        assert sysv_owner("msg", mq.key) == (os.geteuid(), os.getegid(), os.geteuid())
        refuse_squatters(broker_name, [("msg", mq.key)])  # ours: fine
    finally:
        mq.remove()
    assert sysv_owner("msg", mq.key) is None
