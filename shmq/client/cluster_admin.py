"""ClusterAdmin: ``Admin(namesrv=NS)``, the admin of every broker a name server routes to.

It reads the routes from the name server's segment (no round trip, see shmq.namesrv.segment)
and runs each call on the brokers they name, through one single-broker ``Admin`` per broker:
a broker's answer is exactly what ``Admin(broker=...)`` gives, and the merged answer says on
each row which broker it came from (``broker``/``broker_name`` fields, ``brokers`` tuples).
Topic changes go to every master (RocketMQ's ``updateTopic -c CLUSTER``) or to the masters
named in ``brokers=``; reads and group operations go to every broker name's master, or to its
replica while the master is down (where consumers read it then).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from shmq.client.admin import Admin, ResendResult, TopicInfo
from shmq.client.admin_reports import ConsumerProgress, GroupInfo
from shmq.client.admin_state import ClientInfo, DlqInfo, TopicStatus
from shmq.client.connection import open_state
from shmq.client.msg_lookup import MessageTrack
from shmq.errors import BrokerGoneError, BrokerNotFoundError, ConfigError, MessageNotFoundError
from shmq.model.message import MessageQueue
from shmq.model.message_ext import MessageExt
from shmq.model.perm import PERM_RW
from shmq.model.system_topics import TRACE_TOPIC
from shmq.namesrv.routes import BrokerData, RouteTable, TopicRoute, namesrv_or_env
from shmq.namesrv.segment import RouteReader
from shmq.ring.state import StateView
from shmq.trace.record import TraceRecord


@dataclass(frozen=True)
class ClusterBroker:
    """One row of ``cluster_list``: a registered broker and its live numbers (state segment)."""

    cluster: str
    broker_name: str
    broker_id: int
    role: str
    attach_name: str
    pid: int
    store_dir: str
    topics: int  # topics it registered (system topics included)
    msgs_in: int | None  # messages stored since it started; None: its state was not readable
    connections: int | None  # attached clients


def _live_numbers(v: StateView) -> tuple[int, int]:
    return int(v.stats[0]["msgs_in"]), int((v.clients["used"] != 0).sum())


class ClusterAdmin(Admin):
    """``Admin(namesrv="NS")``: see the module docstring. ``broker_name`` is the name server's
    name here; ``each()`` gives the single-broker admins for anything not merged."""

    def __init__(self, broker: str | None = None, *, namesrv: str | None = None, timeout: float = 3.0) -> None:
        found = namesrv_or_env(namesrv, broker)
        if found is None:
            raise ConfigError("a cluster admin needs namesrv= (or $SHMQ_NAMESRV)")
        self.namesrv = found
        self.broker_name = found
        self.timeout = timeout
        self._reader = RouteReader(found)

    # ------------------------------------------------------------------ routes

    def routes(self) -> RouteTable:
        """The name server's routes now, dead brokers left out (NameServerNotFoundError if none serves)."""
        return self._reader.read()

    def topic_route(self, topic: str) -> TopicRoute:
        """The brokers holding ``topic`` and its queues (RocketMQ's topicRoute)."""
        return self.routes().topic_route(topic)

    def cluster_list(self) -> list[ClusterBroker]:
        """Every registered broker (RocketMQ's clusterList), by cluster, broker name and id."""
        rows = []
        for b in sorted(self.routes().brokers, key=lambda b: (b.cluster, b.broker_name, b.broker_id)):
            msgs_in: int | None
            connections: int | None
            try:
                state = open_state(b.attach_name)
                try:
                    msgs_in, connections = state.read(_live_numbers)
                finally:
                    state.close()
            except (BrokerNotFoundError, BrokerGoneError):
                msgs_in = connections = None  # it died after the routes were read
            rows.append(
                ClusterBroker(
                    b.cluster,
                    b.broker_name,
                    b.broker_id,
                    b.role,
                    b.attach_name,
                    b.pid,
                    b.store_dir,
                    len(b.topics),
                    msgs_in,
                    connections,
                )
            )
        return rows

    def each(self, brokers: Iterable[str] | None = None, masters_only: bool = False) -> list[tuple[str, Admin]]:
        """(broker name, its single-broker Admin) for every broker name of the routes (its
        master, else its lowest-id replica; only masters with ``masters_only``), or for those
        named in ``brokers``; an unknown name, or no broker at all, is a ConfigError."""
        table = self.routes()
        names = sorted({b.broker_name for b in table.brokers})
        if brokers is not None:
            wanted = list(dict.fromkeys(brokers))
            unknown = [n for n in wanted if n not in names]
            if unknown:
                known = ", ".join(names) or "none"
                raise ConfigError(
                    f"no broker named {unknown[0]!r} is registered with name server {self.namesrv!r} (known: {known})"
                )
            names = wanted
        out = []
        for name in names:
            b = table.broker(name) or (None if masters_only else _first_replica(table, name))
            if b is not None:
                out.append((name, Admin(b.attach_name, timeout=self.timeout)))
        if not out:
            what = "master broker" if masters_only else "broker"
            raise ConfigError(
                f"no {what} is registered with name server {self.namesrv!r}: "
                f"start brokers with namesrvAddr={self.namesrv}"
            )
        return out

    # ------------------------------------------------------------------ topics

    def create_topic(
        self,
        name: str,
        queues: int = 4,
        perm: int = PERM_RW,
        order: bool = False,
        *,
        brokers: Iterable[str] | None = None,
    ) -> TopicInfo:
        """Create ``name`` with ``queues`` queues on every master (or on the masters named in
        ``brokers``); the config as set, with ``brokers`` saying where."""
        return self.update_topic(
            name, read_queue_nums=queues, write_queue_nums=queues, perm=perm, order=order, brokers=brokers
        )

    def update_topic(
        self,
        name: str,
        queues: int | None = None,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        order: bool | None = None,
        brokers: Iterable[str] | None = None,
    ) -> TopicInfo:
        """``Admin.update_topic`` on every master (or those named in ``brokers``); the first
        broker's answer, with ``brokers`` naming every broker that took it."""
        done = [
            (
                n,
                a.update_topic(
                    name,
                    queues,
                    read_queue_nums=read_queue_nums,
                    write_queue_nums=write_queue_nums,
                    perm=perm,
                    order=order,
                ),
            )
            for n, a in self.each(brokers, masters_only=True)
        ]
        return replace(done[0][1], brokers=tuple(n for n, _ in done))

    def delete_topic(self, name: str, *, brokers: Iterable[str] | None = None) -> bool:
        """Forget the topic on every master (or those named); whether any held it."""
        deleted = [a.delete_topic(name) for _n, a in self.each(brokers, masters_only=True)]  # on every one
        return any(deleted)

    def topics(self) -> dict[str, TopicInfo]:
        """Every topic of every broker, by name; ``brokers`` says which hold it (the config
        shown is the first of them's)."""
        merged: dict[str, TopicInfo] = {}
        for name, admin in self.each():
            for t in admin.topics().values():
                held = merged.get(t.name)
                merged[t.name] = replace(held or t, brokers=(*(held.brokers if held else ()), name))
        return dict(sorted(merged.items()))

    def topic_status(self, topic: str) -> TopicStatus:
        """``topic`` over every broker holding it: queue counts and counters summed, each
        queue with its broker; ValueError if no broker holds it."""
        found = self.topics_status().get(topic)
        if found is None:
            raise ValueError(f"no broker of name server {self.namesrv!r} has topic {topic!r}")
        return found

    def topics_status(self) -> dict[str, TopicStatus]:
        """``topic_status`` of every topic of every broker, by name."""
        merged: dict[str, TopicStatus] = {}
        for name, admin in self.each():
            for t in admin.topics_status().values():
                mine = replace(t, queues=[replace(q, broker=name) for q in t.queues], brokers=(name,))
                merged[t.topic] = _sum_status(merged[t.topic], mine) if t.topic in merged else mine
        return dict(sorted(merged.items()))

    # ------------------------------------------------------------------ groups and offsets

    def groups(self) -> dict[str, GroupInfo]:
        """Every group any broker knows: members (client ids on each broker) and subscriptions merged."""
        merged: dict[str, GroupInfo] = {}
        for _name, admin in self.each():
            for g in admin.groups().values():
                old = merged.get(g.group)
                if old is not None:
                    subs = dict(sorted({**old.subscriptions, **g.subscriptions}.items()))
                    g = GroupInfo(g.group, old.model, max(old.version, g.version), old.members + g.members, subs)
                merged[g.group] = g
        return dict(sorted(merged.items()))

    def consumer_progress(self, group: str) -> ConsumerProgress:
        """The group's progress on every broker, each queue with its ``broker_name``."""
        parts = [a.consumer_progress(group) for _n, a in self.each()]
        model = next((p.model for p in parts if p.model is not None), None)
        queues = [q for p in parts for q in p.queues]
        return ConsumerProgress(group, any(p.online for p in parts), model, queues)

    def reset_offset(
        self, group: str, topic: str, *, timestamp: int | None = None, offset: int | None = None, to: str | None = None
    ) -> dict[int, int]:
        """Refused: queue ids repeat across brokers; ``reset_offsets`` keys them by broker too."""
        raise ConfigError("a cluster's queues are named by broker and queue id: use reset_offsets()")

    def reset_offsets(
        self, group: str, topic: str, *, timestamp: int | None = None, offset: int | None = None, to: str | None = None
    ) -> dict[MessageQueue, int]:
        """``Admin.reset_offset`` on every broker holding ``topic`` (as its own state says, not
        waiting for the routes to show a topic just made); queue -> new offset."""
        holders = [(n, a) for n, a in self.each() if topic in a.topics_status()]
        if not holders:
            raise ValueError(f"no broker of name server {self.namesrv!r} has topic {topic!r}")
        moved: dict[MessageQueue, int] = {}
        for name, admin in holders:
            for q, v in admin.reset_offset(group, topic, timestamp=timestamp, offset=offset, to=to).items():
                moved[MessageQueue(topic, name, q)] = v
        return moved

    def clients(self) -> list[ClientInfo]:
        """The clients attached to every broker, each with its ``broker``."""
        return [replace(c, broker=n) for n, a in self.each() for c in a.clients()]

    # ------------------------------------------------------------------ dead letters

    def dlq(self) -> list[DlqInfo]:
        """Every broker's ``%DLQ%`` topics, one row per broker and group."""
        return [replace(d, broker=n) for n, a in self.each() for d in a.dlq()]

    def resend_dlq(self, group: str, msg_ids: list[str] | None = None, max_num: int | None = None) -> ResendResult:
        """``Admin.resend_dlq`` on every broker holding ``%DLQ%<group>`` (each letter goes back
        through the broker that kept it); at most ``max_num`` over all of them (``remaining``
        then counts the brokers visited before the limit was reached)."""
        if max_num is not None and max_num < 1:
            raise ValueError(f"max_num must be at least 1, got {max_num}")
        resent: list[str] = []
        skipped: list[str] = []
        remaining = 0
        for _name, admin in self.each():
            if not any(d.group == group for d in admin.dlq()):
                continue
            left = None if max_num is None else max_num - len(resent)
            if left == 0:
                break
            r = admin.resend_dlq(group, msg_ids, left)
            resent += r.resent
            skipped += r.skipped
            remaining += r.remaining
        return ResendResult(resent, skipped, remaining)

    # ------------------------------------------------------------------ messages

    def query_by_key(
        self, topic: str, key: str, begin: int = 0, end: int | None = None, max_num: int = 64
    ) -> list[MessageExt]:
        """``Admin.query_by_key`` on every broker, newest first, at most ``max_num`` in all."""
        found = [m for _n, a in self.each() for m in a.query_by_key(topic, key, begin, end, max_num)]
        return sorted(found, key=lambda m: m.store_timestamp, reverse=True)[:max_num]

    def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """The message with ``msg_id`` on the first broker that has it (``find_message``)."""
        return self.find_message(msg_id, topic)[1]

    def find_message(self, msg_id: str, topic: str | None = None) -> tuple[str, MessageExt]:
        """(broker name, message) of ``msg_id``; MessageNotFoundError if no broker has it."""
        for name, admin in self.each():
            try:
                return name, admin.view_message(msg_id, topic)
            except MessageNotFoundError:
                continue
        where = f" in topic {topic!r}" if topic is not None else ""
        raise MessageNotFoundError(f"no broker of name server {self.namesrv!r} has a message with id {msg_id!r}{where}")

    def message_track(self, msg: MessageExt) -> list[MessageTrack]:
        """The consumer groups' positions against ``msg`` on the broker that stored it."""
        name, _ = self.find_message(msg.offset_msg_id or msg.msg_id, msg.topic)
        return self.each([name])[0][1].message_track(msg)

    def view_trace(self, msg_id: str, topic: str = TRACE_TOPIC) -> list[TraceRecord]:
        """The trace records of ``msg_id`` from every broker, oldest first."""
        found = [r for _n, a in self.each() for r in a.view_trace(msg_id, topic)]
        return sorted(found, key=lambda r: r.sort_key)

    # ------------------------------------------------------------------ per-broker reports

    def transactions(self, max_num: int = 32) -> dict[str, Any]:
        """Broker name -> ``Admin.transactions`` of that broker."""
        return {n: a.transactions(max_num) for n, a in self.each()}

    def broker_status(self) -> dict[str, Any]:
        """Broker name -> ``Admin.broker_status`` of that broker."""
        return {n: a.broker_status() for n, a in self.each()}

    def close(self) -> None:
        """Unmap the route segment (it is mapped again on the next call)."""
        self._reader.close()


def _first_replica(table: RouteTable, broker_name: str) -> BrokerData | None:
    found = table.replicas(broker_name)
    return found[0] if found else None


def _sum_status(a: TopicStatus, b: TopicStatus) -> TopicStatus:
    """One topic held by two brokers: counts and counters summed, queues of both."""
    return replace(
        a,
        read_queue_nums=a.read_queue_nums + b.read_queue_nums,
        write_queue_nums=a.write_queue_nums + b.write_queue_nums,
        msgs_in=a.msgs_in + b.msgs_in,
        bytes_in=a.bytes_in + b.bytes_in,
        queues=a.queues + b.queues,
        brokers=a.brokers + b.brokers,
    )
