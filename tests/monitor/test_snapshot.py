"""Snapshot parsing over hand-made state tables (no broker)."""

from __future__ import annotations

from shmq.monitor.snapshot import snapshot_of
from shmq.ring.state import StateLayout, StateView, format_state

LAYOUT = StateLayout(topics=8, queues=32, groups=4, members=8, offsets=16, clients=4)


def _view() -> StateView:
    buf = bytearray(LAYOUT.size)
    format_state(buf, LAYOUT, "/srv/store", 1, 2, 4242)
    v = StateView(buf, LAYOUT)
    v.topics[3] = (1, 6, 2, 2, 4, 100, 10_000, 0, 0, b"Orders")
    v.topics[5] = (1, 6, 1, 1, 6, 3, 300, 0, 0, b"%DLQ%cg")
    v.queues[4] = (3, 0, 10, 60)
    v.queues[5] = (3, 1, 0, 40)
    v.queues[6] = (5, 0, 0, 3)
    v.groups[1] = (1, 0, 2, 7, b"cg", 4)
    v.offsets[0] = (1, 1, 4, 50)
    v.offsets[1] = (1, 1, 5, 40)
    v.clients[0] = (1, 2, 999, 5, 1, 77, 1000, 64, 0)
    s = v.stats
    s["msgs_in"], s["max_phy_offset"], s["flush_offset"] = 103, 5000, 4000
    s["health_ms"], s["role"], s["version"], s["disk_used_ratio"] = 1, 1, b"9.9", 0.5
    s["replicas"], s["replica_offset"], s["dlq_messages"] = 1, 4500, 3
    return v


def test_topics_groups_clients_and_health() -> None:
    snap = snapshot_of(_view(), "b1", 10_000, 1.0)
    orders = snap.topics["Orders"]
    assert (orders.max_offset, orders.messages, orders.msgs_in) == (100, 90, 100)
    assert snap.topics["%DLQ%cg"].system and snap.topics["%DLQ%cg"].dlq and not orders.system
    cg = snap.groups["cg"]
    assert cg.committed == {("Orders", 0): 50, ("Orders", 1): 40}
    assert (cg.lag, cg.members, cg.version, cg.pop_inflight) == (10, 2, 7, 4)
    (c,) = snap.clients
    assert (c.role, c.pid, c.group, c.request_fill) == ("consumer", 999, "cg", 64)
    b = snap.broker
    assert (b.role, b.version, b.store_dir, b.pid) == ("SYNC_MASTER", "9.9", "/srv/store", 4242)
    assert (b.flush_lag, b.replica_lag, b.dlq_messages, b.disk_used_ratio) == (1000, 500, 3, 0.5)


def test_health_not_published_yet_reads_as_unknown() -> None:
    v = _view()
    v.stats["health_ms"] = 0
    assert snapshot_of(v, "b1", 0, 0.0).broker.disk_used_ratio == -1.0
