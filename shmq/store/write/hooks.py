"""Put hooks: what runs on the records of a put before they are written (RocketMQ's PutMessageHook list).

RocketMQ's store runs its put hooks (``checkBeforePutMessage``, ``checkMessageAndReturnSize``,
``HookUtils.handleScheduleMessage``) on each message before the commitlog append; delay, retry,
transaction and permission rules live there. Here a hook sees a whole put at once, as arrays
over its records (``PutRequest``), so its cost is one call per put whatever the number of
records, and a kind of rule nobody installed costs nothing. A hook may refuse records
(``PutRequest.refuse``: they fail alone with their code and reason, the rest of the put goes
in; a user's MessageBatch is all or nothing) or rewrite where records go (``topics``,
``topic_idx``, ``queue_ids``, or the batch itself).

The store installs two hooks that check what the client sent (``RecordCheck``: sizes, magic,
field lengths, the record's own topic field; ``QueueCheck``: topic names that can become folder
names and queue ids the consume-queue layout takes); hooks added later run after them.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.config import BrokerConfig
from shmq.store.consume_queue import MAX_QUEUE_ID

# RocketMQ ResponseCode values (the same numbers the ring frames carry)
MESSAGE_ILLEGAL = 13
NO_PERMISSION = 16


@dataclass(slots=True, eq=False)
class PutRequest:
    """The records of one put and where each goes: record i to ``topics[topic_idx[i]]`` /
    ``queue_ids[i]``. The common shapes cost no per-record arrays: ``topic_idx`` None means every
    record is of ``topics[0]``, an int ``queue_ids`` that every record goes to that queue.

    ``user_batch``: the records are one MessageBatch of a user (held to maxMessageSize in total,
    stored all or nothing, no transactional records), not separate sends stored together.
    ``inspect``: the records (ascending row numbers) whose properties the hooks must read (delivery
    rules, transaction halves: the sender flagged them); None, the usual case: none.
    """

    batch: fmt.EncodedBatch
    topics: list[str]
    topic_idx: np.ndarray | None = None
    queue_ids: np.ndarray | int = 0
    user_batch: bool = False
    refused: np.ndarray | None = None  # per record: 0 goes in, k > 0 refused for refusals[k - 1]
    refusals: list[tuple[int, str]] | None = None  # (response code, reason); None until one
    # measured once per put of several records (``measure``); a hook that replaces ``batch``
    # sets both to None
    sizes: np.ndarray | None = None
    header: np.ndarray | None = None
    inspect: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.batch.starts)

    def refuse(self, mask: np.ndarray | None, code: int, reason: str) -> None:
        """Refuse the records of ``mask`` (bool per record; None: all) not refused yet."""
        if mask is not None and not mask.any():
            return
        if self.refused is None or self.refusals is None:
            self.refused = np.zeros(len(self), np.int32)
            self.refusals = []
        sel = self.refused == 0
        if mask is not None:
            sel &= mask
        if sel.any():
            self.refusals.append((code, reason))
            self.refused[sel] = len(self.refusals)

    def subset(self, rows: np.ndarray) -> PutRequest:
        """The records ``rows`` (ascending) as a put of their own."""
        q = self.queue_ids
        inspect = None
        if self.inspect is not None:
            inspect = np.flatnonzero(np.isin(rows, self.inspect))
            inspect = inspect if len(inspect) else None
        return PutRequest(
            fmt.select_records(self.batch, rows),
            self.topics,
            None if self.topic_idx is None else self.topic_idx[rows],
            q if isinstance(q, int) else q[rows],
            self.user_batch,
            sizes=None if self.sizes is None else self.sizes[rows],
            header=None if self.header is None else self.header[rows],
            inspect=inspect,
        )

    @classmethod
    def of_records(cls, topic: str, queue_id: int, records: list[bytes]) -> PutRequest:
        """Encoded records of one queue, their tag and key hashes found by decoding them (tools
        and tests; producers compute those while encoding)."""
        tags, keys, key_records = [], [], []
        for i, r in enumerate(records):
            try:
                rec = fmt.decode_record(r)
            except Exception:  # noqa: BLE001 - a malformed record: RecordCheck refuses it, its hashes do not matter
                tags.append(0)
                continue
            tags.append(fmt.tags_code(rec.tags))
            hashes = fmt.record_key_hashes(topic, rec.uniq_key, rec.properties.get(fmt.PROPERTY_KEYS))
            keys += hashes
            key_records += [i] * len(hashes)
        sizes = [len(r) for r in records]
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        batch = fmt.EncodedBatch(
            b"".join(records),
            starts,
            np.array(tags, np.int64),
            np.array(keys, np.int64),
            np.array(key_records, np.int64),
        )
        return cls(batch, [topic], None, queue_id)

    @classmethod
    def of_routes(cls, topics: Sequence[str], queue_ids: Sequence[int], batch: fmt.EncodedBatch) -> PutRequest:
        """Record i of ``batch`` to ``topics[i]`` / ``queue_ids[i]`` (tools and tests; the broker
        takes the topic table and indexes straight from its frames)."""
        table: dict[str, int] = {}
        idx = np.fromiter((table.setdefault(t, len(table)) for t in topics), np.int64, len(topics))
        return cls(batch, list(table), idx, np.asarray(queue_ids, np.int64))

    def topic_ids(self) -> np.ndarray:
        """``topic_idx`` as an array (zeros when every record is of one topic)."""
        return np.zeros(len(self), np.int64) if self.topic_idx is None else self.topic_idx

    def queue_id_array(self) -> np.ndarray:
        q = self.queue_ids
        return np.full(len(self), q, np.int64) if isinstance(q, int) else q


class PutHook(Protocol):
    """Runs once per put on all its records, before the write; refuses or rewrites records."""

    def before_put(self, req: PutRequest) -> None: ...

    def plain_lane(self, req: PutRequest) -> bool:
        """Whether ``before_put`` would leave ``req`` untouched (a put of several records of one
        topic and queue, no rows to inspect): then the writer may store it in one compiled pass
        without calling ``before_put`` (``shmq.store.write.plain_put``). A hook that may act on
        such a put answers False; a subclass that changes ``before_put`` must answer again.
        The broker's SEND_BATCH lane asks before the frame is decoded: ``req.batch`` then holds
        no records, and the answer must come from the topic, queue id and ``user_batch``."""
        ...


class QueueCheck:
    """Topic names become folder names (RocketMQ's characters and length only); queue ids 0..65535."""

    def __init__(self) -> None:
        self._valid: set[str] = set()

    def plain_lane(self, req: PutRequest) -> bool:
        """A topic checked already passes (the plain lane checks the queue id's range itself)."""
        return req.topics[0] in self._valid

    def before_put(self, req: PutRequest) -> None:
        q = req.queue_ids
        if len(req.topics) == 1 and req.topics[0] in self._valid and isinstance(q, int) and 0 <= q <= MAX_QUEUE_ID:
            return  # the usual put: one known topic, one queue
        for k, topic in enumerate(req.topics):
            if topic in self._valid:
                continue
            try:
                fmt.check_topic(topic)
            except ValueError as e:
                req.refuse(None if req.topic_idx is None else req.topic_idx == k, MESSAGE_ILLEGAL, str(e))
                continue
            self._valid.add(topic)
        if isinstance(q, int):
            if not 0 <= q <= MAX_QUEUE_ID:
                req.refuse(None, MESSAGE_ILLEGAL, f"queue id {q} is outside 0..{MAX_QUEUE_ID}")
        else:
            bad = (q < 0) | (q > MAX_QUEUE_ID)
            if bad.any():
                req.refuse(bad, MESSAGE_ILLEGAL, f"queue id {int(q[bad][0])} is outside 0..{MAX_QUEUE_ID}")


def record_limits(config: BrokerConfig) -> tuple[int, int]:
    """(largest body, largest record) a put may hold: maxMessageSize, and the largest record a
    message of that size can make (header, topic, properties)."""
    body = config.max_message_size
    return body, body + fmt.FIXED_OVERHEAD + fmt.MAX_TOPIC_LENGTH + fmt.MAX_PROPERTIES_LENGTH


class RecordCheck:
    """Each record as the producer encoded it: TOTALSIZE matching its length, magic, body and
    properties lengths adding up, its own topic field naming the topic it is put to, and the
    size limits (maxMessageSize per record, or in total for a user's batch, as RocketMQ holds
    a MessageBatch). A single record is checked with struct (a numpy check costs ~20 us); more
    are checked with a few vectorised gathers."""

    def __init__(self, config: BrokerConfig) -> None:
        self.max_body, self.max_record = record_limits(config)

    def plain_lane(self, req: PutRequest) -> bool:
        """The plain lane makes these same checks, compiled, with the same limits."""
        return True

    def before_put(self, req: PutRequest) -> None:
        b = req.batch
        if req.user_batch and len(b.buf) > self.max_body:
            req.refuse(
                None,
                MESSAGE_ILLEGAL,
                f"batch of {len(b.buf)} bytes is over maxMessageSize {self.max_body}; "
                "split it (a single message may be sent alone)",
            )
            return
        if len(b.starts) == 1:
            reason = self._check_one(b.buf, req.topics[0])
            if reason:
                req.refuse(None, MESSAGE_ILLEGAL, reason)
            return
        self._check_many(req)

    def _check_one(self, record: bytes | memoryview, topic: str) -> str:
        size = len(record)
        if size > self.max_record:
            return f"record of {size} bytes is over maxMessageSize {self.max_body}"
        try:
            (total, magic, _, _, _, _, _, _, _, _, _, _, _, _, body_len) = fmt.HEADER.unpack_from(record, 0)
        except struct.error:
            return f"record of {size} bytes is shorter than a header"
        if total != size or magic != fmt.MESSAGE_MAGIC or not 0 <= body_len <= size - fmt.FIXED_OVERHEAD:
            return "record header does not match its length or magic"
        if body_len > self.max_body:
            return f"message body of {body_len} bytes is over maxMessageSize {self.max_body}"
        p = fmt.OFF_BODY + body_len
        topic_b = topic.encode("ascii", "replace")
        if record[p] != len(topic_b) or bytes(record[p + 1 : p + 1 + len(topic_b)]) != topic_b:
            return f"record's topic does not match {topic!r}"
        q = p + 1 + len(topic_b)
        if fmt.record_size(body_len, len(topic_b), (record[q] << 8) | record[q + 1]) != size:
            return "record's field lengths do not add up to its TOTALSIZE"
        return ""

    def _check_many(self, req: PutRequest) -> None:
        """Every check over all records at once; the reasons only when one fails (rare)."""
        b = req.batch
        sizes, header = measure(req)
        ids = req.topic_ids()
        max_record = -1 if req.user_batch else self.max_record
        if req.user_batch and (header[:, 3] & fmt.TRANSACTION_MASK).any():
            req.refuse(None, MESSAGE_ILLEGAL, "transactional records cannot be sent in a batch")
        if records_pass(b.buf, b.starts, sizes, header, ids, req.topics, self.max_body, max_record):
            return
        for mask, reason in _record_checks(b.buf, b.starts, sizes, header, ids, req.topics, self.max_body, max_record):
            req.refuse(mask, MESSAGE_ILLEGAL, reason)


def _record_checks(
    buf: bytes | memoryview,
    starts: np.ndarray,
    sizes: np.ndarray,
    header: np.ndarray,
    ids: np.ndarray,
    topics: list[str],
    max_body: int,
    max_record: int,
) -> list[tuple[np.ndarray, str]]:
    """Each check as a mask over the records, with its reason (``max_record`` -1: not checked)."""
    src = np.frombuffer(buf, np.uint8)
    total, magic, _, _, body_len = header.T
    # Each record's topic field (length byte + name) against its topic's row of a table; the
    # window is as wide as the longest name and is masked past each record's own.
    table = _topic_table(topics)
    width = table.shape[1]
    t = table[ids, 0].astype(np.int64)
    last = len(src) - 1
    topic_pos = np.minimum(starts + fmt.OFF_BODY + np.maximum(body_len, 0), last)
    window = src[np.minimum(topic_pos[:, None] + np.arange(width), last)]
    topic_ok = ((window == table[ids]) | (np.arange(width) > t[:, None])).all(axis=1)
    props_at = np.minimum(topic_pos + t + 1, len(src) - 2)
    props_len = src[props_at].astype(np.int64) * 256 + src[props_at + 1]
    checks = [
        (total != sizes, "record's TOTALSIZE does not match its length"),
        (magic != fmt.MESSAGE_MAGIC, "record with a bad magic code"),
        ((body_len < 0) | (body_len > sizes - fmt.FIXED_OVERHEAD), "record body length out of range"),
        (body_len > max_body, f"message body over maxMessageSize {max_body}"),
        (~topic_ok, f"record's topic field does not match its topic ({', '.join(map(repr, topics[:3]))})"),
        (fmt.FIXED_OVERHEAD + body_len + t + props_len != sizes, "record field lengths do not add up to TOTALSIZE"),
    ]
    if max_record >= 0:
        checks.append((sizes > max_record, f"record over maxMessageSize {max_body}"))
    return checks


def records_pass(
    buf: bytes | memoryview,
    starts: np.ndarray,
    sizes: np.ndarray,
    header: np.ndarray,
    ids: np.ndarray,
    topics: list[str],
    max_body: int,
    max_record: int,
) -> bool:
    """Whether every record passes every check of ``_record_checks`` (the usual case: one
    answer, no reasons). The compiled twin (shmq._speedups._store) reads each record once."""
    checks = _record_checks(buf, starts, sizes, header, ids, topics, max_body, max_record)
    bad = checks[0][0].copy()
    for mask, _ in checks[1:]:
        bad |= mask
    return not bad.any()


records_pass = _speedups.pick("_store", "records_pass", records_pass)


def _topic_table(topics: list[str]) -> np.ndarray:
    """One row per topic: its length byte, then its name, zero-padded to the longest. Filled with
    one scatter: a row at a time cost ~0.6 us per topic, 150 us for a SEND_MULTI of 256 topics."""
    names = [t.encode("ascii", "replace") for t in topics]
    lens = np.fromiter(map(len, names), np.int64, len(names))
    table = np.zeros((len(names), int(lens.max()) + 1), np.uint8)
    table[:, 0] = lens
    chars = np.frombuffer(b"".join(names), np.uint8)
    rows = np.repeat(np.arange(len(names)), lens)
    table[rows, 1 + np.arange(len(chars)) - np.repeat(np.cumsum(lens) - lens, lens)] = chars
    return table


def measure(req: PutRequest) -> tuple[np.ndarray, np.ndarray]:
    """The records' sizes (from their starts) and header fields (TOTALSIZE, MAGICCODE, BODYCRC,
    SYSFLAG, BODYLEN as the records hold them), gathered once per put and kept on the request."""
    if req.sizes is None or req.header is None:
        b = req.batch
        starts = b.starts
        n = len(starts)
        sizes = np.empty(n, np.int64)
        sizes[:-1] = starts[1:] - starts[:-1]
        sizes[-1] = len(b.buf) - starts[-1]
        req.sizes, req.header = sizes, fmt.gather_header_fields(np.frombuffer(b.buf, np.uint8), starts)
    return req.sizes, req.header
