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
from dataclasses import dataclass, fields
from typing import Any, Iterator

from shmq.client.hooks import ConsumeMessageContext, SendMessageContext
from shmq.model.message import Message, MessageBatch

PUB, SUB_BEFORE, SUB_AFTER = "Pub", "SubBefore", "SubAfter"
TYPES = (PUB, SUB_BEFORE, SUB_AFTER)
_ORDER = {t: i for i, t in enumerate(TYPES)}
CLIENT_HOST = socket.gethostname()
Fields = dict[str, Any]  # a record as built by the clients: TraceRecord's fields, those that are None left out


@dataclass(slots=True)
class TraceRecord:
    """One event of one message, as ``Admin.view_trace`` returns it. Times are ms since the epoch; ``cost_ms`` is the send's time
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
        return _dumps({k: v for k in _NAMES if (v := getattr(self, k)) is not None})

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
        try:
            return cls(**{k: v for k, v in d.items() if k in _NAMES})
        except TypeError:
            return None

    @property
    def sort_key(self) -> tuple[int, int]:
        return self.timestamp if isinstance(self.timestamp, int) else 0, _ORDER.get(self.type, 0)


_NAMES = tuple(f.name for f in fields(TraceRecord))
_dumps = json.JSONEncoder(separators=(",", ":")).encode  # one encoder, not one per call


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


def pub_records(ctx: SendMessageContext) -> list[Fields]:
    """The Pub records of an answered send, one per message; none for a failed send (it has no
    message id to find it by, as in RocketMQ) or a oneway one (no answer)."""
    r = ctx.result
    if r is None:
        return []
    sent = _sent(ctx.message)
    ids = r.msg_id.split(",") if len(sent) > 1 else [r.msg_id]
    offset_ids = r.offset_msg_id.split(",") if len(sent) > 1 else [r.offset_msg_id]
    base = {"type": PUB, "timestamp": ctx.begin_timestamp, "group": ctx.group, "queue_id": r.queue.queue_id,
            "store_time": r.store_timestamp, "cost_ms": round(ctx.cost_ms, 3), "status": r.status.value,
            "success": True, "batch": len(sent), "client_host": CLIENT_HOST, "client_pid": os.getpid()}
    out = []
    for i, (topic, tags, keys, length) in enumerate(sent[:len(ids)]):
        d = dict(base, topic=topic, msg_id=ids[i], offset_msg_id=offset_ids[i], queue_offset=r.queue_offset + i,
                 body_length=length)
        if tags is not None:
            d["tags"] = tags
        if keys is not None:
            d["keys"] = keys
        out.append(d)
    return out


def sub_records(ctx: ConsumeMessageContext, request_id: str, before: bool) -> list[Fields]:
    """SubBefore records (``before``) or SubAfter records of one listener call, one per message."""
    base: Fields = {"type": SUB_BEFORE if before else SUB_AFTER,
                    "timestamp": ctx.begin_timestamp if before else ctx.end_timestamp, "group": ctx.group,
                    "request_id": request_id, "client_host": CLIENT_HOST, "client_pid": os.getpid()}
    if not before:
        base.update(cost_ms=round(ctx.cost_ms, 3), success=ctx.success, batch=len(ctx.messages))
        if ctx.status is not None:
            base["status"] = ctx.status.value
    out = []
    for m in ctx.messages:
        d = dict(base, topic=m.topic, msg_id=m.msg_id, offset_msg_id=m.offset_msg_id, queue_id=m.queue_id,
                 queue_offset=m.queue_offset, store_time=m.store_timestamp, born_time=m.born_timestamp,
                 body_length=len(m.body), reconsume_times=m.reconsume_times)
        tags, keys = m.tags, m.keys
        if tags is not None:
            d["tags"] = tags
        if keys is not None:
            d["keys"] = keys
        out.append(d)
    return out


def to_line(record: Fields) -> str:
    """One record as a JSON line (with its newline)."""
    return _dumps(record) + "\n"
