"""Producer-side encoding: Message objects -> commitlog records ready for the request ring (pure, no I/O).

The producer does the per-message work (checks, compression, UNIQ_KEY, properties, body CRC,
tag hash, index key hashes) so the broker only copies and patches. A batch is encoded column
by column: attribute gathers, CRCs and hashes run as C-level ``map`` loops, UNIQ_KEYs and record
headers as numpy arrays, and the records come out of one ``bytes.join``. This is what lets one
Python producer feed the broker at close to a million messages a second.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter

import numpy as np

from shmq import _speedups
from shmq.client.producer.compression import compress_body, compress_threshold
from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.codec.buffers import ReadBuffer
from shmq.errors import ArgumentTypeError, BadArgumentError, MessageTooLargeError
from shmq.model.message import Message, MessageBatch

_UNIQ_NAME = (fmt.PROPERTY_UNIQ_KEY + fmt.NAME_VALUE_SEPARATOR).encode()
_UNIQ_LEN = 32
_UNIQ_COUNTER = 24  # UNIQ_KEYs of one block share pid, random word and second; the counter follows
_SEP = fmt.PROPERTY_SEPARATOR.encode()
_FIELDS = attrgetter("body", "topic", "tags", "keys", "properties", "flag", "delivery_rules")


@dataclass(slots=True)
class EncodedMessage:
    """One message checked and encoded, ready to be written into a ring slot."""

    topic: str
    topic_b: bytes
    body: ReadBuffer  # as given (bytes, bytearray or memoryview), or compressed
    props_b: bytes
    sysflag: int
    flag: int
    crc: int
    tags_code: int
    key_hashes: list[int]
    uniq: str

    @property
    def record_len(self) -> int:
        return fmt.record_size(len(self.body), len(self.topic_b), len(self.props_b))


@dataclass(slots=True)
class EncodedMessages:
    """A batch of one topic: the records back to back plus what the SEND_BATCH frame carries."""

    topic_b: bytes
    batch: fmt.EncodedBatch
    uniq_keys: np.ndarray  # S32, one per record

    @property
    def msg_ids(self) -> str:
        """RocketMQ's batch msgId: the UNIQ_KEYs joined by commas."""
        return b",".join(self.uniq_keys.tolist()).decode()


@dataclass(slots=True)
class EncodedMixed:
    """Messages of several topics as one SEND_MULTI: record i is of ``topics[topic_idx[i]]``."""

    topics_b: list[bytes]
    topic_idx: np.ndarray
    batch: fmt.EncodedBatch
    uniq_keys: list[str]


