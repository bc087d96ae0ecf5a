"""What consumers take and give back: RocketMQ's enums, PullResult and the listener context."""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

from shmq.model.message import MessageQueue
from shmq.model.message_ext import MessageExt
from shmq.model.pulled import PulledBatch
from shmq.model.reprs import Raw, fields_repr, span


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"  # nothing past the offset, even after long polling
    NO_MATCHED_MSG = "NO_MATCHED_MSG"  # new entries, none passing the filter: pull on from next_begin_offset
    # below the min or past the max offset: next_begin_offset is the nearest legal one
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"  # the group shares the queues: each message to one member
    BROADCASTING = "BROADCASTING"  # every member gets every message


class ConsumeFrom(enum.Enum):
    """Where a group with no committed offset for a queue starts."""

    FIRST_OFFSET = "FIRST_OFFSET"
    LAST_OFFSET = "LAST_OFFSET"  # the queue's end when the group first sees it, history never replayed
    TIMESTAMP = "TIMESTAMP"  # the first message stored at or after consume_timestamp


class ConsumeResult(enum.Enum):
    SUCCESS = "SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"  # deliver these messages again after a growing delay
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"  # orderly: retry the same messages later


@dataclass(eq=False)
class PullResult:
    """One pull. ``batch`` is the columnar form; ``messages`` decodes it (once) into MessageExt."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    batch: PulledBatch | None = None
    _messages: list[MessageExt] | None = field(default=None, repr=False)

    @property
    def messages(self) -> list[MessageExt]:
        if self._messages is None:
            self._messages = self.batch.messages() if self.batch is not None else []
        return self._messages

    @property
    def next_offset(self) -> int:
        """Alias of ``next_begin_offset`` (a shorter name for the same offset)."""
        return self.next_begin_offset

    def __repr__(self) -> str:
        """Status, where the messages are from and how many, offsets: never the columns or the
        commitlog mappings the batch holds (100+ MB)."""
        msgs, batch = self._messages, self.batch
        where: list[tuple[str, object]] = []
        if msgs:
            where = [
                ("topic", msgs[0].topic),
                ("queue_id", msgs[0].queue_id),
                ("messages", len(msgs)),
                ("queue_offset", span(msgs[0].queue_offset, msgs[-1].queue_offset)),
                ("bytes", sum(m.store_size for m in msgs)),
            ]
        elif batch is not None and msgs is None and len(batch):
            where = [
                ("topic", batch.topic),
                ("queue_id", batch.queue_id),
                ("messages", len(batch)),
                ("queue_offset", span(int(batch.queue_offset[0]), int(batch.queue_offset[-1]))),
                ("bytes", int(batch.size.sum())),
            ]
        return fields_repr(
            "PullResult",
            [
                ("status", Raw(self.status.name)),
                *where,
                ("next_begin_offset", self.next_begin_offset),
                ("min_offset", self.min_offset),
                ("max_offset", self.max_offset),
            ],
        )


_SUSPEND_MS_DEPRECATED = "suspend_current_queue_time_millis is deprecated: use suspend_current_queue_time (seconds)"


@dataclass
class ConsumeContext:
    """Handed to listeners with each list of messages; an orderly listener may change the suspend
    time, a concurrent one the delay level of the messages it answers RECONSUME_LATER for
    (RocketMQ's delayLevelWhenNextConsume: 0 the broker's rule, 3 + reconsume times; -1 straight
    to the dead-letter queue; n that level)."""

    message_queue: MessageQueue
    suspend_current_queue_time: float = 1.0  # seconds
    delay_level_when_next_consume: int = 0

    @property
    def suspend_current_queue_time_millis(self) -> float:
        """Deprecated: ``suspend_current_queue_time`` in ms (RocketMQ's name; shmq's durations are seconds)."""
        warnings.warn(_SUSPEND_MS_DEPRECATED, DeprecationWarning, stacklevel=2)
        return self.suspend_current_queue_time * 1000

    @suspend_current_queue_time_millis.setter
    def suspend_current_queue_time_millis(self, value: float) -> None:
        warnings.warn(_SUSPEND_MS_DEPRECATED, DeprecationWarning, stacklevel=2)
        self.suspend_current_queue_time = value / 1000


MessageListener = Callable[[list[MessageExt], ConsumeContext], ConsumeResult]
