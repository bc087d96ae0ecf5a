"""Admin: topic management as Python (what RocketMQ's mqadmin updateTopic / deleteTopic / topicList do).

Each call is one request over the broker's control queue, the way clients attach: an admin
needs no channel, no reader thread and no session, so it opens the broker's state segment
(to find the control queue) per call and keeps nothing between calls. It therefore works
across broker restarts and costs nothing while unused. The rest of RocketMQ's admin
(consumer progress, queries by key, offset resets) comes with the operability issue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import sysv_ipc

from shmq.client import admin_reports, admin_state, msg_lookup
from shmq.client.admin_reports import ConsumerProgress, GroupInfo
from shmq.client.admin_state import ClientInfo, DlqInfo, TopicStatus
from shmq.client.connection import broker_name_or_default, next_request_id, open_state
from shmq.client.msg_lookup import MessageTrack
from shmq.errors import BrokerError, MessageNotFoundError
from shmq.model.message import MessageQueue
from shmq.model.message_ext import MessageExt
from shmq.model.perm import PERM_READ, PERM_RW, PERM_WRITE
from shmq.model.reprs import fields_repr, items_repr
from shmq.model.system_topics import TRACE_TOPIC, is_system_topic
from shmq.namesrv.routes import namesrv_or_env
from shmq.ring import control
from shmq.ring.channel import follow_broker_bell
from shmq.ring.owner import foreign_sysv
from shmq.trace.record import TraceRecord


@dataclass(frozen=True)
class TopicInfo:
    """A topic's config as the broker holds it (RocketMQ's TopicConfig)."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    system: bool = False  # a system topic (retry, DLQ, schedule, timer, transaction, trace): the broker's
    brokers: tuple[str, ...] = ()  # a cluster admin's answer: the brokers holding the topic so
    order: bool = False  # an ordered topic: POP groups take each queue one delivery at a time (FIFO)

    @property
    def queues(self) -> int:
        """The queue count, as ``create_topic(queues=)`` takes it (the read queues)."""
        return self.read_queue_nums

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicInfo:
        name = str(d["topicName"])
        return cls(
            name,
            int(d["readQueueNums"]),
            int(d["writeQueueNums"]),
            int(d["perm"]),
            is_system_topic(name),
            order=bool(d.get("order", False)),
        )


@dataclass(frozen=True)
class ResendResult:
    """What ``Admin.resend_dlq`` did: the ids of the dead letters put back (in DLQ order), the
    ones it could not put back and why (their topic was deleted, say), and how many of the
    group's dead letters are still not resent."""

    resent: list[str]
    skipped: list[str]
    remaining: int

    def __repr__(self) -> str:
        """The first ids of each list and how many (a resend returns thousands)."""
        return fields_repr(
            "ResendResult",
            (
                ("resent", items_repr(self.resent, "ids")),
                ("skipped", items_repr(self.skipped, "ids")),
                ("remaining", self.remaining),
            ),
        )


T = TypeVar("T")
RESEND_CHUNK = 1000  # dead letters per admin call (the broker's cap: one call stays short)


