"""Where sends go: each topic resolved once per frame or pass (auto-created when allowed) and a
queue for the sends that leave the choice to the broker (RocketMQ's
``SendMessageProcessor.msgCheck`` and the topic auto-creation of its TopicConfigManager)."""
from __future__ import annotations

import logging
from typing import Callable

from shmq.broker.topics import TopicConfig
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.model.system_topics import client_may_send

log = logging.getLogger("shmq.broker")

# (topic config or None, error code, reason) for a topic name
Resolver = Callable[[str], tuple[TopicConfig | None, int, str]]


def topic_resolver(get: Callable[[str], TopicConfig | None], create: Callable[[str], TopicConfig],
                   auto_create: bool) -> Resolver:
    """The rule for a send's topic: an existing writable topic, or one created on its first send
    when autoCreateTopicEnable is on (``create`` publishes it; the broker persists it before it
    answers that pass)."""

    def resolve(topic: str) -> tuple[TopicConfig | None, int, str]:
        if not client_may_send(topic):
            return None, P.NO_PERMISSION, (f"topic {topic!r} is a system topic: only the broker writes it (retries "
                                           f"and dead letters come from consumers' send-backs, delays from "
                                           f"Message(delay_level=...))")
        tc = get(topic)
        if tc is None:
            try:
                fmt.check_topic(topic)
            except ValueError as e:
                return None, P.MESSAGE_ILLEGAL, str(e)
            if not auto_create:
                return None, P.TOPIC_NOT_EXIST, f"topic {topic!r} does not exist and autoCreateTopicEnable is false"
            try:
                tc = create(topic)
            except (ValueError, OSError) as e:  # OSError: no file descriptors or disk space left
                return None, P.SYSTEM_ERROR, f"cannot create topic {topic!r}: {e}"
            log.info("auto-created topic %r with %d queues", topic, tc.write_queue_nums)
        if not tc.writable:
            return None, P.NO_PERMISSION, f"topic {topic!r} is not writable (perm {tc.perm})"
        return tc, 0, ""

    return resolve


class Routes:
    """Where the sends of one frame or pass go: each topic resolved once, and one queue per topic
    for the sends that leave the choice to the broker (round robin over frames and passes)."""

    def __init__(self, resolve: Resolver) -> None:
        self._resolve = resolve
        self._topics: dict[str, list] = {}  # name -> [TopicConfig or None, code, reason, queue for -1]

    def route(self, topic: str, queue_id: int) -> tuple[int, int, str]:
        """(queue id, 0, "") for a send to ``queue_id`` (-1: the broker picks), else (-1, code, reason)."""
        t = self._topics.get(topic)
        if t is None:
            t = self._topics[topic] = [*self._resolve(topic), None]
        tc, code, reason, auto = t
        if tc is None:
            return -1, code, reason
        if queue_id < 0:
            if auto is None:
                auto = t[3] = tc.next_queue()
            queue_id = auto
        if queue_id >= tc.write_queue_nums:
            return -1, P.SYSTEM_ERROR, (f"queue id {queue_id} is illegal: topic {topic!r} has "
                                        f"{tc.write_queue_nums} write queues")
        return queue_id, 0, ""
