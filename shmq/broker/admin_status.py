"""Admin commands that report on the broker itself: ``broker_status`` and ``consumer_progress``.

They answer what only the broker knows: the config in force, the store's flushed offset and
disk use, and every group's committed offsets (the state segment publishes offsets only of
groups it has a row for, so a group whose consumers are all gone would be missing from it).
What the state segment already has (counters, clients, queue offsets) the admin reads there.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from shmq.broker.groups import check_group
from shmq.config import BrokerConfig, camel
from shmq.store.space import used_ratio

if TYPE_CHECKING:
    from shmq.broker.admin import AdminTarget

JsonObject = dict[str, Any]  # an admin command's arguments or answer

SECRET_KEYS = frozenset({"haAuthToken"})  # never sent over the control queue: shown as set or not
MASK = "******"


def config_properties(config: BrokerConfig) -> dict[str, Any]:
    """Every config key under its RocketMQ (camelCase) name, as the broker holds it; secrets masked."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        key, value = camel(f.name), getattr(config, f.name)
        out[key] = (MASK if value else "") if key in SECRET_KEYS else value
    return out


def broker_status(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    """Role, version, config in force, commitlog offsets, flushed offset, disk use, client count."""
    from shmq import __version__  # the broker's own version (the package imports this module's users)

    store, cfg = b.store, b.config
    return {
        "version": __version__,
        "role": cfg.broker_role,
        "store_dir": store.store_dir,
        "commitlog_min_offset": store.commitlog.min_offset,
        "commitlog_max_offset": store.commitlog.max_offset,
        "flushed_offset": store.commitlog.queue.flushed_offset,
        "disk_used_ratio": round(used_ratio(store.store_dir), 4),
        "disk_max_used_space_ratio": cfg.disk_max_used_space_ratio / 100,
        "disk_space_warning_level_ratio": cfg.disk_space_warning_level_ratio,
        "disk_full": store.space.full,
        "clients": len(b.clients),
        "config": config_properties(cfg),
    }


def consumer_progress(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    """Per queue a group committed to or subscribes to: committed offset (-1: none) and the
    queue's min and max offsets (RocketMQ's consumerProgress: brokerOffset, consumerOffset)."""
    group = check_group(a["group"])
    queues: set[tuple[str, int]] = {(t, q) for (g, t, q) in b.offsets.offsets if g == group}
    g = b.consumers.groups.get(group)
    subscribed = {t for subs in g.members.values() for t in subs} if g is not None else set()
    for topic in subscribed:
        tc = b.topics.get(topic)
        if tc is not None:
            queues.update((topic, q) for q in range(tc.read_queue_nums))
    rows = []
    for topic, qid in sorted(queues):
        lo, hi = b.queue_offsets(topic, qid)
        rows.append(
            {
                "topic": topic,
                "queue_id": qid,
                "committed": b.offsets.query(group, topic, qid),
                "min_offset": lo,
                "max_offset": hi,
            }
        )
    return {
        "group": group,
        "online": g is not None and bool(g.members),
        "model": g.model if g is not None else None,
        "queues": rows,
    }
