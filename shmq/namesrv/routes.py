"""The route table a name server publishes: which brokers serve, and which topics each holds.

Pure data and its codec, no I/O: the name server builds a ``RouteTable`` from the brokers'
registrations, the route segment carries its encoding, and clients decode it into the same
objects (RocketMQ's ``TopicRouteData`` with its ``BrokerData`` and ``QueueData``, plus what a
client on the same host needs to attach: the name, pid and liveness key of each broker).

The encoding is JSON: the table changes only when a broker comes, goes or changes a topic,
and clients decode it once per change. ``decode_table`` checks every field's type and range,
because anyone who can write the segment could put anything there.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from shmq.errors import ConfigError, RouteTableError
from shmq.model.message import MessageQueue
from shmq.model.perm import PERM_INHERIT, PERM_READ, PERM_RW, PERM_WRITE

FORMAT = 1
ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
MAX_BROKERS = 256
MAX_TOPICS = 100_000  # per broker
MAX_QUEUES = 65_535  # the state segment's u2 queue counts
MAX_BROKER_ID = 1024
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TOPIC_CHARS = 255
_U32 = 2**32 - 1
_U63 = 2**63 - 1


def namesrv_or_env(namesrv: str | None, broker: str | None = None) -> str | None:
    """The name server a client routes through: ``namesrv``, else ``$SHMQ_NAMESRV`` when no
    ``broker`` was given, else None (no cluster: the client attaches to one broker, as always).
    Both arguments is a contradiction and a ConfigError."""
    if namesrv is not None and broker is not None:
        raise ConfigError(f"give broker={broker!r} or namesrv={namesrv!r}, not both")
    if namesrv is not None:
        return check_namesrv_name(namesrv)
    if broker is not None:
        return None
    env = os.environ.get("SHMQ_NAMESRV") or None
    return check_namesrv_name(env) if env is not None else None


def check_namesrv_name(name: str) -> str:
    """``name`` if usable as a name server's name (the rule of broker names), else ConfigError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"bad name server name {name!r}: use 1-64 letters, digits, '_' or '-'")
    return name


@dataclass(frozen=True)
class TopicData:
    """One topic as one broker holds it (RocketMQ's QueueData)."""

    name: str
    read_queues: int
    write_queues: int
    perm: int = PERM_RW

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)


@dataclass(frozen=True)
class BrokerData:
    """One registered broker process (RocketMQ's BrokerData, one entry per broker id)."""

    broker_name: str  # RocketMQ's brokerName: a master and its replicas share it
    attach_name: str  # what clients attach with (``broker=``): the process's own name
    cluster: str
    broker_id: int  # 0: the master; >= 1: a replica
    role: str
    pid: int
    alive_key: int  # the broker's liveness semaphore (shmq.ring.liveness.Watch)
    store_dir: str
    registered_ms: int
    topics: tuple[TopicData, ...] = ()  # sorted by name

    @property
    def is_master(self) -> bool:
        return self.broker_id == 0

    def topic(self, name: str) -> TopicData | None:
        """The broker's entry for topic ``name``, None if it does not hold it."""
        for t in self.topics:
            if t.name == name:
                return t
        return None


@dataclass(frozen=True)
class TopicRoute:
    """Where a topic lives in the cluster (RocketMQ's TopicRouteData)."""

    topic: str
    brokers: tuple[BrokerData, ...]  # every broker process holding the topic, sorted

    @property
    def exists(self) -> bool:
        return bool(self.brokers)

    def master(self, broker_name: str) -> BrokerData | None:
        """The registered master of ``broker_name``, None if it has none now."""
        for b in self.brokers:
            if b.broker_name == broker_name and b.is_master:
                return b
        return None

    def read_from(self, broker_name: str) -> BrokerData | None:
        """Where ``broker_name``'s queues are read: its master, else its lowest-id replica."""
        found = [b for b in self.brokers if b.broker_name == broker_name]
        return min(found, key=lambda b: b.broker_id) if found else None

    def write_queues(self) -> list[MessageQueue]:
        """The queues a producer sends to: every master's write queues, if it may be written;
        sorted by (broker name, queue id), the order selectors and sharding keys index."""
        out: list[MessageQueue] = []
        for b in self.brokers:
            t = b.topic(self.topic)
            if b.is_master and t is not None and t.writable:
                out.extend(MessageQueue(self.topic, b.broker_name, q) for q in range(t.write_queues))
        return sorted(out, key=_queue_order)

    def read_queues(self) -> list[MessageQueue]:
        """The queues a consumer group reads: each broker name's read queues (as its master
        counts them, else the replica it is read from), if readable; sorted as ``write_queues``."""
        out: list[MessageQueue] = []
        for name in sorted({b.broker_name for b in self.brokers}):
            b = self.read_from(name)
            t = b.topic(self.topic) if b is not None else None
            if t is not None and t.readable:
                out.extend(MessageQueue(self.topic, name, q) for q in range(t.read_queues))
        return out


