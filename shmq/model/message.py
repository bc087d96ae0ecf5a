"""The message model users send and receive: Message, MessageQueue, SendStatus, SendResult."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from shmq import _speedups
from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.config import MAX_DELAY_LEVELS
from shmq.errors import BadMessageError
from shmq.model.reprs import Raw, body_repr, fields_repr, items_repr, span

MAX_DELAY_LEVEL = MAX_DELAY_LEVELS  # the most levels messageDelayLevel may name (RocketMQ's default has 18)
# properties the broker acts on before storing (RocketMQ users may set them as plain properties)
_RULE_KEYS = frozenset({fmt.PROPERTY_DELAY, fmt.PROPERTY_TIMER_DELIVER_MS, fmt.PROPERTY_TIMER_DELAY_MS})


def join_keys(keys: str | Iterable[str] | None) -> str | None:
    """RocketMQ 5 clients take keys as a collection; the KEYS property holds them space-separated.
    A set is sorted (it has no order of its own), a list or tuple keeps its order."""
    if keys is None or isinstance(keys, str):
        return keys
    if isinstance(keys, (bytes, bytearray)) or not isinstance(keys, Iterable):
        raise BadMessageError(f"keys must be a str or a collection of str, got {type(keys).__name__}")
    items = sorted(keys) if isinstance(keys, AbstractSet) else list(keys)
    for k in items:
        if not isinstance(k, str) or not k or any(c.isspace() for c in k):
            raise BadMessageError(f"each key must be a non-empty str without whitespace, got {k!r}")
    return " ".join(items) or None


def _seconds(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value != value
        or value < 0
        or value == float("inf")
    ):
        raise BadMessageError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _checked(delay_level: Any, deliver_at: Any, delay: Any, keys: Any) -> tuple[Any, float | None, float | None, Any]:
    """A Message's delivery fields checked and ``keys`` joined: what ``__init__`` stores. A bad
    value fails at the call that made it, not at a later send."""
    if delay_level and not (isinstance(delay_level, int) and 0 <= delay_level <= MAX_DELAY_LEVEL):
        raise BadMessageError(f"delay_level must be an int in 0..{MAX_DELAY_LEVEL} (0: no delay), got {delay_level!r}")
    if deliver_at is not None:
        deliver_at = _seconds("deliver_at", deliver_at)
    if delay is not None:
        delay = _seconds("delay", delay)
    if sum((bool(delay_level), deliver_at is not None, delay is not None)) > 1:
        raise BadMessageError("give at most one of delay_level, deliver_at and delay")
    return delay_level, deliver_at, delay, keys if keys is None or isinstance(keys, str) else join_keys(keys)


class _Fields:
    """A Message's fields as slots and its ``__init__``: the Python reference of the compiled
    ``_message.MessageFields`` (a plain message is made there without a Python frame)."""

    __slots__ = ("topic", "body", "tags", "keys", "properties", "flag", "delay_level", "deliver_at", "delay")

    def __init__(
        self,
        topic: str,
        body: bytes,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        delay_level: int = 0,
        deliver_at: float | None = None,
        delay: float | None = None,
    ) -> None:
        if delay_level or deliver_at is not None or delay is not None or (keys is not None and type(keys) is not str):
            delay_level, deliver_at, delay, keys = _checked(delay_level, deliver_at, delay, keys)
        self.topic = topic
        self.body = body
        self.tags = tags
        self.keys = keys
        self.properties = properties
        self.flag = flag
        self.delay_level = delay_level
        self.deliver_at = deliver_at
        self.delay = delay


if TYPE_CHECKING:
    _Base = _Fields
else:
    _Base = _speedups.pick("_message", "MessageFields", _Fields)


@dataclass(init=False)
class Message(_Base):
    """A message to send. ``keys`` are index keys: a space-separated str, or a list, tuple or set
    of them. Delivery may wait: ``delay_level`` n (1..18 with the default ``messageDelayLevel``,
    a level past the broker's last is its last, as in RocketMQ; 0: none), or any time up to the
    broker's ``timerMaxDelaySec`` with ``deliver_at`` (epoch seconds) or ``delay`` (seconds after
    the broker receives it), at most one of the three. They are checked here, so a bad value
    fails at the call that made it, not at a later send (the broker refuses a time beyond
    ``timerMaxDelaySec``).

    The fields are slots of the base class (compiled when extensions are on), so a Message has
    no ``__dict__``; a subclass may add attributes as usual."""

    __slots__ = ()

    topic: str = field()
    body: bytes = field()
    tags: str | None = field()
    keys: str | None = field()
    properties: dict[str, str] | None = field()
    flag: int = field()
    delay_level: int = field()
    deliver_at: float | None = field()
    delay: float | None = field()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle and copy by field names, the same with and without extensions (plus a
        subclass's own attributes)."""
        state = {f: getattr(self, f) for f in _Fields.__slots__}
        state.update(getattr(self, "__dict__", ()))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        """The fields that are set, the body cut to its first bytes (a print stays one line)."""
        return fields_repr(
            type(self).__name__,
            (
                ("topic", self.topic),
                ("body", body_repr(self.body)),
                ("tags", self.tags),
                ("keys", self.keys),
                ("properties", self.properties or None),
                ("flag", self.flag or None),
                ("delay_level", self.delay_level or None),
                ("deliver_at", self.deliver_at),
                ("delay", self.delay),
            ),
        )

    @property
    def delivery_rules(self) -> bool:
        """Whether the broker must read this message's properties before storing it (a delay or a
        delivery time): such messages are sent alone, flagged, never in a batch."""
        return (
            bool(self.delay_level)
            or self.deliver_at is not None
            or self.delay is not None
            or (self.properties is not None and not _RULE_KEYS.isdisjoint(self.properties))
        )

    def build_properties(self, uniq_key: str) -> dict[str, str]:
        """The record's properties: TAGS, KEYS, UNIQ_KEY, delivery rules, then the user's."""
        props = fmt.message_properties(self.tags, self.keys, uniq_key, self.properties)
        if self.delay_level > 0:
            props[fmt.PROPERTY_DELAY] = str(self.delay_level)
        elif self.deliver_at is not None:
            props[fmt.PROPERTY_TIMER_DELIVER_MS] = str(round(self.deliver_at * 1000))
        elif self.delay is not None:
            props[fmt.PROPERTY_TIMER_DELAY_MS] = str(round(self.delay * 1000))
        return props


