"""Consumer groups (membership with a version) and their committed offsets (config/consumerOffset.json)."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from shmq.broker.topics import MAX_QUEUE_NUMS
from shmq.codec.record import TOPIC_PATTERN, check_topic
from shmq.store.config_files import read_json, write_json

CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"
MODELS = (CLUSTERING, BROADCASTING)
MAX_GROUP_LENGTH = 127  # RocketMQ allows 255; the state segment's name fields hold 128 bytes
MAX_OFFSET = 2**63 - 1  # a committed offset is an i64 in the state segment and consumerOffset.json


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
    members: dict[int, dict[str, str]] = field(default_factory=dict)
    version: int = 0


class ConsumerManager:
    """Who consumes what; consumers rebalance from the members the broker publishes."""

    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroup] = {}

    def join(self, group: str, client_id: int, model: str, subscriptions: dict[str, str]) -> ConsumerGroup:
        check_group(group)
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
