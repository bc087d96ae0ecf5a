"""Consumer groups (membership with a version) and their committed offsets (config/consumerOffset.json)."""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from shmq.broker.topics import MAX_QUEUE_NUMS
from shmq.codec.record import TOPIC_PATTERN, check_topic
from shmq.errors import MetadataError
from shmq.store.config_files import load_json, set_aside, write_json
from shmq.store.consume_queue import MAX_QUEUE_ID, queue_id_of
from shmq.store.queue_table import MAX_OFFSET

log = logging.getLogger("shmq.broker")

CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"
# a SimpleConsumer's group: the broker hands messages out (POP); members own no queues
POP = "POP"
MODELS = (CLUSTERING, BROADCASTING, POP)
MAX_GROUP_LENGTH = 127  # RocketMQ allows 255; the state segment's name fields hold 128 bytes


@functools.lru_cache(maxsize=1024)
def check_group(group: str) -> str:
    """A consumer or producer group name as RocketMQ validates it (its topic characters)."""
    if not isinstance(group, str) or not 0 < len(group) <= MAX_GROUP_LENGTH or not TOPIC_PATTERN.match(group):
        raise ValueError(f"group must be 1-{MAX_GROUP_LENGTH} characters of [%|a-zA-Z0-9_-], got {group!r:.80}")
    return group


@dataclass
class ConsumerGroup:
    """A group's live members (client id -> subscriptions); ``version`` bumps on every change."""

    name: str
    model: str = CLUSTERING
    # client id -> topic -> tag expression, or {"type": "SQL92", "expression": text}
    members: dict[int, dict[str, str | dict[str, str]]] = field(default_factory=dict)
    version: int = 0


class ConsumerManager:
    """Who consumes what; consumers rebalance from the members the broker publishes."""

    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroup] = {}

    def join(
        self, group: str, client_id: int, model: str, subscriptions: dict[str, str | dict[str, str]]
    ) -> ConsumerGroup:
        check_group(group)
        if model not in MODELS:
            raise ValueError(f"message model must be one of {MODELS}, got {model!r}")
        g = self.groups.setdefault(group, ConsumerGroup(group, model))
        if g.members and g.model != model:
            raise ValueError(f"group {group!r} is {g.model}; a member cannot join it as {model}")
        g.model = model
        g.members[client_id] = {str(t): e if isinstance(e, dict) else str(e) for t, e in subscriptions.items()}
        g.version += 1
        return g

    def leave(self, group: str, client_id: int) -> bool:
        g = self.groups.get(group)
        if g is None or g.members.pop(client_id, None) is None:
            return False
        g.version += 1
        return True

    def sql_subscriptions(self) -> list[tuple[str, str, str]]:
        """(topic, group, expression) of every group whose members all filter a topic with the
        same SQL92 expression (members that disagree: no bitmap, consumers evaluate exactly)."""
        out = []
        for name, g in sorted(self.groups.items()):
            per_topic: dict[str, set[str | None]] = {}
            for subs in g.members.values():
                for topic, e in subs.items():
                    per_topic.setdefault(topic, set()).add(e["expression"] if isinstance(e, dict) else None)
            out += [
                (topic, name, next(iter(es)))
                for topic, es in sorted(per_topic.items())
                if len(es) == 1 and None not in es
            ]
        return out  # type: ignore[return-value]

    def remove_client(self, client_id: int) -> list[str]:
        """Drop a client from every group (detach or death); the groups that changed."""
        return [name for name in list(self.groups) if self.leave(name, client_id)]


def parse_offsets(data: Any) -> dict[tuple[str, str, int], int]:
    """consumerOffset.json's table with every value checked; a wrong one (ValueError, TypeError)
    makes the whole copy unusable, since dropping one entry would silently reset that offset."""
    table = data.get("offsetTable") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise ValueError('not a {"offsetTable": {...}} object')
    out: dict[tuple[str, str, int], int] = {}
    for key, queues in table.items():
        topic, _, group = key.partition("@")
        if not group:
            raise ValueError(f"key {key!r:.80} is not topic@group")
        check_topic(topic)
        if not isinstance(queues, dict):
            raise ValueError(f"{key!r:.80}: not an object of queue id -> offset")
        for qid, offset in queues.items():
            q = queue_id_of(qid)
            if q is None:
                raise ValueError(f"{key!r:.80}: queue id {qid!r:.20} is not in 0..{MAX_QUEUE_ID}")
            if not isinstance(offset, int) or isinstance(offset, bool) or not -1 <= offset <= MAX_OFFSET:
                raise ValueError(f"{key!r:.80} queue {qid}: offset {offset!r:.30} is not an int in -1..2^63-1")
            out[(group, topic, q)] = offset
    return out


class ConsumerOffsetManager:
    """Committed offsets per (group, topic, queue); RocketMQ's `topic@group` JSON layout on disk.

    A damaged file is never read as "no offsets" (a LAST_OFFSET group would then skip what
    arrived while it was away): the previous copy (``.bak``, at most one persist interval
    older: groups re-consume a little) is used with an error logged, and with no valid copy
    the broker refuses to start (MetadataError) until an operator restores or removes the file.
    """

    def __init__(self, store_dir: str) -> None:
        self.path = os.path.join(store_dir, "config", "consumerOffset.json")
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.dirty = False
        loaded = load_json(self.path, parse_offsets)
        if loaded.damaged and loaded.source is None:
            raise MetadataError(
                f"consumer offsets cannot be read ({' | '.join(loaded.problems)}); the broker "
                f"will not start and reset what groups committed. Restore a good copy to "
                f"{self.path}, or remove it to start with no committed offsets"
            )
        if loaded.source is not None:
            self.offsets = parse_offsets(loaded.data)
        if loaded.damaged:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(str(loaded.source))))
            aside = set_aside(self.path)
            log.error(
                "consumer offsets damaged: %s. Done instead: loaded %d offsets from %s (written %s); groups "
                "re-consume what they committed after it; the damaged file is kept as %s",
                " | ".join(loaded.problems),
                len(self.offsets),
                loaded.source,
                when,
                aside,
            )

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Keep an offset; ValueError for one the loader would refuse (it is never persisted)."""
        if type(offset) is not int or not 0 <= offset <= MAX_OFFSET:
            raise ValueError(f"offset must be an integer in 0..{MAX_OFFSET}, got {offset!r:.40}")
        if type(queue_id) is not int or not 0 <= queue_id < MAX_QUEUE_NUMS:
            raise ValueError(f"queue id must be an integer in 0..{MAX_QUEUE_NUMS - 1}, got {queue_id!r:.40}")
        check_group(group)
        check_topic(topic)
        self.offsets[(group, topic, queue_id)] = offset
        self.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for this queue."""
        return self.offsets.get((group, topic, queue_id), -1)

    def persist(self) -> None:
        table: dict[str, dict[str, int]] = {}
        for (group, topic, qid), offset in sorted(self.offsets.items()):
            table.setdefault(f"{topic}@{group}", {})[str(qid)] = offset
        write_json(self.path, {"offsetTable": table})
        self.dirty = False