class MessageEncoder:
    """Encodes messages with one producer's limits and UNIQ_KEY sequence."""

    def __init__(self, max_message_size: int = fmt.MAX_MESSAGE_SIZE, compress_over: int | None = 4096) -> None:
        self.max_message_size = max_message_size
        self.compress_over = compress_threshold(compress_over)  # None: never compress
        self.uniq = ids.UniqKeyGenerator()

    def check(self, msg: Message) -> None:
        """Raise now what encoding ``msg`` later would (a message queued for a batch fails in its caller)."""
        if not isinstance(msg, Message):
            raise ArgumentTypeError(f"send takes a Message, got {type(msg).__name__}")
        fmt.check_topic(msg.topic)
        self._check_body(msg.body)
        if msg.tags or msg.keys or msg.properties:
            fmt.encode_properties(msg.build_properties("0" * _UNIQ_LEN))

    def encode(self, msg: Message) -> EncodedMessage:
        """One message (sync, async and oneway sends)."""
        tags, keys, body = msg.tags, msg.keys, msg.body
        if (
            type(msg) is Message
            and type(body) is bytes
            and (tags is None or type(tags) is str)
            and (keys is None or type(keys) is str)
            and not msg.properties
            and not msg.delay_level
            and msg.deliver_at is None
            and msg.delay is None
            and len(body) <= self._limit()
        ):
            return self._encode_plain(msg.topic, body, tags, keys, msg.flag)
        return self._encode_any(msg)

    def _encode_plain(self, topic: str, body: bytes, tags: str | None, keys: str | None, flag: int) -> EncodedMessage:
        """The usual message (bytes body stored as it is, no user properties, no delivery rules):
        what differs per message is its body, CRC and UNIQ_KEY; the rest comes from a cache per
        (topic, tags, keys). The same bytes as ``_encode_any`` (tests/client/producer check it)
        with a third of its Python calls: a sync send pays them cold, after each wake-up."""
        topic_b, before, code, key_hashes = _plain_parts(topic, tags, keys)
        uniq = self.uniq.next()
        uniq_b = uniq.encode()
        return EncodedMessage(
            topic,
            topic_b,
            body,
            before + uniq_b + _SEP,
            0,
            flag,
            zlib.crc32(body) & 0x7FFFFFFF,  # fmt.body_crc
            code,
            [zlib.crc32(topic_b + b"#" + uniq_b) & 0x7FFFFFFF, *key_hashes],  # fmt.record_key_hashes
            uniq,
        )

    def _encode_any(self, msg: Message) -> EncodedMessage:
        """Any message (``encode``'s general path and the reference of ``_encode_plain``)."""
        if not isinstance(msg, Message):
            raise ArgumentTypeError(f"send takes a Message, got {type(msg).__name__}")
        body, sysflag = self._body(msg.body)
        topic_b = fmt.check_topic(msg.topic)
        uniq = self.uniq.next()
        props_b = fmt.encode_properties(msg.build_properties(uniq))
        keys = fmt.record_key_hashes(msg.topic, uniq, msg.keys)
        return EncodedMessage(
            msg.topic,
            topic_b,
            body,
            props_b,
            sysflag,
            msg.flag,
            fmt.body_crc(body),
            fmt.tags_code(msg.tags),
            keys,
            uniq,
        )

    def encode_batch(
        self, msgs: Sequence[Message] | MessageBatch, born_timestamp: int, born_host: int
    ) -> EncodedMessages:
        """Messages of one topic as one batch (no delay levels: RocketMQ refuses them in batches too)."""
        if not len(msgs):
            raise BadArgumentError("send_batch needs at least one message")
        n = len(msgs)
        if isinstance(msgs, MessageBatch):
            if not msgs.properties and (msgs.keys is None or isinstance(msgs.keys, str)):  # the usual batch
                fmt.check_topic(msgs.topic)
                bodies, sysflags = self._bodies(msgs.bodies)
                return self._encode_uniform(
                    msgs.topic, bodies, sysflags, msgs.tags, msgs.keys, msgs.flag, born_timestamp, born_host
                )
            column = [msgs.keys] * n if msgs.keys is None or isinstance(msgs.keys, str) else list(msgs.keys)
            if len(column) != n:
                raise BadArgumentError(f"MessageBatch has {n} bodies but {len(column)} keys")
            return self._encode_columns(
                msgs.topic,
                msgs.bodies,
                [msgs.tags] * n,
                column,
                [msgs.properties] * n,
                msgs.flag,
                born_timestamp,
                born_host,
            )
        uniform = uniform_columns(msgs, Message, self._limit())
        if uniform is not None:
            return self._encode_uniform(
                uniform[0], uniform[1], None, uniform[2], uniform[3], uniform[4], born_timestamp, born_host
            )
        if not all(map(isinstance, msgs, repeat(Message, n))):
            bad = next(m for m in msgs if not isinstance(m, Message))
            raise ArgumentTypeError(f"send_batch takes Message objects or a MessageBatch, got {type(bad).__name__}")
        bodies, topics, tags, keys, user, flags, delays = zip(*map(_FIELDS, msgs))
        topic_set = set(topics)
        if len(topic_set) != 1:
            a, b = sorted(topic_set, key=str)[:2]
            raise BadArgumentError(f"a batch must be of one topic: {a!r} != {b!r}")
        if any(delays):
            raise BadArgumentError("delayed messages (delay_level, deliver_at, delay) cannot be sent in a batch")
        return self._encode_columns(
            topics[0], bodies, tags, keys, user, np.fromiter(flags, np.int64, n), born_timestamp, born_host
        )

    def encode_mixed(self, msgs: Sequence[Message], born_timestamp: int, born_host: int) -> EncodedMixed:
        """Checked messages of any topics as one batch (auto_batch's small groups of many topics)."""
        return encode_mixed(self, msgs, born_timestamp, born_host)

    def _encode_columns(
        self,
        topic: str,
        bodies: Sequence[ReadBuffer],
        tags: Sequence[str | None],
        keys: Sequence[str | None],
        user: Sequence[Mapping[str, str] | None],
        flags: int | np.ndarray,
        born_timestamp: int,
        born_host: int,
    ) -> EncodedMessages:
        n = len(bodies)
        topic_b = fmt.check_topic(topic)
        bodies, sysflags = self._bodies(bodies)
        one_tags = len(set(tags)) == 1
        if not any(user) and one_tags and len(set(keys)) == 1:
            return self._encode_uniform(topic, bodies, sysflags, tags[0], keys[0], flags, born_timestamp, born_host)
        uniq = self.uniq.next_block(n)
        uniq_list = uniq.tolist()
        crcs = np.fromiter(map(zlib.crc32, bodies), np.int64, n) & 0x7FFFFFFF
        tails = [_tail(topic_b, t, k, u, uid) for t, k, u, uid in zip(tags, keys, user, uniq_list)]
        buf, starts = fmt.pack_records_with_tails(bodies, tails, crcs, flags, sysflags, born_timestamp, born_host)
        tags_codes = (
            np.full(n, fmt.tags_code(tags[0]), np.int64)
            if one_tags
            else np.fromiter(map(fmt.tags_code, tags), np.int64, n)
        )
        key_hashes, key_records = _key_hashes(topic, keys, _uniq_hashes(topic_b, uniq))
        return EncodedMessages(topic_b, fmt.EncodedBatch(buf, starts, tags_codes, key_hashes, key_records), uniq)

    def _encode_uniform(
        self,
        topic: str,
        bodies: Sequence[ReadBuffer],
        sysflags: np.ndarray | None,
        tags: str | None,
        keys: str | None,
        flags: int | np.ndarray,
        born_timestamp: int,
        born_host: int,
    ) -> EncodedMessages:
        """Checked bodies of one topic, tags and keys, without user properties (see pack_uniform)."""
        n = len(bodies)
        topic_b = fmt.check_topic(topic)
        head, end = _tail_parts(topic_b, tags, keys)
        prefix, first = self.uniq.reserve(n)
        buf, starts, uniq, uniq_hashes = pack_uniform(
            topic_b, bodies, head, end, prefix, first, flags, sysflags, born_timestamp, born_host
        )
        key_hashes, key_records = _key_hashes(topic, [keys] * n if keys else (), uniq_hashes)
        return EncodedMessages(
            topic_b,
            fmt.EncodedBatch(buf, starts, np.full(n, fmt.tags_code(tags), np.int64), key_hashes, key_records),
            uniq,
        )

    def _check_body(self, body: object) -> None:
        if not isinstance(body, (bytes, bytearray, memoryview)):
            raise ArgumentTypeError(f"message body must be bytes, got {type(body).__name__}")
        if len(body) > self.max_message_size:
            raise MessageTooLargeError(f"message body is {len(body)} bytes; maxMessageSize is {self.max_message_size}")

    def _body(self, body: ReadBuffer) -> tuple[ReadBuffer, int]:
        """The body as stored and its SYSFLAG (see shmq.client.producer.compression)."""
        self._check_body(body)
        return compress_body(body, self.compress_over)

    def _limit(self) -> int:
        """The largest body stored as it is (larger ones are compressed or refused)."""
        return self.max_message_size if self.compress_over is None else min(self.compress_over, self.max_message_size)

    def _bodies(self, bodies: Sequence[ReadBuffer]) -> tuple[Sequence[ReadBuffer], np.ndarray | None]:
        """All bodies of a batch checked at once; only the large ones go through ``_body`` one by one."""
        limit = self._limit()
        if bodies_fit(bodies, limit):
            return bodies, None
        if not set(map(type, bodies)) <= {bytes, bytearray, memoryview}:
            bad = next(b for b in bodies if not isinstance(b, (bytes, bytearray, memoryview)))
            raise ArgumentTypeError(f"message body must be bytes, got {type(bad).__name__}")
        out = list(bodies)
        sysflags = np.zeros(len(bodies), np.int64)
        for i, body in enumerate(bodies):
            if len(body) > limit:
                out[i], sysflags[i] = self._body(body)
        return out, sysflags