class Admin:
    """``Admin(broker="default")``: create, change, delete and list topics of a running broker.

    ``Admin(namesrv="NS")`` (or ``$SHMQ_NAMESRV`` without ``broker=``) is a
    ``shmq.client.cluster_admin.ClusterAdmin``: the same methods over every broker the name
    server routes to, each row saying its broker, plus ``cluster_list`` and ``topic_route``.

    Perms are RocketMQ's bits: 4 read, 2 write (6 both). Errors the broker reports (a bad topic
    name, a perm outside the bits, too many queues) raise ``BrokerError``; no broker raises
    ``BrokerNotFoundError``."""

    def __new__(cls, broker: str | None = None, *, namesrv: str | None = None, timeout: float = 3.0) -> Admin:
        """A ``ClusterAdmin`` when a name server is named (the way ``pathlib.Path`` picks its
        flavour), so one constructor serves both, as every client's does."""
        if cls is Admin and namesrv_or_env(namesrv, broker) is not None:
            from shmq.client.cluster_admin import ClusterAdmin  # it extends this class: imported late

            return super().__new__(ClusterAdmin)
        return super().__new__(cls)

    def __init__(self, broker: str | None = None, *, namesrv: str | None = None, timeout: float = 3.0) -> None:
        self.broker_name = broker_name_or_default(broker)
        self.timeout = timeout

    def create_topic(self, name: str, queues: int = 4, perm: int = PERM_RW, order: bool = False) -> TopicInfo:
        """Create ``name`` with ``queues`` read and write queues (or set them, if it exists);
        ``order=True`` makes it an ordered topic (every POP group is FIFO on it)."""
        return self.update_topic(name, read_queue_nums=queues, write_queue_nums=queues, perm=perm, order=order)

    def update_topic(
        self,
        name: str,
        queues: int | None = None,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        order: bool | None = None,
    ) -> TopicInfo:
        """Change what is given (``queues`` sets both counts); the rest stays. Creates the topic
        if it does not exist. Returns the topic as the broker now has it."""
        if queues is not None:
            read_queue_nums = queues if read_queue_nums is None else read_queue_nums
            write_queue_nums = queues if write_queue_nums is None else write_queue_nums
        given = {"read_queue_nums": read_queue_nums, "write_queue_nums": write_queue_nums, "perm": perm, "order": order}
        args: dict[str, Any] = {"topic": name, **{k: v for k, v in given.items() if v is not None}}
        return TopicInfo.from_json(self._call("update_topic", args)["topic"])

    def delete_topic(self, name: str) -> bool:
        """Forget the topic's config; whether it existed. Its stored messages stay until cleanup."""
        return bool(self._call("delete_topic", {"topic": name})["deleted"])

    def topics(self) -> dict[str, TopicInfo]:
        """Every topic's config, by name; system topics have ``system`` set (``is_system_topic``).
        Creating a system topic, or changing one other than the perm of a %RETRY%/%DLQ% topic,
        raises ``BrokerError``: the broker creates them and its services rely on their queues."""
        return {n: TopicInfo.from_json(t) for n, t in self._call("list_topics", {})["topics"].items()}

    def transactions(self, max_num: int = 32) -> dict[str, Any]:
        """The broker's transaction halves: ``half_offset`` (every half below it is settled),
        ``half_max_offset``, ``open`` (up to ``max_num`` unsettled halves, oldest first: queue
        offset, msg id, topic, producer group, store time, checks so far), ``checks_sent`` and
        ``discarded`` since the broker started."""
        return self._call("transactions", {"max_num": max_num})

    def view_trace(self, msg_id: str, topic: str = TRACE_TOPIC) -> list[TraceRecord]:
        """The trace records of message ``msg_id`` (a SendResult's or MessageExt's ``msg_id``) in
        ``topic``, oldest first: Pub, then SubBefore and SubAfter of each consume (see shmq.trace).
        Found through the store's index while the broker runs; a trace still in a client's buffer
        (records are sent every few tens of ms) is not there yet."""
        lines = self._call("view_trace", {"topic": topic, "msg_id": msg_id})["records"]
        found = [r for r in map(TraceRecord.from_json, lines) if r is not None and r.msg_id == msg_id]
        return sorted(found, key=lambda r: r.sort_key)

    def resend_dlq(self, group: str, msg_ids: list[str] | None = None, max_num: int | None = None) -> ResendResult:
        """Put ``group``'s dead letters (``%DLQ%<group>``) back on the topics they were first sent
        to, with reconsume times 0, each at most once: all not resent yet, or only those whose
        msg id (UNIQ_KEY), offset msg id or ORIGIN_MESSAGE_ID is in ``msg_ids``; at most
        ``max_num`` (None: all). The broker keeps what was resent in config/dlqResend.json."""
        if max_num is not None and max_num < 1:
            raise ValueError(f"max_num must be at least 1, got {max_num}")
        resent: list[str] = []
        skipped: list[str] = []
        remaining = 0
        ids = list(msg_ids) if msg_ids is not None else None
        for k in range(0, len(ids), RESEND_CHUNK) if ids is not None else [0]:
            while max_num is None or len(resent) < max_num:
                n = RESEND_CHUNK if max_num is None else min(RESEND_CHUNK, max_num - len(resent))
                args: dict[str, Any] = {"group": group, "max_num": n}
                if ids is not None:
                    args["msg_ids"] = ids[k : k + RESEND_CHUNK]
                r = self._call("resend_dlq", args)
                resent += r["resent"]
                skipped += [s for s in r["skipped"] if s not in skipped]
                remaining = int(r["remaining"])
                if len(r["resent"]) < n:
                    break
        return ResendResult(resent, skipped, remaining)

    def topic_status(self, topic: str) -> TopicStatus:
        """``topic``'s perm, queue counts, per-queue min/max offsets and messages stored since the
        broker started, from the state segment; ValueError if the broker has no such topic."""
        found = self._read_state(lambda v: admin_state.one_topic(v, topic))
        if found is None:
            raise ValueError(f"broker {self.broker_name!r} has no topic {topic!r}")
        return found

    def topics_status(self) -> dict[str, TopicStatus]:
        """``topic_status`` of every topic, by name (one consistent read of the state segment)."""
        return self._read_state(admin_state.all_topics)

    def groups(self) -> dict[str, GroupInfo]:
        """The consumer groups the broker knows since it started: model, version, members, subscriptions."""
        return {n: GroupInfo.from_json(n, g) for n, g in self._call("list_groups", {})["groups"].items()}

    def consumer_progress(self, group: str) -> ConsumerProgress:
        """Per queue ``group`` committed to or subscribes to: committed offset, max offset, lag (RocketMQ's
        consumerProgress); works for a group with no consumer running too."""
        return ConsumerProgress.from_json(self._call("consumer_progress", {"group": group}), self.broker_name)

    def clients(self) -> list[ClientInfo]:
        """The attached clients (id, pid, role, group, attach time, ring fill), from the state segment."""
        return [replace(c, broker=self.broker_name) for c in self._read_state(admin_state.clients)]

    def dlq(self) -> list[DlqInfo]:
        """Every ``%DLQ%<group>`` topic and how many dead letters it holds (``resend_dlq`` puts them back)."""
        return [replace(d, broker=self.broker_name) for d in self._read_state(admin_state.dead_letters)]

    def broker_status(self) -> dict[str, Any]:
        """Name, pid, version, role, store, uptime, commitlog/flushed offsets, disk use against
        diskMaxUsedSpaceRatio, counters (busy rejections), clients, replicas, CPU % and RSS,
        and ``config``: every key in force under its RocketMQ name (secrets masked)."""
        answer = self._call("broker_status", {})

        def fn(v: Any) -> tuple[dict[str, Any], dict[str, int]]:
            h, s = v.header[0], v.stats[0]
            return (
                {"broker_pid": int(h["broker_pid"]), "started_ms": int(h["started_ms"])},
                {k: int(s[k]) for k in ("msgs_in", "bytes_in", "busy_rejections")},
            )

        header, stats = self._read_state(fn)
        return admin_reports.broker_status(self.broker_name, answer, header, stats)

    def reset_offset(
        self, group: str, topic: str, *, timestamp: int | None = None, offset: int | None = None, to: str | None = None
    ) -> dict[int, int]:
        """Move ``group``'s offsets of every queue of ``topic`` (RocketMQ's resetOffsetByTime) and
        return queue id -> new offset. Exactly one of: ``timestamp`` (ms since the epoch: the first
        message stored at or after it), ``offset`` (clamped to each queue's min..max) or ``to``
        ("first" or "last"). Running members drop what they cached of those queues and resume
        from the new offsets (a listener call running already may finish); their commits of older
        positions no longer count. A BROADCASTING group is refused (its members keep their own
        offsets), as are an unknown topic or group (``BrokerError``)."""
        given = {k: v for k, v in (("timestamp", timestamp), ("offset", offset), ("to", to)) if v is not None}
        if len(given) != 1:
            raise ValueError(f"give exactly one of timestamp, offset or to (got {sorted(given) or 'none'})")
        r = self._call("reset_offset", {"group": group, "topic": topic, **given})
        return {int(q): int(v) for q, v in r["offsets"].items()}

    def reset_offsets(
        self, group: str, topic: str, *, timestamp: int | None = None, offset: int | None = None, to: str | None = None
    ) -> dict[MessageQueue, int]:
        """``reset_offset`` keyed by queue (broker name and queue id): the form that also says
        which broker a queue is on when the admin spans a cluster."""
        moved = self.reset_offset(group, topic, timestamp=timestamp, offset=offset, to=to)
        return {MessageQueue(topic, self.broker_name, q): v for q, v in moved.items()}

    def _read_state(self, fn: Callable[[Any], T]) -> T:
        state = open_state(self.broker_name)
        try:
            return state.read(fn)
        finally:
            state.close()

    def query_by_key(
        self, topic: str, key: str, begin: int = 0, end: int | None = None, max_num: int = 64
    ) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` among their KEYS (or as their msg id), stored
        between ``begin`` and ``end`` (epoch ms, ``end`` None: now), newest first, at most
        ``max_num`` (RocketMQ's queryMessage). Read from the store's index and commitlog files
        in this process: the broker does no work for it."""
        if not 1 <= max_num <= msg_lookup.MAX_QUERY_NUM:
            raise ValueError(f"max_num must be 1..{msg_lookup.MAX_QUERY_NUM}, got {max_num}")
        begin, end = msg_lookup.time_range(begin, end)
        with msg_lookup.LiveStore(self.broker_name) as store:
            return store.query_by_key(topic, key, begin, end, max_num)

    def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """The message with ``msg_id``: an offset msg id, or a msg id (UNIQ_KEY) looked up in
        ``topic`` (None: every topic). ``MessageNotFoundError`` if there is none."""
        with msg_lookup.LiveStore(self.broker_name) as store:
            msg = msg_lookup.find_message(store, msg_id, topic)
        if msg is None:
            where = f" in topic {topic!r}" if topic is not None else ""
            raise MessageNotFoundError(f"no message with id {msg_id!r}{where}")
        return msg

    def message_track(self, msg: MessageExt) -> list[MessageTrack]:
        """Each consumer group with a committed offset on the message's queue, and whether that
        offset is past the message (RocketMQ's messageTrackDetail)."""
        with msg_lookup.LiveStore(self.broker_name) as store:
            return msg_lookup.message_track(store, msg)

    def _call(self, command: str, args: dict[str, Any]) -> dict[str, Any]:
        state = open_state(self.broker_name)
        key = int(state.view.header[0]["control_key"])
        try:
            state.trust.check_queue(key)  # another user's broker: refuse
            queue = control.ControlQueue.open(key)
            req = control.Admin(control.new_client_id(), next_request_id(), command, args)
            # the broker may be parked; its bell's generation is in the state segment
            bell = follow_broker_bell(
                self.broker_name, lambda: int(state.view.header["bell_gen"][0]), state.trust.check_semaphore
            )
            try:
                reply = queue.call(req, self.timeout, bell.ring)  # a long reply comes in chunks
            finally:
                bell.close()
        except sysv_ipc.PermissionsError:  # the state was readable, the queue is not: not this user's broker
            raise foreign_sysv(f"the control queue of broker {self.broker_name!r}", "msg", key) from None
        finally:
            state.close()
        if not reply.ok:
            raise BrokerError(0, str(reply.body.get("error")))
        return reply.body
