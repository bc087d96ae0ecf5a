"""Consumer groups (membership with a version) and their committed offsets (config/consumerOffset.json)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from shmq.store.config_files import read_json, write_json

CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"
MODELS = (CLUSTERING, BROADCASTING)


@dataclass
class ConsumerGroup:
    """A group's live members (client id -> subscriptions); ``version`` bumps on every change."""

    name: str
    model: str = CLUSTERING
    members: dict[int, dict[str, str]] = field(default_factory=dict)
    version: int = 0


class ConsumerManager:
    """Who consumes what; consumers rebalance from the members the broker publishes."""

    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroup] = {}

    def join(self, group: str, client_id: int, model: str, subscriptions: dict[str, str]) -> ConsumerGroup:
        if not group or not isinstance(group, str):
            raise ValueError(f"consumer group must be a non-empty string, got {group!r}")
        if model not in MODELS:
            raise ValueError(f"message model must be one of {MODELS}, got {model!r}")
        g = self.groups.setdefault(group, ConsumerGroup(group, model))
        if g.members and g.model != model:
            raise ValueError(f"group {group!r} is {g.model}; a member cannot join it as {model}")
        g.model = model
        g.members[client_id] = {str(t): str(e) for t, e in subscriptions.items()}
        g.version += 1
        return g

    def leave(self, group: str, client_id: int) -> bool:
        g = self.groups.get(group)
        if g is None or g.members.pop(client_id, None) is None:
            return False
        g.version += 1
        return True

    def remove_client(self, client_id: int) -> list[str]:
        """Drop a client from every group (detach or death); the groups that changed."""
        return [name for name in list(self.groups) if self.leave(name, client_id)]


class ConsumerOffsetManager:
    """Committed offsets per (group, topic, queue); RocketMQ's `topic@group` JSON layout on disk."""

    def __init__(self, store_dir: str) -> None:
        self.path = os.path.join(store_dir, "config", "consumerOffset.json")
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.dirty = False
        data = read_json(self.path, {}) or {}
        for key, queues in data.get("offsetTable", {}).items():
            topic, _, group = key.partition("@")
            for qid, offset in queues.items():
                self.offsets[(group, topic, int(qid))] = int(offset)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
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