def encode_mixed(encoder: MessageEncoder, msgs: Sequence[Message], born_timestamp: int, born_host: int) -> EncodedMixed:
    """Checked messages of any topics as one batch (auto_batch's small groups of many topics).

    Per message only what differs by topic runs in Python (the tail bytes and the UNIQ_KEY
    index hash, ~1 us); headers, CRCs and the buffer are made for all at once. The compiled
    twin (``shmq._speedups._mixed``) takes the usual messages in one C pass (~0.2 us a
    record at 1,250 topics) and hands anything else to this reference."""
    n = len(msgs)
    raw, topics, tags, keys, user, flags, _ = zip(*map(_FIELDS, msgs))
    table: dict[str, int] = {}
    idx = [table.setdefault(t, len(table)) for t in topics]
    names_b = [fmt.check_topic(t) for t in table]
    topic_b = [names_b[k] for k in idx]
    bodies, sysflags = encoder._bodies(raw)
    uniq_list = encoder.uniq.next_block(n).tolist()
    crcs = np.fromiter(map(zlib.crc32, bodies), np.int64, n) & 0x7FFFFFFF
    tails = []
    key_hashes: list[int] = []
    key_records: list[int] = []
    for i, (topic, tb, t, k, u, uid) in enumerate(zip(topics, topic_b, tags, keys, user, uniq_list)):
        tails.append(_tail(tb, t, k, u, uid))
        key_hashes.append(zlib.crc32(tb + b"#" + uid) & 0x7FFFFFFF)  # fmt.index_key_hash(topic, UNIQ_KEY)
        key_records.append(i)
        if k:
            more = _keys_hashes(topic, k)
            key_hashes += more
            key_records += [i] * len(more)
    buf, starts = fmt.pack_records_with_tails(
        bodies, tails, crcs, np.fromiter(flags, np.int64, n), sysflags, born_timestamp, born_host
    )
    batch = fmt.EncodedBatch(
        buf,
        starts,
        np.fromiter(map(fmt.tags_code, tags), np.int64, n),
        np.array(key_hashes, np.int64),
        np.array(key_records, np.int64),
    )
    return EncodedMixed(names_b, np.array(idx, np.int64), batch, [u.decode() for u in uniq_list])


