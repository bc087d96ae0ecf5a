"""Admin: topic management as Python (what RocketMQ's mqadmin updateTopic / deleteTopic / topicList do).

Each call is one request over the broker's control queue, the way clients attach: an admin
needs no channel, no reader thread and no session, so it opens the broker's state segment
(to find the control queue) per call and keeps nothing between calls. It therefore works
across broker restarts and costs nothing while unused. The rest of RocketMQ's admin
(consumer progress, queries by key, offset resets, DLQ resend) comes with the operability issue.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shmq.client.connection import broker_name_or_default, next_request_id
from shmq.errors import BrokerError
from shmq.model.perm import PERM_READ, PERM_RW, PERM_WRITE
from shmq.ring import control
from shmq.ring.channel import follow_broker_bell
from shmq.ring.state import StateReader



@dataclass(frozen=True)
class TopicInfo:
    """A topic's config as the broker holds it (RocketMQ's TopicConfig)."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int

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
    def from_json(cls, d: dict[str, Any]) -> "TopicInfo":
        return cls(str(d["topicName"]), int(d["readQueueNums"]), int(d["writeQueueNums"]), int(d["perm"]))


class Admin:
    """``Admin(broker="default")``: create, change, delete and list topics of a running broker.

    Perms are RocketMQ's bits: 4 read, 2 write (6 both). Errors the broker reports (a bad topic
    name, a perm outside the bits, too many queues) raise ``BrokerError``; no broker raises
    ``BrokerNotFoundError``."""

    def __init__(self, broker: str | None = None, *, timeout: float = 3.0) -> None:
        self.broker_name = broker_name_or_default(broker)
        self.timeout = timeout

    def create_topic(self, name: str, queues: int = 4, perm: int = PERM_RW) -> TopicInfo:
        """Create ``name`` with ``queues`` read and write queues (or set them, if it exists)."""
        return self.update_topic(name, read_queue_nums=queues, write_queue_nums=queues, perm=perm)

    def update_topic(self, name: str, queues: int | None = None, *, read_queue_nums: int | None = None,
                     write_queue_nums: int | None = None, perm: int | None = None) -> TopicInfo:
        """Change what is given (``queues`` sets both counts); the rest stays. Creates the topic
        if it does not exist. Returns the topic as the broker now has it."""
        if queues is not None:
            read_queue_nums = queues if read_queue_nums is None else read_queue_nums
            write_queue_nums = queues if write_queue_nums is None else write_queue_nums
        args: dict[str, Any] = {"topic": name}
        for key, value in (("read_queue_nums", read_queue_nums), ("write_queue_nums", write_queue_nums),
                           ("perm", perm)):
            if value is not None:
                args[key] = value
        return TopicInfo.from_json(self._call("update_topic", args)["topic"])

    def delete_topic(self, name: str) -> bool:
        """Forget the topic's config; whether it existed. Its stored messages stay until cleanup."""
        return bool(self._call("delete_topic", {"topic": name})["deleted"])

    def topics(self) -> dict[str, TopicInfo]:
        """Every topic's config, by name."""
        return {n: TopicInfo.from_json(t) for n, t in self._call("list_topics", {})["topics"].items()}

    def transactions(self, max_num: int = 32) -> dict[str, Any]:
        """The broker's transaction halves: ``half_offset`` (every half below it is settled),
        ``half_max_offset``, ``open`` (up to ``max_num`` unsettled halves, oldest first: queue
        offset, msg id, topic, producer group, store time, checks so far), ``checks_sent`` and
        ``discarded`` since the broker started."""
        return self._call("transactions", {"max_num": max_num})

    def _call(self, command: str, args: dict[str, Any]) -> dict[str, Any]:
        state = StateReader.open(self.broker_name)
        try:
            state.trust.check_queue(int(state.view.header[0]["control_key"]))  # another user's broker: refuse
            queue = control.ControlQueue.open(int(state.view.header[0]["control_key"]))
            req = control.Admin(control.new_client_id(), next_request_id(), command, args)
            # the broker may be parked; its bell's generation is in the state segment
            bell = follow_broker_bell(self.broker_name, lambda: int(state.view.header["bell_gen"][0]),
                                      state.trust.check_semaphore)
            try:
                reply = queue.call(req, self.timeout, bell.ring)  # a long reply comes in chunks
            finally:
                bell.close()
        finally:
            state.close()
        if not reply.ok:
            what = f"{command} {args['topic']!r}" if "topic" in args else command
            raise BrokerError(0, f"{what}: {reply.body.get('error')}")
        return reply.body
