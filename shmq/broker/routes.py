"""Where sends go: each topic resolved once per frame or pass (auto-created when allowed) and a
queue for the sends that leave the choice to the broker (RocketMQ's
``SendMessageProcessor.msgCheck`` and the topic auto-creation of its TopicConfigManager)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from shmq.broker.topics import TopicConfig
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.model.system_topics import client_may_send

log = logging.getLogger("shmq.broker")

MAX_USABLE = 1 << 17  # topics a resolver remembers as writable (a SEND_MULTI of 1,250 topics resolves each per frame)
# (topic config or None, error code, reason) for a topic name
Resolver = Callable[[str], tuple[TopicConfig | None, int, str]]


@dataclass(slots=True)
class _Route:
    """A topic as resolved for this frame or pass."""

    config: TopicConfig | None  # None: it cannot take sends (``code``, ``reason`` say why)
    code: int
    reason: str
    auto: int | None = None  # the queue of the sends that leave the choice to the broker, once chosen


def topic_resolver(
    get: Callable[[str], TopicConfig | None], create: Callable[[str], TopicConfig], auto_create: bool
) -> Resolver:
    """The rule for a send's topic: an existing writable topic, or one created on its first send
    when autoCreateTopicEnable is on (``create`` publishes it; the broker persists it before it
    answers that pass)."""

    usable: dict[str, TopicConfig] = {}  # topics found writable, valid while their config is the same object

    def resolve(topic: str) -> tuple[TopicConfig | None, int, str]:
        tc = usable.get(topic)
        if tc is not None and get(topic) is tc:  # a change of the topic replaces its TopicConfig
            return tc, 0, ""
        if not client_may_send(topic):
            return (
                None,
                P.NO_PERMISSION,
                (
                    f"topic {topic!r} is a system topic: only the broker writes it (retries "
                    f"and dead letters come from consumers' send-backs, delays from "
                    f"Message(delay_level=...))"
                ),
            )
        tc = get(topic)
        if tc is None:
            try:
                fmt.check_topic(topic)
            except ValueError as e:
                return None, P.MESSAGE_ILLEGAL, str(e)
            if not auto_create:
                return (
                    None,
                    P.TOPIC_NOT_EXIST,
                    (
                        f"topic {topic!r} does not exist (autoCreateTopicEnable is false): "
                        f"create it with `shmq admin topic create {topic}`"
                    ),
                )
            try:
                tc = create(topic)
            except (ValueError, OSError) as e:  # OSError: no file descriptors or disk space left
                return None, P.SYSTEM_ERROR, f"cannot create topic {topic!r}: {e}"
            log.info("auto-created topic %r with %d queues", topic, tc.write_queue_nums)
        if not tc.writable:
            return (
                None,
                P.NO_PERMISSION,
                (
                    f"topic {topic!r} is not writable (perm {tc.perm}): allow writes with "
                    f"`shmq admin topic update {topic} --perm 6`"
                ),
            )
        if len(usable) >= MAX_USABLE:
            usable.clear()
        usable[topic] = tc
        return tc, 0, ""

    return resolve


class Routes:
    """Where the sends of one frame or pass go: each topic resolved once, and one queue per topic
    for the sends that leave the choice to the broker (round robin over frames and passes)."""

    def __init__(self, resolve: Resolver) -> None:
        self._resolve = resolve
        self._topics: dict[str, _Route] = {}

    def route_records(
        self, topics: list[str], topic_idx: np.ndarray, queue_ids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, str]:
        """``route`` for each record of a SEND_MULTI (record i: ``topics[topic_idx[i]]``,
        ``queue_ids[i]``) as arrays: (status: 0 or -error code, queue id or -1, the first failed
        record's reason). The topics are resolved once each (``table``), the records by numpy:
        with 1,250 topics a frame has ~one record per topic, and ``route`` per record cost
        ~0.5 us each."""
        auto = queue_ids < 0
        writes, auto_q, codes = self.table(topics, topic_idx, auto)
        qids = np.where(auto, auto_q[topic_idx], queue_ids)
        status = -codes[topic_idx]
        status[(status == 0) & (qids >= writes[topic_idx])] = -P.SYSTEM_ERROR
        qids[status != 0] = -1
        failed = np.flatnonzero(status)
        if not len(failed):
            return status, qids, ""
        i = int(failed[0])
        return status, qids, self.route(topics[int(topic_idx[i])], int(queue_ids[i]))[2]

    def table(
        self, topics: list[str], topic_idx: np.ndarray, auto: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per topic of a SEND_MULTI's table: its write queue count (0 if it cannot take sends),
        the broker's queue for its records that leave the choice (``auto``: those records;
        else -1) and its error code: what ``route`` gives each record, one topic at a time.
        Topics are resolved (maybe auto-created) in the order of their first record, as
        ``route`` record by record would; a topic no record uses is not resolved."""
        n = len(topics)
        writes, queues, codes = [0] * n, [-1] * n, [0] * n
        marks = set(topic_idx[auto].tolist()) if auto.any() else ()
        entries, resolve = self._topics, self._resolve
        # A frame's topic table names each topic once: resolved straight, no _Route kept but for
        # a topic that fails (``route`` then gives its reason without resolving it again).
        for k in dict.fromkeys(topic_idx.tolist()):  # in order of first use
            topic = topics[k]
            t = entries.get(topic) if entries else None
            if t is None:
                tc, code, reason = resolve(topic)
                if tc is None:
                    entries[topic] = _Route(None, code, reason)
                    codes[k] = code
                    continue
            else:
                tc = t.config
                if tc is None:
                    codes[k] = t.code
                    continue
            writes[k] = tc.write_queue_nums
            if k in marks:
                if t is None:
                    queues[k] = tc.next_queue()
                else:
                    if t.auto is None:
                        t.auto = tc.next_queue()
                    queues[k] = t.auto
        return np.array(writes, np.int64), np.array(queues, np.int64), np.array(codes, np.int64)

    def _entry(self, topic: str) -> _Route:
        t = self._topics.get(topic)
        if t is None:
            t = self._topics[topic] = _Route(*self._resolve(topic))
        return t

    def route(self, topic: str, queue_id: int) -> tuple[int, int, str]:
        """(queue id, 0, "") for a send to ``queue_id`` (-1: the broker picks), else (-1, code, reason)."""
        t = self._entry(topic)
        tc = t.config
        if tc is None:
            return -1, t.code, t.reason
        if queue_id < 0:
            if t.auto is None:
                t.auto = tc.next_queue()
            queue_id = t.auto
        if queue_id >= tc.write_queue_nums:
            return (
                -1,
                P.SYSTEM_ERROR,
                (f"queue id {queue_id} is illegal: topic {topic!r} has {tc.write_queue_nums} write queues"),
            )
        return queue_id, 0, ""