encode_mixed = _speedups.pick("_mixed", "encode_mixed", encode_mixed)


def bodies_fit(bodies: Sequence[ReadBuffer], limit: int) -> bool:
    """Whether every body is exactly bytes, bytearray or memoryview and none is longer than
    ``limit`` (the usual batch: stored as it is). The compiled twin is one pass in C."""
    return set(map(type, bodies)) <= {bytes, bytearray, memoryview} and max(map(len, bodies), default=0) <= limit


bodies_fit = _speedups.pick("_producer", "bodies_fit", bodies_fit)


def pack_uniform(
    topic_b: bytes,
    bodies: Sequence[ReadBuffer],
    head: bytes,
    end: bytes,
    prefix: bytes,
    first: int,
    flags: int | np.ndarray,
    sysflags: np.ndarray | None,
    born_timestamp: int,
    born_host: int,
) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    """The records of a batch whose messages differ only in body (same topic, tags and keys, no
    user properties: every MessageBatch, and what auto_batch gathers): their bytes back to
    back, each one's start, their UNIQ_KEYs (S32, ``ids.uniq_block(prefix, first, n)``) and the
    UNIQ_KEYs' index hashes. Each tail is ``head`` + UNIQ_KEY + ``end`` (``_tail_parts``), so
    the tails are rows of one numpy array. The reference of ``shmq._speedups._producer``'s twin.
    """
    n = len(bodies)
    uniq = ids.uniq_block(prefix, first, n)
    rows = np.empty((n, len(head) + _UNIQ_LEN + len(end)), np.uint8)
    rows[:, : len(head)] = np.frombuffer(head, np.uint8)
    rows[:, len(head) : len(head) + _UNIQ_LEN] = uniq.view(np.uint8).reshape(-1, _UNIQ_LEN)
    rows[:, len(head) + _UNIQ_LEN :] = np.frombuffer(end, np.uint8)
    crcs = np.fromiter(map(zlib.crc32, bodies), np.int64, n) & 0x7FFFFFFF
    buf, starts = fmt.pack_records_with_tails(bodies, rows, crcs, flags, sysflags, born_timestamp, born_host)
    return buf, starts, uniq, _uniq_hashes(topic_b, uniq)


pack_uniform = _speedups.pick("_producer", "pack_uniform", pack_uniform)