def _queue_order(mq: MessageQueue) -> tuple[str, int]:
    return mq.broker_name, mq.queue_id


@dataclass(frozen=True)
class RouteTable:
    """One consistent reading of a name server's routes."""

    namesrv: str
    incarnation: int  # new every time a name server process starts under this name
    version: int  # raised by the name server on every change
    brokers: tuple[BrokerData, ...] = field(default=())  # sorted by (broker name, broker id)

    def clusters(self) -> dict[str, list[str]]:
        """Cluster name -> its broker names, sorted (RocketMQ's clusterAddrTable)."""
        out: dict[str, set[str]] = {}
        for b in self.brokers:
            out.setdefault(b.cluster, set()).add(b.broker_name)
        return {c: sorted(names) for c, names in sorted(out.items())}

    def masters(self, cluster: str | None = None) -> list[BrokerData]:
        """The masters (of ``cluster`` if given), sorted by broker name."""
        return [b for b in self.brokers if b.is_master and (cluster is None or b.cluster == cluster)]

    def broker(self, broker_name: str, broker_id: int = 0) -> BrokerData | None:
        """The registration of ``broker_name`` with ``broker_id``, None if none now."""
        for b in self.brokers:
            if b.broker_name == broker_name and b.broker_id == broker_id:
                return b
        return None

    def replicas(self, broker_name: str) -> list[BrokerData]:
        """The registered replicas of ``broker_name``, by id."""
        return [b for b in self.brokers if b.broker_name == broker_name and not b.is_master]

    def topic_route(self, topic: str) -> TopicRoute:
        """The brokers holding ``topic`` (an empty route if none does)."""
        return TopicRoute(topic, tuple(b for b in self.brokers if b.topic(topic) is not None))

    def without_dead(self, alive: Callable[[BrokerData], bool]) -> RouteTable:
        """This table without the brokers ``alive`` says are gone (the same table if none is)."""
        kept = tuple(b for b in self.brokers if alive(b))
        return self if len(kept) == len(self.brokers) else replace(self, brokers=kept)

    def with_broker(self, broker: BrokerData) -> RouteTable:
        """This table with ``broker`` added or replacing its (broker name, id) entry, version + 1."""
        rest = [b for b in self.brokers if (b.broker_name, b.broker_id) != (broker.broker_name, broker.broker_id)]
        return replace(self, version=self.version + 1, brokers=tuple(sorted([*rest, broker], key=_broker_order)))

    def without_broker(self, broker_name: str, broker_id: int) -> RouteTable:
        """This table without the entry (broker name, id), version + 1 if there was one."""
        kept = tuple(b for b in self.brokers if (b.broker_name, b.broker_id) != (broker_name, broker_id))
        return self if len(kept) == len(self.brokers) else replace(self, version=self.version + 1, brokers=kept)


def _broker_order(b: BrokerData) -> tuple[str, int]:
    return b.broker_name, b.broker_id


# ---------------------------------------------------------------------- codec


