"""Checks of the queues a consumer control names: one clear line before anything is changed.

The controls (``assign``, ``seek``, ``pause``, ``committed``...) take ``MessageQueue`` values the
caller built or kept; a queue of another broker, of a topic the broker does not know, or a queue
id past the topic's read queues would otherwise be an assignment that never reads anything or an
offset of a queue that is not there. The checks read the broker's state segment, the same
source the consumer reads its queues from.
"""

from __future__ import annotations

from collections.abc import Iterable

from shmq.client.broker_state import BrokerState
from shmq.errors import ArgumentTypeError, BadArgumentError
from shmq.model.message import MessageQueue


def queue_name(mq: MessageQueue) -> str:
    """How an error names a queue."""
    return f"queue {mq.queue_id} of topic {mq.topic!r} on broker {mq.broker_name!r}"


def read_queues(state: BrokerState, broker_name: str, topic: str) -> list[MessageQueue]:
    """Every read queue of ``topic`` on this broker; ``BadArgumentError`` if the topic does not exist."""
    n = state.read_queue_count(topic)
    if n == 0:
        raise BadArgumentError(
            f"topic {topic!r} does not exist on broker {broker_name!r}: create it (shmq admin topic create) "
            f"or send to it first"
        )
    return [MessageQueue(topic, broker_name, q) for q in range(n)]


def queue_list(mqs: Iterable[MessageQueue]) -> list[MessageQueue]:
    """``mqs`` as a list; ``ArgumentTypeError`` for one queue given bare (``pause(mq)`` for ``pause([mq])``)."""
    if isinstance(mqs, MessageQueue) or not isinstance(mqs, Iterable):
        raise ArgumentTypeError(f"expected a list of MessageQueue, got {type(mqs).__name__} (write [mq] for one queue)")
    return list(mqs)


def check_broker(broker_name: str, mq: MessageQueue) -> None:
    """``BadArgumentError`` unless ``mq`` is a queue of broker ``broker_name`` (before attaching)."""
    if not isinstance(mq, MessageQueue):
        raise BadArgumentError(f"expected a MessageQueue (see fetch_message_queues()), got {type(mq).__name__}")
    if mq.broker_name != broker_name:
        raise BadArgumentError(f"{queue_name(mq)}: this consumer reads broker {broker_name!r}, not that one")


def check_queue(state: BrokerState, broker_name: str, mq: MessageQueue) -> None:
    """``BadArgumentError`` unless ``mq`` is a read queue of an existing topic on this broker."""
    check_broker(broker_name, mq)
    check_queue_id(mq, len(read_queues(state, broker_name, mq.topic)))


def check_queue_id(mq: MessageQueue, n: int) -> None:
    """``BadArgumentError`` unless ``mq``'s id is one of its topic's ``n`` read queues on its broker."""
    if not 0 <= mq.queue_id < n:
        raise BadArgumentError(f"{queue_name(mq)} does not exist: the topic has queues 0..{n - 1}")


def check_seek(mq: MessageQueue, offset: int, lo: int, hi: int) -> None:
    """RocketMQ's "Seek offset illegal": a seek goes to an offset the queue holds, or to its end."""
    if not lo <= offset <= hi:
        raise BadArgumentError(
            f"cannot seek {queue_name(mq)} to offset {offset}: it holds offsets {lo} to {hi} "
            f"(seek_to_begin and seek_to_end go to either end)"
        )
