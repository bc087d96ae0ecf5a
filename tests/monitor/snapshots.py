"""Hand-made snapshots for the rates and render tests (no broker, no segment)."""

from __future__ import annotations

from dataclasses import replace

from shmq.client.admin_state import ClientInfo, QueueStatus, TopicStatus
from shmq.model.system_topics import is_system_topic
from shmq.monitor.snapshot import BrokerRow, GroupRow, ProcessRow, Snapshot

STARTED_MS = 1_700_000_000_000


def broker(**over: object) -> BrokerRow:
    row = BrokerRow(
        pid=4242,
        started_ms=STARTED_MS,
        store_dir="/srv/shmq",
        role="ASYNC_MASTER",
        version="0.14.0",
        health_ms=STARTED_MS,
        msgs_in=0,
        bytes_in=0,
        busy_rejections=0,
        min_phy_offset=0,
        max_phy_offset=0,
        flush_offset=-1,
        disk_used_ratio=0.42,
        disk_warning_ratio=0.9,
        disk_clean_ratio=0.75,
        delay_backlog=0,
        timer_backlog=0,
        half_backlog=0,
        dlq_messages=0,
        replicas=0,
        replicas_in_sync=0,
        replica_offset=-1,
        master_offset=-1,
    )
    return replace(row, **over)  # type: ignore[arg-type]


def topic(name: str, ends: list[int], size: int = 100, mins: list[int] | None = None) -> TopicStatus:
    """A topic whose queues end at ``ends`` with messages of ``size`` bytes, all put since the start."""
    mins = mins or [0] * len(ends)
    return TopicStatus(
        name,
        6,
        len(ends),
        len(ends),
        is_system_topic(name),
        sum(ends),
        sum(ends) * size,
        [QueueStatus(i, m, e) for i, (m, e) in enumerate(zip(mins, ends))],
    )


def group(
    name: str, topics: dict[str, TopicStatus], committed: dict[tuple[str, int], int], members: int = 1
) -> GroupRow:
    lag = {k: max(0, topics[k[0]].queues[k[1]].max_offset - off) for k, off in committed.items()}
    return GroupRow(name, False, members, 1, dict(committed), lag)


def snapshot(
    t: float,
    topics: list[TopicStatus],
    groups: list[GroupRow] = (),
    clients: tuple[ClientInfo, ...] = (),
    **broker_fields: object,
) -> Snapshot:
    """The snapshot ``t`` seconds after the broker started (counters summed from the topics)."""
    b = broker(msgs_in=sum(x.msgs_in for x in topics), bytes_in=sum(x.bytes_in for x in topics), **broker_fields)
    return Snapshot(
        "b1",
        STARTED_MS + int(t * 1000),
        100.0 + t,
        b,
        {x.topic: x for x in topics},
        {g.name: g for g in groups},
        clients,
        ProcessRow(12.5, 80 * 1024 * 1024, 9),
    )


def orders_run(seconds: int, sent_per_s: int = 100, consumed_per_s: int = 80) -> list[Snapshot]:
    """Orders (2 queues) receiving ``sent_per_s`` and group cg consuming ``consumed_per_s``, one snapshot a second."""
    snaps = []
    for s in range(seconds + 1):
        per_q = s * sent_per_s // 2
        done = s * consumed_per_s // 2
        t = topic("Orders", [per_q, per_q], size=1000)
        g = group("cg", {"Orders": t}, {("Orders", 0): done, ("Orders", 1): done}, members=2)
        snaps.append(snapshot(s, [t], [g]))
    return snaps
