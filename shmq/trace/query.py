"""Finding a message's trace records in the store (the broker side of ``Admin.view_trace``).

The index maps each message id a trace message lists in its KEYS to that trace message; its
body lines that mention the id are returned as text. No JSON is parsed here: the trace topic
is writable by every client, so what its bodies hold is parsed and checked by the admin
client, not by the broker. Limits keep one query's cost and reply small.
"""

from __future__ import annotations

import zlib
from typing import Protocol

from shmq.codec import record as fmt

MAX_TRACE_MESSAGES = 64  # trace messages read per query
MAX_LINES = 1024  # lines returned per query
MAX_BODY = fmt.MAX_MESSAGE_SIZE  # a compressed body is read up to this many bytes


class Lookup(Protocol):
    def query_message(
        self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0, end_ts: int | None = None
    ) -> list[fmt.StoredRecord]: ...


def _body(rec: fmt.StoredRecord) -> bytes | None:
    """The body as sent; None for a compressed one that does not inflate (bounded: no zip bomb)."""
    if not rec.sysflag & fmt.FLAG_COMPRESSED:
        return bytes(rec.body)
    try:
        return zlib.decompressobj().decompress(bytes(rec.body), MAX_BODY)
    except zlib.error:
        return None


def trace_lines(store: Lookup, topic: str, msg_id: str) -> list[str]:
    """The lines of ``topic``'s trace messages keyed by ``msg_id`` that mention it, oldest message first."""
    lines: list[str] = []
    for rec in reversed(store.query_message(topic, msg_id, max_num=MAX_TRACE_MESSAGES)):
        body = _body(rec)
        if body is not None:
            lines += [line for line in body.decode("utf-8", "replace").splitlines() if msg_id in line]
        if len(lines) >= MAX_LINES:
            return lines[:MAX_LINES]
    return lines
