"""Trace records (RocketMQ's message trace): what happened to a message, one record per event.

Types (RocketMQ's TraceType names): ``Pub`` (a send answered), ``SubBefore`` (a listener is
about to get the message), ``SubAfter`` (the listener returned). A trace message stored under
the trace topic holds the records of up to ``MAX_RECORDS`` events as JSON lines (UTF-8, one
object per line, ``\\n`` after each), and its KEYS property lists the message ids they are
about, so the index finds the trace of a message by its id (``Admin.view_trace``).

Pure: building and (de)serialising records; the dispatcher and hooks do the I/O.
"""
from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterator

from shmq.client.hooks import ConsumeMessageContext, SendMessageContext
from shmq.model.message import Message, MessageBatch
from shmq.model.message_ext import MessageExt

PUB, SUB_BEFORE, SUB_AFTER = "Pub", "SubBefore", "SubAfter"
TYPES = (PUB, SUB_BEFORE, SUB_AFTER)
_ORDER = {t: i for i, t in enumerate(TYPES)}
CLIENT_HOST = socket.gethostname()


@dataclass
class TraceRecord:
    """One event of one message. Times are ms since the epoch; ``cost_ms`` is the send's time
    to its answer (Pub) or the listener call's time (SubAfter: the whole call, which got
    ``batch`` messages); ``request_id`` pairs a SubBefore with its SubAfter."""

    type: str
    timestamp: int
    group: str
    topic: str
    msg_id: str
    tags: str | None = None
    keys: str | None = None
    offset_msg_id: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    store_time: int | None = None
    born_time: int | None = None
    body_length: int | None = None
    reconsume_times: int | None = None
    cost_ms: float | None = None
    status: str | None = None
    success: bool | None = None
    batch: int | None = None
    request_id: str | None = None
    client_host: str = CLIENT_HOST
    client_pid: int = 0

    def to_json(self) -> str:
        """The record as one JSON line (without the newline); fields that are None are left out."""
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> "TraceRecord | None":
        """A record from one line; None for a line that is not one (the trace topic is writable
        by any client, so its lines are checked, never trusted)."""
        try:
            d = json.loads(line)
        except ValueError:
            return None
        if not isinstance(d, dict) or d.get("type") not in TYPES:
            return None
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in d.items() if k in known})
        except TypeError:
            return None

    @property
    def sort_key(self) -> tuple[int, int]:
        return self.timestamp if isinstance(self.timestamp, int) else 0, _ORDER.get(self.type, 0)


def decode_body(body: bytes | str) -> Iterator[TraceRecord]:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    for line in text.splitlines():
        r = TraceRecord.from_json(line) if line.strip() else None
        if r is not None:
            yield r


def _sent(message: Message | MessageBatch | Any) -> list[tuple[str, str | None, str | None, int]]:
    """(topic, tags, keys, body length) of each message a send carried."""
    if isinstance(message, Message):
        return [(message.topic, message.tags, message.keys, len(message.body))]
    if isinstance(message, MessageBatch):
        k = message.keys
        keys = [k] * len(message) if k is None or isinstance(k, str) else list(k)
        return [(message.topic, message.tags, key, len(b)) for key, b in zip(keys, message.bodies)]
    return [(m.topic, m.tags, m.keys, len(m.body)) for m in message]


def pub_records(ctx: SendMessageContext) -> list[TraceRecord]:
    """The Pub records of an answered send, one per message; none for a failed send (it has no
    message id to find it by, as in RocketMQ) or a oneway one (no answer)."""
    r = ctx.result
    if r is None:
        return []
    sent = _sent(ctx.message)
    ids = r.msg_id.split(",") if len(sent) > 1 else [r.msg_id]
    offset_ids = r.offset_msg_id.split(",") if len(sent) > 1 else [r.offset_msg_id]
    pid = os.getpid()
    return [TraceRecord(PUB, ctx.begin_timestamp, ctx.group, topic, ids[i], tags, keys, offset_ids[i],
                        r.queue.queue_id, r.queue_offset + i, r.store_timestamp, body_length=length,
                        cost_ms=round(ctx.cost_ms, 3), status=r.status.value, success=True, batch=len(sent),
                        client_pid=pid)
            for i, (topic, tags, keys, length) in enumerate(sent) if i < len(ids)]


def _sub(kind: str, ctx: ConsumeMessageContext, m: MessageExt, request_id: str, pid: int) -> TraceRecord:
    return TraceRecord(kind, ctx.begin_timestamp if kind == SUB_BEFORE else ctx.end_timestamp, ctx.group, m.topic,
                       m.msg_id, m.tags, m.keys, m.offset_msg_id, m.queue_id, m.queue_offset, m.store_timestamp,
                       m.born_timestamp, len(m.body), m.reconsume_times, request_id=request_id, client_pid=pid)


def sub_records(ctx: ConsumeMessageContext, request_id: str, before: bool) -> list[TraceRecord]:
    """SubBefore records (``before``) or SubAfter records of one listener call, one per message."""
    pid = os.getpid()
    if before:
        return [_sub(SUB_BEFORE, ctx, m, request_id, pid) for m in ctx.messages]
    out = []
    for m in ctx.messages:
        r = _sub(SUB_AFTER, ctx, m, request_id, pid)
        r.cost_ms = round(ctx.cost_ms, 3)
        r.status = ctx.status.value if ctx.status is not None else None
        r.success = ctx.success
        r.batch = len(ctx.messages)
        out.append(r)
    return out