def uniform_columns(
    msgs: Sequence[Message], message_type: type[Message], limit: int
) -> tuple[str, list[bytes], str | None, str | None, np.ndarray] | None:
    """(topic, bodies, tags, keys, flags as int64) of Message objects that pack_uniform can take
    as they are: all exactly ``message_type``, one topic, tags and keys (str or None), no user
    properties or delivery rules, ``bytes`` bodies of at most ``limit`` bytes, int flags. None
    for anything else, which then takes the general path (and its errors): this only skips,
    for auto_batch's groups, the general path's gathering of seven attributes per message.
    """
    if not len(msgs) or type(msgs[0]) is not message_type:
        return None
    first = msgs[0]
    topic, tags, keys = first.topic, first.tags, first.keys
    if not (tags is None or type(tags) is str) or not (keys is None or type(keys) is str):
        return None
    for m in msgs:
        if type(m) is not message_type or type(m.body) is not bytes or len(m.body) > limit:
            return None
        if m.topic != topic or m.tags != tags or m.keys != keys:
            return None
        if m.properties or m.delay_level or m.deliver_at is not None or m.delay is not None:
            return None
        if type(m.flag) is not int or not -(2**63) <= m.flag < 2**63:
            return None
    return topic, [m.body for m in msgs], tags, keys, np.fromiter((m.flag for m in msgs), np.int64, len(msgs))


uniform_columns = _speedups.pick("_producer", "uniform_columns", uniform_columns)


def _tail(topic_b: bytes, tags: str | None, keys: str | None, user: Mapping[str, str] | None, uniq: bytes) -> bytes:
    """One record's tail; messages without user properties reuse the cached bytes around the UNIQ_KEY."""
    if user:
        props = fmt.encode_properties(fmt.message_properties(tags, keys, uniq.decode(), user))
        return _topic_part(topic_b) + len(props).to_bytes(2, "big") + props
    head, end = _tail_parts(topic_b, tags, keys)
    return head + uniq + end


@functools.lru_cache(maxsize=1024)
def _topic_part(topic_b: bytes) -> bytes:
    return bytes([len(topic_b)]) + topic_b


@functools.lru_cache(maxsize=4096)
def _tail_parts(topic_b: bytes, tags: str | None, keys: str | None) -> tuple[bytes, bytes]:
    """The bytes of a tail before and after its UNIQ_KEY value, for messages without user properties."""
    before = fmt.encode_properties(fmt.message_properties(tags, keys)) + _UNIQ_NAME
    props_len = len(before) + _UNIQ_LEN + len(_SEP)
    return _topic_part(topic_b) + props_len.to_bytes(2, "big") + before, _SEP


def _uniq_hashes(topic_b: bytes, uniq: np.ndarray) -> np.ndarray:
    """``fmt.index_key_hash(topic, UNIQ_KEY)`` of each id of a block (they differ only in the counter)."""
    n = len(uniq)
    counters = uniq.view(np.uint8).reshape(n, _UNIQ_LEN)[:, _UNIQ_COUNTER:]
    return fmt.crc32_of_variants(zlib.crc32(topic_b + b"#" + uniq[0].tobytes()), counters) & 0x7FFFFFFF


def _key_hashes(topic: str, keys: Sequence[str | None], uniq_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index key hashes (``fmt.record_key_hashes`` for each record) and the record each belongs to."""
    n = len(uniq_hashes)
    if not any(keys):
        return uniq_hashes, np.arange(n, dtype=np.int64)
    extra = [(i, h) for i, k in enumerate(keys) if k for h in _keys_hashes(topic, k)]
    records = np.concatenate([np.arange(n, dtype=np.int64), np.fromiter((i for i, _ in extra), np.int64, len(extra))])
    hashes = np.concatenate([uniq_hashes, np.fromiter((h for _, h in extra), np.int64, len(extra))])
    order = np.argsort(records, kind="stable")
    return hashes[order], records[order]


@functools.lru_cache(maxsize=4096)
def _keys_hashes(topic: str, keys: str) -> tuple[int, ...]:
    return tuple(fmt.record_key_hashes(topic, None, keys))


@functools.lru_cache(maxsize=4096)
def _plain_parts(topic: str, tags: str | None, keys: str | None) -> tuple[bytes, bytes, int, tuple[int, ...]]:
    """What a plain message of (topic, tags, keys) shares with every other (``_encode_plain``):
    the topic's bytes, its properties up to the UNIQ_KEY's value, the tags code and the KEYS'
    index hashes. Checked as the general path checks them, with a UNIQ_KEY of its length (errors
    are not cached)."""
    topic_b = fmt.check_topic(topic)
    props = fmt.encode_properties(fmt.message_properties(tags, keys, "0" * _UNIQ_LEN))
    return topic_b, props[: -_UNIQ_LEN - len(_SEP)], fmt.tags_code(tags), _keys_hashes(topic, keys) if keys else ()
