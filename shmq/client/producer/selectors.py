"""Queue selectors for ordered sends, and RocketMQ 5's sharding key (message group).

A selector is called as ``selector(queues, msg, arg)`` and returns one of ``queues`` (or its
queue id); RocketMQ's ``MessageQueueSelector``. The ones here are RocketMQ's own, less
``SelectMessageQueueByMachineRoom``: every queue of a broker on one host is in one room.

Ordered consumers see the messages of one queue in order, so messages that must stay in order
(one order's events) are sent to one queue: ``send(msg, sharding_key=order_id)`` is the
shortcut (RocketMQ 5's ``setMessageGroup``). The queue comes from a CRC32 of the key, which is
the same in every process and every Python run (``hash()`` of a str is salted per process), so
a key keeps its queue while the topic's queue count does not change; the key is also stored
as the ``__SHARDINGKEY`` property (RocketMQ 5's name), for consumers and ``shmq admin msg``.
"""

from __future__ import annotations

import copy
import random
import zlib
from typing import Any

from shmq.errors import BadArgumentError
from shmq.model.message import Message, MessageQueue

PROPERTY_SHARDING_KEY = "__SHARDINGKEY"


def stable_hash(arg: Any) -> int:
    """An int as it is, anything else the CRC32 of its str: equal in every process."""
    return arg if isinstance(arg, int) and not isinstance(arg, bool) else zlib.crc32(str(arg).encode())


class SelectMessageQueueByHash:
    """Same ``arg`` (an order id) -> same queue, so its messages stay in order."""

    def __call__(self, queues: list[MessageQueue], msg: Any, arg: Any) -> MessageQueue:
        return queues[abs(stable_hash(arg)) % len(queues)]


class SelectMessageQueueByRandom:
    """Any queue, at random (spreads load when order does not matter)."""

    def __call__(self, queues: list[MessageQueue], msg: Any, arg: Any) -> MessageQueue:
        return random.choice(queues)


def with_sharding_key(msg: Message, key: str, selector: object) -> Message:
    """A copy of ``msg`` carrying ``key`` as ``__SHARDINGKEY`` (the caller's message is not changed)."""
    if selector is not None:
        raise BadArgumentError("give sharding_key or selector, not both: the sharding key picks the queue")
    if not isinstance(key, str) or not key:
        raise BadArgumentError(f"sharding_key must be a non-empty str, got {key!r}")
    if not isinstance(msg, Message):
        return msg  # the encoder's type check reports it
    out = copy.copy(msg)
    out.properties = {**(msg.properties or {}), PROPERTY_SHARDING_KEY: key}
    return out
