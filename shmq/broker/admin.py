"""Admin commands the broker answers over the control queue (RocketMQ's mqadmin, in-process).

Each command takes the JSON arguments of an ``Admin`` request and returns a JSON-able dict;
a ValueError becomes an error reply with its message.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

from shmq.broker.answers import Peer
from shmq.broker.groups import ConsumerManager, ConsumerOffsetManager
from shmq.broker.topics import TopicConfig, TopicConfigManager
from shmq.store.message_store import MessageStore


class AdminTarget(Protocol):
    """What admin commands act on (the broker core): a narrow view, so this module does not
    import the broker that imports it."""

    store: MessageStore
    topics: TopicConfigManager
    consumers: ConsumerManager
    offsets: ConsumerOffsetManager
    clients: dict[int, Peer]

    def update_topic(self, name: str, read_queue_nums: int | None = None, write_queue_nums: int | None = None,
                     perm: int | None = None, persist: bool = True) -> TopicConfig: ...

    def delete_topic(self, name: str) -> bool: ...

    def publish_groups(self) -> None: ...

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...

    def queue_offsets(self, topic: str, qid: int) -> tuple[int, int]: ...


def _update_topic(b: AdminTarget, client_id: int, a: dict) -> dict:
    tc = b.update_topic(str(a["topic"]), a.get("read_queue_nums"), a.get("write_queue_nums"), a.get("perm"))
    return {"topic": tc.to_json()}


def _delete_topic(b: AdminTarget, client_id: int, a: dict) -> dict:
    return {"deleted": b.delete_topic(str(a["topic"]))}


def _list_topics(b: AdminTarget, client_id: int, a: dict) -> dict:
    return {"topics": {n: t.to_json() for n, t in sorted(b.topics.topics.items())}}


def _join_group(b: AdminTarget, client_id: int, a: dict) -> dict:
    if client_id not in b.clients:
        raise ValueError(f"client {client_id} must attach before joining a consumer group")
    g = b.consumers.join(str(a["group"]), client_id, str(a.get("model", "CLUSTERING")), dict(a.get("subscriptions", {})))
    b.clients[client_id].group = g.name
    b.publish_groups()
    return {"version": g.version, "members": sorted(g.members)}


def _leave_group(b: AdminTarget, client_id: int, a: dict) -> dict:
    left = b.consumers.leave(str(a["group"]), client_id)
    if left:
        b.publish_groups()
    return {"left": left}


def _list_groups(b: AdminTarget, client_id: int, a: dict) -> dict:
    return {"groups": {n: {"model": g.model, "version": g.version, "members": sorted(g.members),
                           "subscriptions": {str(cid): s for cid, s in g.members.items()}}
                       for n, g in sorted(b.consumers.groups.items())}}


def _query_offset(b: AdminTarget, client_id: int, a: dict) -> dict:
    return {"offset": b.offsets.query(str(a["group"]), str(a["topic"]), int(a["queue_id"]))}


def _commit_offset(b: AdminTarget, client_id: int, a: dict) -> dict:
    group, topic, qid, offset = str(a["group"]), str(a["topic"]), int(a["queue_id"]), int(a["offset"])
    b.commit_offset(group, topic, qid, offset)
    return {}


def _search_offset(b: AdminTarget, client_id: int, a: dict) -> dict:
    return {"offset": b.store.get_offset_in_queue_by_time(str(a["topic"]), int(a["queue_id"]), int(a["timestamp"]))}


def _queue_offsets(b: AdminTarget, client_id: int, a: dict) -> dict:
    lo, hi = b.queue_offsets(str(a["topic"]), int(a["queue_id"]))
    return {"min_offset": lo, "max_offset": hi}


COMMANDS: dict[str, Callable[[AdminTarget, int, dict], dict]] = {
    "create_topic": _update_topic,
    "update_topic": _update_topic,
    "delete_topic": _delete_topic,
    "list_topics": _list_topics,
    "join_group": _join_group,
    "leave_group": _leave_group,
    "list_groups": _list_groups,
    "query_offset": _query_offset,
    "commit_offset": _commit_offset,
    "search_offset": _search_offset,
    "queue_offsets": _queue_offsets,
}


def handle(broker: AdminTarget, client_id: int, command: str, args: dict[str, Any]) -> dict:
    fn = COMMANDS.get(command)
    if fn is None:
        raise ValueError(f"unknown admin command {command!r}; known: {', '.join(sorted(COMMANDS))}")
    try:
        return fn(broker, client_id, args)
    except (KeyError, TypeError) as e:
        raise ValueError(f"admin command {command!r}: bad or missing argument {e}") from None
