"""BrokerHealth: the slow-moving numbers a monitor shows, gathered once a second.

The per-pass counters (messages in, max offsets) are published on the 10 ms tick; these are
not on any hot path and some cost a little to gather (a statvfs for the disk ratio, a walk
over the %DLQ% queues), so the broker loop publishes them on a one-second timer. Replication
numbers come from whoever knows them: the master's HA segment or the replica's HA client
(``ReplicaHealth``); the rest from the core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from shmq.broker.pop_revive import PopReviveService
from shmq.config import SLAVE, SYNC_MASTER
from shmq.model.system_topics import TRANS_HALF_TOPIC, is_dlq_topic
from shmq.store.space import used_ratio

if TYPE_CHECKING:
    from shmq.broker.core import BrokerCore

ROLE_CODES = {"ASYNC_MASTER": 0, SYNC_MASTER: 1, SLAVE: 2}
ROLE_NAMES = {v: k for k, v in ROLE_CODES.items()}


@dataclass(frozen=True)
class ReplicaHealth:
    """Replication as the broker process sees it: on a master, how many replicas are connected,
    how many are in sync and the best acked offset (-1: none); on a replica, ``master_offset``
    is the master's log end as last heard (-1: never) and ``replica_offset`` its own."""

    replicas: int = 0
    in_sync: int = 0
    replica_offset: int = -1
    master_offset: int = -1


def pop_inflight_by_group(core: BrokerCore) -> dict[str, int]:
    """POP messages handed out and not yet acked or revived, per group with any (a walk over
    the POP queues: once a second, never per message)."""
    out: dict[str, int] = {}
    if core.pop_store is not None:
        for (group, _topic, _qid), queue in core.pop_store.state.queues.items():
            if queue.rows:
                out[group] = out.get(group, 0) + len(queue.rows)
    return out


def gather(core: BrokerCore, replication: ReplicaHealth) -> dict[str, int | float | bytes]:
    """The health fields of the state segment's stats row (``shmq.ring.state.STATS``)."""
    from shmq import __version__

    store, config = core.store, core.config
    dlq = 0
    for name in core.topics.topics:
        if is_dlq_topic(name):
            tc = core.topics.topics[name]
            for qid in range(max(tc.read_queue_nums, tc.write_queue_nums)):
                lo, hi = core.queue_offsets(name, qid)
                dlq += max(0, hi - lo)
    half = 0
    if core.transactions is not None:
        # halves past the check progress: every half below it is settled, some above it may be
        half = max(0, store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) - core.transactions.state.half_offset)
    try:
        disk = used_ratio(store.store_dir)
    except OSError:
        disk = -1.0
    return {
        "role": ROLE_CODES.get(config.broker_role, 0),
        "version": __version__.encode()[:15],
        "min_phy_offset": store.commitlog.min_offset,
        "disk_used_ratio": disk,
        "disk_warning_ratio": config.disk_space_warning_level_ratio,
        "disk_clean_ratio": config.disk_max_used_space_ratio / 100,
        "delay_backlog": core.delay.pending() if core.delay is not None else 0,
        "timer_backlog": core.timer.pending() if core.timer is not None else 0,
        "half_backlog": half,
        "dlq_messages": dlq,
        "replicas": replication.replicas,
        "replicas_in_sync": replication.in_sync,
        "replica_offset": replication.replica_offset,
        "master_offset": replication.master_offset,
        # POP: rows handed out and not yet acked or revived; copies revived to a retry topic since the start
        "pop_inflight": core.pop_store.state.rows if core.pop_store is not None else 0,
        "pop_revived": sum(s.revived for s in core.services if isinstance(s, PopReviveService)),
    }