def encode_table(table: RouteTable) -> bytes:
    """The table as compact JSON (topics as ``[name, read, write, perm]`` rows)."""
    doc = {
        "format": FORMAT,
        "namesrv": table.namesrv,
        "incarnation": table.incarnation,
        "version": table.version,
        "brokers": [
            {
                "broker_name": b.broker_name,
                "attach_name": b.attach_name,
                "cluster": b.cluster,
                "broker_id": b.broker_id,
                "role": b.role,
                "pid": b.pid,
                "alive_key": b.alive_key,
                "store_dir": b.store_dir,
                "registered_ms": b.registered_ms,
                "topics": [[t.name, t.read_queues, t.write_queues, t.perm] for t in b.topics],
            }
            for b in table.brokers
        ],
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def decode_table(data: bytes) -> RouteTable:
    """The table ``encode_table`` wrote; RouteTableError (one line) for anything else."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise RouteTableError(f"route table is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise RouteTableError("route table is not a JSON object")
    if doc.get("format") != FORMAT:
        raise RouteTableError(f"route table format {doc.get('format')!r} is not {FORMAT}")
    brokers = doc.get("brokers")
    if not isinstance(brokers, list) or len(brokers) > MAX_BROKERS:
        raise RouteTableError(f"route table brokers must be a list of at most {MAX_BROKERS}")
    decoded = tuple(sorted((_broker(b) for b in brokers), key=_broker_order))
    if len({_broker_order(b) for b in decoded}) != len(decoded):
        raise RouteTableError("route table names one (broker name, broker id) twice")
    return RouteTable(
        namesrv=_name(doc, "namesrv"),
        incarnation=_int(doc, "incarnation", 0, _U63),
        version=_int(doc, "version", 0, _U63),
        brokers=decoded,
    )


def _broker(b: Any) -> BrokerData:
    if not isinstance(b, dict):
        raise RouteTableError("route table broker entry is not an object")
    role = b.get("role")
    if role not in ROLES:
        raise RouteTableError(f"route table broker role {role!r} is not one of {', '.join(ROLES)}")
    topics = b.get("topics")
    if not isinstance(topics, list) or len(topics) > MAX_TOPICS:
        raise RouteTableError(f"route table topics must be a list of at most {MAX_TOPICS}")
    store_dir = b.get("store_dir")
    if not isinstance(store_dir, str) or len(store_dir) > 4096:
        raise RouteTableError("route table store_dir must be a path string")
    return BrokerData(
        broker_name=_name(b, "broker_name"),
        attach_name=_name(b, "attach_name"),
        cluster=_name(b, "cluster"),
        broker_id=_int(b, "broker_id", 0, MAX_BROKER_ID),
        role=role,
        pid=_int(b, "pid", 1, 2**22),
        alive_key=_int(b, "alive_key", 1, _U32),
        store_dir=store_dir,
        registered_ms=_int(b, "registered_ms", 0, _U63),
        topics=tuple(sorted((_topic(t) for t in topics), key=lambda t: t.name)),
    )


def _topic(t: Any) -> TopicData:
    if not (isinstance(t, list) and len(t) == 4):
        raise RouteTableError("route table topic entry is not [name, read, write, perm]")
    name, read, write, perm = t
    if not isinstance(name, str) or not 0 < len(name) <= _TOPIC_CHARS:
        raise RouteTableError(f"route table topic name {name!r} is not a topic name")
    for what, v, hi in (("read queues", read, MAX_QUEUES), ("write queues", write, MAX_QUEUES)):
        if type(v) is not int or not 0 <= v <= hi:
            raise RouteTableError(f"route table topic {name!r} {what} {v!r} is not in 0..{hi}")
    if type(perm) is not int or perm & ~(PERM_RW | PERM_INHERIT):
        raise RouteTableError(f"route table topic {name!r} perm {perm!r} is not a perm")
    return TopicData(name, read, write, perm)


def _name(doc: dict[str, Any], key: str) -> str:
    v = doc.get(key)
    if not isinstance(v, str) or not _NAME.fullmatch(v):
        raise RouteTableError(f"route table {key} {v!r} is not a name")
    return v


def _int(doc: dict[str, Any], key: str, lo: int, hi: int) -> int:
    v = doc.get(key)
    if type(v) is not int or not lo <= v <= hi:
        raise RouteTableError(f"route table {key} {v!r} is not in {lo}..{hi}")
    return v
