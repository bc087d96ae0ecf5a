"""Consumer lag per group and topic, from the offsets the broker persists.

The broker writes `config/consumerOffset.json` (RocketMQ's layout: `{"offsetTable":
{"topic@group": {"queueId": nextOffsetToConsume}}}`) every flushConsumerOffsetInterval and at
shutdown, so the lag read here is as of the last persist. A queue's lag is what the group has
not consumed of what the queue holds now: its end (max offset) minus the committed offset,
the committed offset counted no lower than the queue's first offset (older messages were
deleted by cleanup and cannot be consumed) and no higher than its end. A queue of the topic the
group never committed on counts from its first offset, as RocketMQ's consumerProgress does.
Over a cluster's store root each broker's store holds the offsets of its own queues; a group's
lag on a topic is the sum over the brokers, as consumerProgress sums a group over its brokers.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from shmq.broker.groups import parse_offsets
from shmq.spark.layout import QueueExtent
from shmq.spark.planner import queue_extents
from shmq.spark.pushdown import ScanBounds
from shmq.spark.stores import StoreRef
from shmq.store.config_files import load_json

Committed = dict[tuple[str, str, int], int]  # (group, topic, queue id) -> next offset to consume, -1: none
Extents = dict[tuple[str, int], tuple[int, int]]  # (topic, queue id) -> [first offset, max offset)


@dataclass(frozen=True, slots=True)
class GroupLag:
    """One group on one topic: sums over the topic's queues (lag = broker_offset - consumer_offset)."""

    group: str
    topic: str
    queues: int
    behind: int  # queues with a lag
    broker_offset: int
    consumer_offset: int
    lag: int


def read_committed(store_dir: str) -> tuple[Committed, list[str]]:
    """The committed offsets and what went wrong reading them (one line per damaged copy).

    Like the broker, a damaged file is never read as "nothing committed" silently: the `.bak`
    copy is used and the problem reported; with no readable copy the table is empty and the
    problem says so. No file at all (no group ever committed) is not a problem."""
    loaded = load_json(os.path.join(store_dir, "config", "consumerOffset.json"), parse_offsets)
    problems = list(loaded.problems)
    if loaded.source is None:
        if problems:
            problems.append("no readable consumer offsets: consumer lag is not shown")
        return {}, problems
    if problems:
        problems.append(f"consumer lag read from {loaded.source}")
    return parse_offsets(loaded.data), problems


def store_extents(store_dir: str, topics: list[str]) -> Extents:
    """Each queue's [first, max) offsets of `topics` as a scan sees them now (live-safe ends)."""
    found: list[QueueExtent] = queue_extents(store_dir, topics, ScanBounds()) if topics else []
    return {(e.topic, e.queue_id): (e.start, e.end) for e in found}


def group_lags(committed: Committed, extents: Extents, topics: list[str] | None = None) -> list[GroupLag]:
    """The lag of every (group, topic) pair with a committed offset, sorted; only `topics` when given.

    Queues counted: those of the topic in `extents` and those the group committed on (one that
    is gone from the store counts with an empty range)."""
    pairs = sorted({(g, t) for g, t, _ in committed if topics is None or t in topics})
    out = []
    for group, topic in pairs:
        qids = sorted({q for t, q in extents if t == topic} | {q for g, t, q in committed if (g, t) == (group, topic)})
        broker = consumer = behind = 0
        for q in qids:
            first, end = extents.get((topic, q), (0, 0))
            done = min(max(committed.get((group, topic, q), -1), first), end)
            broker += end
            consumer += done
            behind += done < end
        out.append(GroupLag(group, topic, len(qids), behind, broker, consumer, broker - consumer))
    return out


def lag_for_store(store_dir: str, topics: list[str] | None = None) -> tuple[list[GroupLag], list[str]]:
    """`group_lags` over the store's own files (the topics committed on, system topics included)."""
    committed, problems = read_committed(store_dir)
    wanted = sorted({t for _, t, _ in committed if topics is None or t in topics})
    return group_lags(committed, store_extents(store_dir, wanted), topics), problems


def sum_lags(per_store: Iterable[list[GroupLag]]) -> list[GroupLag]:
    """One row per (group, topic): the queues and offsets of every store added up, sorted. Pure."""
    total: dict[tuple[str, str], GroupLag] = {}
    for lags in per_store:
        for g in lags:
            t = total.get((g.group, g.topic))
            total[(g.group, g.topic)] = (
                g
                if t is None
                else GroupLag(
                    g.group,
                    g.topic,
                    t.queues + g.queues,
                    t.behind + g.behind,
                    t.broker_offset + g.broker_offset,
                    t.consumer_offset + g.consumer_offset,
                    t.lag + g.lag,
                )
            )
    return [total[k] for k in sorted(total)]


def lag_for_stores(stores: list[StoreRef], topics: list[str] | None = None) -> tuple[list[GroupLag], list[str]]:
    """`lag_for_store` over each store, summed per (group, topic); a store's problems name its broker."""
    lags, problems = [], []
    for store in stores:
        found, trouble = lag_for_store(store.path, topics)
        lags.append(found)
        problems += [p if store.broker is None else f"broker {store.broker}: {p}" for p in trouble]
    return sum_lags(lags), problems