@dataclass
class MessageBatch:
    """Messages of one topic given as columns: the throughput form of ``Producer.send_batch``.

    Only the bodies differ; tags, user properties and flag are shared. ``keys`` is one string
    for all, or one (or None) per body. Encoding skips reading seven attributes of every
    Message object, which is most of a Python producer's cost per message.
    """

    topic: str
    bodies: Sequence[bytes]
    tags: str | None = None
    keys: str | Sequence[str | None] | None = None
    properties: dict[str, str] | None = None
    flag: int = 0

    def __len__(self) -> int:
        return len(self.bodies)

    def __repr__(self) -> str:
        """Counts and sizes, not the bodies (a batch holds thousands)."""
        keys = self.keys if self.keys is None or isinstance(self.keys, str) else items_repr(list(self.keys), "keys")
        return fields_repr(
            "MessageBatch",
            (
                ("topic", self.topic),
                ("messages", len(self.bodies)),
                ("bytes", sum(len(b) for b in self.bodies)),
                ("tags", self.tags),
                ("keys", keys),
                ("properties", self.properties or None),
                ("flag", self.flag or None),
            ),
        )


@dataclass(frozen=True, order=True)
class MessageQueue:
    """One queue of a topic on a broker (RocketMQ's MessageQueue)."""

    topic: str
    broker_name: str
    queue_id: int


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


UNSET: Any = object()  # a LazyField not made yet


class LazyField:
    """An attribute made on first read by ``make(obj)`` and kept in the slot ``_<name>`` (UNSET
    until then); assigning sets it. For fields most readers never look at."""

    def __init__(self, make: Callable[[Any], Any]) -> None:
        self.make = make
        self.slot = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = getattr(obj, self.slot)
        if value is UNSET:
            value = self.make(obj)
            setattr(obj, self.slot, value)
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(obj, self.slot, value)


class ByValue:
    """Equality over ``_FIELDS``, as a dataclass has, for the slotted classes that make some
    fields on first use (SendResult, MessageExt). Mutable, so not hashable. Their reprs are
    their own: short, as a print of a batch's result must stay."""

    __slots__ = ()
    _FIELDS: tuple[str, ...] = ()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, f) for f in self._FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]


class _ResultFields:
    """A SendResult's fields as slots: the Python reference of the compiled
    ``_message.SendResultFields`` (C slots that ``split_results`` fills without attribute lookups)."""

    __slots__ = (
        "status",
        "queue",
        "queue_offset",
        "store_timestamp",
        "count",
        "phys_offsets",
        "store_host",
        "_msg_id",
        "_make_msg_id",
        "_offset_msg_id",
    )


if TYPE_CHECKING:
    _ResultBase = _ResultFields
