"""Segment naming, mapping, read-only opens and leftover removal."""

from __future__ import annotations

import os

import posix_ipc
import pytest

from shmq.ring import shm
from shmq.ring.doorbell import Doorbell


@pytest.mark.parametrize("bad", ["", "a.b", "a/b", "x" * 65, "sp ace"])
def test_bad_broker_names(bad):
    with pytest.raises(ValueError):
        shm.ipc_name(bad, "state")


def test_create_open_read_only_unlink(broker_name):
    name = shm.ipc_name(broker_name, "seg")
    seg = shm.Segment.create(name, 4096)
    seg.buf[:5] = b"hello"
    with pytest.raises(posix_ipc.ExistentialError):
        shm.Segment.create(name, 4096)
    with shm.Segment.open(name, read_only=True) as ro:
        assert bytes(ro.buf[:5]) == b"hello" and ro.size == 4096
        with pytest.raises(TypeError):
            ro.buf[0] = 1
    seg.close()
    seg.unlink()
    assert not shm.unlink_segment(name)
    with pytest.raises(posix_ipc.ExistentialError):
        shm.Segment.open(name)


def test_close_with_live_views_defers_unmap(broker_name):
    seg = shm.Segment.create(shm.ipc_name(broker_name, "seg"), 4096)
    view = seg.buf[10:20]
    seg.close()
    view[0] = 1
    seg.unlink()


def test_remove_leftovers_only_of_that_broker(broker_name):
    other = broker_name + "-b"
    shm.Segment.create(shm.ipc_name(broker_name, "a"), 64).close()
    shm.Segment.create(shm.ipc_name(other, "a"), 64).close()
    Doorbell.create(shm.ipc_name(broker_name, "bell")).close()
    assert shm.leftovers(broker_name) == [f"sem.shmq.{broker_name}.bell", f"shmq.{broker_name}.a"]
    assert len(shm.remove_leftovers(broker_name)) == 2
    assert shm.leftovers(broker_name) == []
    assert shm.remove_leftovers(other) == [f"shmq.{other}.a"]


def test_a_broker_named_ns_never_claims_a_name_servers_route_segment(broker_name):
    """Name servers' segments are ``/shmq.ns.<NS>.routes``: the cleanup of a broker named "ns"
    must leave them alone."""
    routes = f"/shmq.ns.{broker_name}.routes"
    shm.Segment.create(routes, 64).close()
    try:
        assert f"shmq.ns.{broker_name}.routes" not in shm.leftovers("ns")
        assert f"shmq.ns.{broker_name}.routes" not in shm.remove_leftovers("ns")
        assert os.path.exists(f"/dev/shm/shmq.ns.{broker_name}.routes")
    finally:
        shm.unlink_segment(routes)


def test_created_segments_are_backed_and_know_their_owner(broker_name):
    """Every page is allocated at create (a sparse segment SIGBUSes its first writer once /dev/shm
    is full), and the owner is read from the descriptor."""
    name = shm.ipc_name(broker_name, "seg")
    size = 1 << 20
    seg = shm.Segment.create(name, size)
    try:
        assert os.stat(f"/dev/shm/{name[1:]}").st_blocks * 512 >= size
        with shm.Segment.open(name, read_only=True) as ro:
            assert ro.owner == seg.owner == (os.geteuid(), os.getegid())
    finally:
        seg.close()
        seg.unlink()
