"""What ``Admin`` reads from the state segment: topics with their queue offsets, clients, DLQ sizes.

The broker publishes these for every reader, so answering them costs the broker nothing (no
control-queue request). Each function here is pure over a ``StateView`` and copies what it
returns, so ``StateReader.read`` can call it inside its seqlock retry and tests can call it on
a view of a plain buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shmq.broker.publish import ROLE_CONSUMER, ROLE_PRODUCER
from shmq.model.system_topics import DLQ_GROUP_TOPIC_PREFIX, is_system_topic
from shmq.ring.state import StateView

ROLE_NAMES = {ROLE_PRODUCER: "producer", ROLE_CONSUMER: "consumer"}


@dataclass(frozen=True)
class QueueStatus:
    """One queue: its lowest offset still stored and the offset its next message gets."""

    queue_id: int
    min_offset: int
    max_offset: int
    broker: str = ""  # set by a cluster admin: the broker the queue is on

    @property
    def messages(self) -> int:
        return self.max_offset - self.min_offset


@dataclass(frozen=True)
class TopicStatus:
    """A topic as published: perm, queue counts, per-queue offsets and the broker's counters
    since it started (``msgs_in``/``bytes_in``: messages stored in the topic)."""

    topic: str
    perm: int
    read_queue_nums: int
    write_queue_nums: int
    system: bool
    msgs_in: int
    bytes_in: int
    queues: list[QueueStatus] = field(default_factory=list)
    brokers: tuple[str, ...] = ()  # set by a cluster admin: the brokers holding the topic

    @property
    def messages(self) -> int:
        """Messages stored over all queues (max - min offsets)."""
        return sum(q.messages for q in self.queues)

    @property
    def max_offset(self) -> int:
        """The sum of the queues' max offsets: every message ever stored in the topic."""
        return sum(q.max_offset for q in self.queues)

    @property
    def dlq(self) -> bool:
        """A group's dead-letter topic (``%DLQ%<group>``)."""
        return self.topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


@dataclass(frozen=True)
class ClientInfo:
    """An attached client: its channel's fill is the bytes waiting in each of its rings."""

    client_id: int
    pid: int
    role: str
    group: str | None
    attached_ms: int
    request_fill: int
    response_fill: int
    broker: str = ""  # the broker it is attached to


@dataclass(frozen=True)
class DlqInfo:
    """A group's dead-letter topic ``%DLQ%<group>`` and how many messages it holds."""

    group: str
    topic: str
    queues: int
    messages: int
    broker: str = ""  # the broker holding it


def _name(raw: bytes) -> str:
    return bytes(raw).rstrip(b"\0").decode(errors="replace")


def _topic_at(v: StateView, slot: int) -> TopicStatus:
    t = v.topics[slot]
    name = _name(t["name"])
    rows = v.topic_queues(slot)
    queues = [QueueStatus(int(q["queue_id"]), int(q["min_offset"]), int(q["max_offset"])) for q in rows]
    return TopicStatus(
        name,
        int(t["perm"]),
        int(t["read_queues"]),
        int(t["write_queues"]),
        is_system_topic(name),
        int(t["msgs_in"]),
        int(t["bytes_in"]),
        queues,
    )


def all_topics(v: StateView) -> dict[str, TopicStatus]:
    """Every published topic by name, sorted."""
    found = [_topic_at(v, int(s)) for s in (v.topics["used"] != 0).nonzero()[0]]
    return {t.topic: t for t in sorted(found, key=lambda t: t.topic)}


def one_topic(v: StateView, topic: str) -> TopicStatus | None:
    """``topic``'s status; None if the broker has no such topic."""
    slot = v.topic_slot(topic)
    return None if slot is None else _topic_at(v, slot)


def clients(v: StateView) -> list[ClientInfo]:
    """Every attached client, oldest first."""
    out = []
    for c in v.clients[v.clients["used"] != 0]:
        g = int(c["group"])
        group = _name(v.groups[g]["name"]) if 0 <= g < len(v.groups) and v.groups[g]["used"] else None
        out.append(
            ClientInfo(
                int(c["client_id"]),
                int(c["pid"]),
                ROLE_NAMES.get(int(c["role"]), "unknown"),
                group,
                int(c["attached_ms"]),
                int(c["request_fill"]),
                int(c["response_fill"]),
            )
        )
    return sorted(out, key=lambda c: (c.attached_ms, c.client_id))


def dead_letters(v: StateView) -> list[DlqInfo]:
    """Every ``%DLQ%<group>`` topic with its stored message count, by group."""
    return [
        DlqInfo(name[len(DLQ_GROUP_TOPIC_PREFIX) :], name, len(t.queues), t.messages)
        for name, t in all_topics(v).items()
        if name.startswith(DLQ_GROUP_TOPIC_PREFIX)
    ]