else:
    _ResultBase = _speedups.pick("_message", "SendResultFields", _ResultFields)


class SendResult(ByValue, _ResultBase):
    """Where a send landed. For a batch, ``msg_id`` and ``offset_msg_id`` are comma-joined, one per message.

    The producer builds one per answered send in its reader thread. The ids of a batch (two
    strings of 33 characters per message) are made on first use: formatting them for a batch
    of 2,048 took a third of a producer's CPU in the batch benchmark, and most callers only
    check ``status``. The fields are slots of the base class (C slots when extensions are on)."""

    __slots__ = ()

    def __init__(
        self,
        status: SendStatus,
        msg_id: str | Callable[[], str],
        offset_msg_id: str | None,
        queue: MessageQueue,
        queue_offset: int,
        store_timestamp: int = 0,
        count: int = 1,
        phys_offsets: list[int] | None = None,
        store_host: int = 0,
    ) -> None:
        """``msg_id`` may be a function that makes it; ``offset_msg_id`` None: made from
        ``store_host`` and ``phys_offsets`` when first asked for."""
        self.status = status
        self.queue = queue
        self.queue_offset = queue_offset
        self.store_timestamp = store_timestamp
        self.count = count
        self.phys_offsets = [] if phys_offsets is None else phys_offsets
        self.store_host = store_host
        made_later = not isinstance(msg_id, str)
        self._msg_id: Any = UNSET if made_later else msg_id
        self._make_msg_id: Any = msg_id if made_later else None
        self._offset_msg_id = UNSET if offset_msg_id is None else offset_msg_id

    msg_id = LazyField(lambda r: r._make_msg_id())
    offset_msg_id = LazyField(
        lambda r: (
            ids.offset_msg_id(r.store_host, r.phys_offsets[0])
            if len(r.phys_offsets) == 1
            else ",".join(ids.offset_msg_ids(r.store_host, np.asarray(r.phys_offsets, np.int64)))
        )
    )

    _FIELDS = ("status", "msg_id", "offset_msg_id", "queue", "queue_offset", "store_timestamp", "count", "phys_offsets")

    def __repr__(self) -> str:
        return fields_repr(type(self).__name__, self._repr_parts())

    def _repr_parts(self) -> list[tuple[str, Any]]:
        """Status, id(s), queue and offset(s); a batch's ids cut to the first few."""
        if self.count == 1:
            return [
                ("status", Raw(self.status.name)),
                ("msg_id", self.msg_id),
                ("queue", self.queue),
                ("queue_offset", self.queue_offset),
            ]
        return [
            ("status", Raw(self.status.name)),
            ("count", self.count),
            ("msg_id", items_repr(self.msg_id.split(","), "ids")),
            ("queue", self.queue),
            ("queue_offset", span(self.queue_offset, self.queue_offset + self.count - 1)),
        ]

    def __getstate__(self) -> dict[str, Any]:
        """Pickle and copy by slot names, the same with and without extensions (plus a subclass's
        own slots and attributes). The lazy ids are made first: UNSET would not survive a
        pickle, nor would the function that makes a batch's ids."""
        names = list(_ResultFields.__slots__)
        for klass in type(self).__mro__[: type(self).__mro__.index(SendResult)]:
            slots = klass.__dict__.get("__slots__", ())
            names.extend((slots,) if isinstance(slots, str) else slots)
        state = {name: getattr(self, name) for name in names if hasattr(self, name)}
        state.update(_msg_id=self.msg_id, _make_msg_id=None, _offset_msg_id=self.offset_msg_id)
        state.update(getattr(self, "__dict__", ()))
        return state

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple):  # pickled before the fields moved to a base: (None, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        for name, value in state.items():
            setattr(self, name, value)


def _split_results(
    cls: type[SendResult],
    status: SendStatus,
    uniqs: Sequence[str],
    queue: MessageQueue,
    queue_offset: int,
    store_timestamp: int,
    phys_offsets: Sequence[int],
    store_host: int,
) -> list[SendResult]:
    """One SendResult per message of an answered batch (``uniqs[i]`` its id, stored at
    ``queue_offset + i`` and ``phys_offsets[i]``): the reader thread's work per auto-batched
    message, compiled in ``_message.split_results`` (no ``__init__`` call per result)."""
    return [
        cls(status, uniq, None, queue, queue_offset + i, store_timestamp, 1, [p], store_host)
        for i, (uniq, p) in enumerate(zip(uniqs, phys_offsets))
    ]


split_results = _speedups.pick("_message", "split_results", _split_results)
