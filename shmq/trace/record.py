"""Trace records (RocketMQ's message trace): what happened to a message, one record per event.

Types (RocketMQ's TraceType names): ``Pub`` (a send answered), ``SubBefore`` (a listener is
about to get the message), ``SubAfter`` (the listener returned). A trace message stored under
the trace topic holds up to 100 records (``shmq.trace.dispatcher.MAX_RECORDS``) as JSON lines
(UTF-8, one object per line, ``\\n`` after each), and its KEYS property lists the message ids
they are about, so the index finds the trace of a message by its id (``Admin.view_trace``).

Pure: building and (de)serialising records; the dispatcher and hooks do the I/O.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, fields
from json.encoder import encode_basestring_ascii
from typing import Any

from shmq.client.hooks import ConsumeMessageContext, SendMessageContext
from shmq.model.message import Message, MessageBatch

PUB, SUB_BEFORE, SUB_AFTER = "Pub", "SubBefore", "SubAfter"
TYPES = (PUB, SUB_BEFORE, SUB_AFTER)
_ORDER = {t: i for i, t in enumerate(TYPES)}
CLIENT_HOST = socket.gethostname()
# a record as the clients build it: (the message id, its JSON line); the line holds TraceRecord's
# fields, those that are None left out, written with f-strings (a json.dumps of a dict per record
# took most of the trace's cost); every string a user chose goes through the JSON string escaper
Line = tuple[str, str]
_str = encode_basestring_ascii  # a str as a JSON string literal, quotes included (the C escaper)


@dataclass(slots=True)
class TraceRecord:
    """One event of one message, as ``Admin.view_trace`` returns it. Times are ms since the
    epoch; ``cost_ms`` is the send's time to its answer (Pub) or the listener call's time
    (SubAfter: the whole call, which got ``batch`` messages); ``request_id`` pairs a SubBefore
    with its SubAfter."""

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

    @classmethod
    def from_json(cls, line: str) -> TraceRecord | None:
        """A record from one line; None for a line that is not one (the trace topic is writable
        by any client, so its lines are checked, never trusted)."""
        try:
            d = json.loads(line)
        except ValueError:
            return None
        if (
            not isinstance(d, dict)
            or d.get("type") not in TYPES
            or type(d.get("timestamp")) is not int
            or not all(isinstance(d.get(k), str) for k in ("group", "topic", "msg_id"))
        ):
            return None
        try:
            return cls(**{k: v for k, v in d.items() if k in _NAMES})
        except TypeError:
            return None

    @property
    def sort_key(self) -> tuple[int, int]:
        """Time order; at one ms, Pub before SubBefore before SubAfter."""
        return self.timestamp, _ORDER[self.type]


_NAMES = frozenset(f.name for f in fields(TraceRecord))


def _sent(message: Message | MessageBatch | Any) -> list[tuple[str, str | None, str | None, int]]:
    """(topic, tags, keys, body length) of each message a send carried."""
    if isinstance(message, Message):
        return [(message.topic, message.tags, message.keys, len(message.body))]
    if isinstance(message, MessageBatch):
        k = message.keys
        keys = [k] * len(message) if k is None or isinstance(k, str) else list(k)
        return [(message.topic, message.tags, key, len(b)) for key, b in zip(keys, message.bodies)]
    return [(m.topic, m.tags, m.keys, len(m.body)) for m in message]


def _opt(name: str, value: str | None) -> str:
    return "" if value is None else f',"{name}":{_str(value)}'


def pub_records(ctx: SendMessageContext) -> list[Line]:
    """The Pub records of an answered send, one per message; none for a failed send (it has no
    message id to find it by, as in RocketMQ) or a oneway one (no answer)."""
    r = ctx.result
    if r is None:
        return []
    sent = _sent(ctx.message)
    ids = r.msg_id.split(",") if len(sent) > 1 else [r.msg_id]
    offset_ids = r.offset_msg_id.split(",") if len(sent) > 1 else [r.offset_msg_id]
    head = (
        f'{{"type":"{PUB}","timestamp":{ctx.begin_timestamp},"group":{_str(ctx.group)},'
        f'"queue_id":{r.queue.queue_id},"store_time":{r.store_timestamp},"cost_ms":{round(ctx.cost_ms, 3)},'
        f'"status":"{r.status.value}","success":true,"batch":{len(sent)},{_client()}'
    )
    qoff = r.queue_offset
    return [
        (
            ids[i],
            f'{head},"topic":{_str(topic)},"msg_id":{_str(ids[i])},"offset_msg_id":{_str(offset_ids[i])},'
            f'"queue_offset":{qoff + i},"body_length":{length}{_opt("tags", tags)}{_opt("keys", keys)}}}\n',
        )
        for i, (topic, tags, keys, length) in enumerate(sent[: len(ids)])
    ]


def sub_records(ctx: ConsumeMessageContext, request_id: str, before: bool) -> list[Line]:
    """SubBefore records (``before``) or SubAfter records of one listener call, one per message."""
    head = (
        f'{{"type":"{SUB_BEFORE if before else SUB_AFTER}",'
        f'"timestamp":{ctx.begin_timestamp if before else ctx.end_timestamp},"group":{_str(ctx.group)},'
        f'"request_id":{_str(request_id)},{_client()}'
    )
    if not before:
        head += (
            f',"cost_ms":{round(ctx.cost_ms, 3)},"success":{"true" if ctx.success else "false"},'
            f'"batch":{len(ctx.messages)}{_opt("status", ctx.status.value if ctx.status else None)}'
        )
    return [
        (
            m.msg_id,
            f'{head},"topic":{_str(m.topic)},"msg_id":{_str(m.msg_id)},'
            f'"offset_msg_id":{_str(m.offset_msg_id)},"queue_id":{m.queue_id},"queue_offset":{m.queue_offset},'
            f'"store_time":{m.store_timestamp},"born_time":{m.born_timestamp},"body_length":{len(m.body)},'
            f'"reconsume_times":{m.reconsume_times}{_opt("tags", m.tags)}{_opt("keys", m.keys)}}}\n',
        )
        for m in ctx.messages
    ]


def _client() -> str:
    return f'"client_host":{_str(CLIENT_HOST)},"client_pid":{os.getpid()}'
