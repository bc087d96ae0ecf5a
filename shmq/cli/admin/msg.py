"""`shmq admin msg query | view | trace`: find messages of a running broker (mqadmin's
queryMsgByKey, queryMsgById / queryMsgByUniqueKey and QueryMsgTraceById).

query and view read the store's index and commitlog files read-only in this process
(``Admin.query_by_key``, ``Admin.view_message``); trace asks the broker (``Admin.view_trace``).
Turning messages into rows is pure (``message_row``, ``message_detail``, ``body_preview``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
from typing import Any

from rich.console import RenderableType

from shmq.cli.admin.output import Result, add_common, admin_of, cluster_of, table
from shmq.cli.subcommands import Subcommands
from shmq.client.msg_lookup import MAX_QUERY_NUM, MessageTrack
from shmq.model.message_ext import MessageExt
from shmq.model.system_topics import TRACE_TOPIC

PREVIEW_BYTES = 256


def parse_time(text: str) -> int:
    """Epoch ms from digits, or from ISO 8601 (local time when it has no zone)."""
    if text.isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not epoch ms nor ISO 8601: {text!r}") from None
    return int(when.timestamp() * 1000)


def max_num(text: str) -> int:
    """`--max`: a count the lookup takes (argparse names the option in the error)."""
    if not text.isdigit() or not 1 <= int(text) <= MAX_QUERY_NUM:
        raise argparse.ArgumentTypeError(f"must be a count in 1..{MAX_QUERY_NUM}, got {text!r}")
    return int(text)


def iso_ms(ms: int) -> str:
    """Epoch ms as local ISO 8601 with milliseconds (what people compare with their logs)."""
    return datetime.datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="milliseconds")


def body_preview(body: bytes, limit: int = PREVIEW_BYTES) -> dict[str, Any]:
    """The first ``limit`` bytes as text if they are UTF-8 without control characters other
    than tab and line breaks (a multi-byte character cut at the end is dropped), else as hex."""
    head = body[:limit]
    try:
        text: str | None = head.decode("utf-8")
    except UnicodeDecodeError as e:
        cut = len(body) > limit and e.start >= len(head) - 3 and e.reason == "unexpected end of data"
        text = head[: e.start].decode("utf-8") if cut else None
    if text is None or any((ord(c) < 32 and c not in "\t\r\n") or 0x7F <= ord(c) < 0xA0 for c in text):
        return {"encoding": "hex", "text": head.hex(" "), "size": len(body), "truncated": len(body) > limit}
    return {"encoding": "utf-8", "text": text, "size": len(body), "truncated": len(body) > limit}


def message_row(m: MessageExt) -> dict[str, Any]:
    """One line of `msg query`'s table."""
    return {
        "msg_id": m.msg_id,
        "offset_msg_id": m.offset_msg_id,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "store_timestamp": m.store_timestamp,
        "store_time": iso_ms(m.store_timestamp),
        "tags": m.tags,
        "keys": m.keys,
        "body_size": len(m.body),
    }


def message_detail(m: MessageExt, tracks: list[MessageTrack]) -> dict[str, Any]:
    """What `msg view` shows: headers, properties, body preview, consumer groups."""
    headers = {
        "topic": m.topic,
        "msg_id": m.msg_id,
        "offset_msg_id": m.offset_msg_id,
        "tags": m.tags,
        "keys": m.keys,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commit_log_offset": m.commit_log_offset,
        "store_size": m.store_size,
        "born_timestamp": m.born_timestamp,
        "born_time": iso_ms(m.born_timestamp),
        "store_timestamp": m.store_timestamp,
        "store_time": iso_ms(m.store_timestamp),
        "reconsume_times": m.reconsume_times,
        "sys_flag": m.sysflag,
    }
    return {
        "headers": headers,
        "properties": dict(m.properties),
        "body": body_preview(m.body),
        "consumers": [dataclasses.asdict(t) for t in tracks],
    }


def _render_query(d: dict[str, Any]) -> RenderableType:
    cluster = ["broker"] if d["messages"] and "broker" in d["messages"][0] else []
    cols = [*cluster, "msg_id", "queue_id", "queue_offset", "store_time", "tags", "keys", "body_size"]
    return table(
        f"{d['topic']} key {d['key']!r}: {len(d['messages'])} message(s)",
        cols,
        ([r[c] for c in cols] for r in d["messages"]),
        right=["queue_id", "queue_offset", "body_size"],
        optional=["body_size", "queue_id", "queue_offset", "store_time"],
    )


def _render_detail(d: dict[str, Any]) -> list[RenderableType]:
    body = d["body"]
    more = f", first {PREVIEW_BYTES} shown" if body["truncated"] else ""
    parts: list[RenderableType] = [
        table("Message", ["field", "value"], d["headers"].items()),
        table("Properties", ["name", "value"], sorted(d["properties"].items())),
        table("Body", [f"{body['size']} bytes, {body['encoding']}{more}"], [[body["text"]]]),
    ]
    if d["consumers"]:
        parts.append(
            table(
                "Consumer groups",
                ["group", "status", "committed_offset"],
                ([c["consumer_group"], c["track_type"], c["committed_offset"]] for c in d["consumers"]),
                right=["committed_offset"],
            )
        )
    else:
        parts.append("No consumer group has committed an offset on this message's queue.")
    return parts


def _render_trace(d: dict[str, Any]) -> list[RenderableType]:
    if not d["records"]:
        return []  # the note says so
    cols = ["type", "time", "group", "client_pid", "cost_ms", "status", "store_time"]
    rows = (
        [
            r["type"],
            iso_ms(r["timestamp"]),
            r["group"],
            r["client_pid"],
            r["cost_ms"],
            r["status"] or ("" if r["success"] is None else ("OK" if r["success"] else "FAILED")),
            iso_ms(r["store_time"]) if r["store_time"] else None,
        ]
        for r in d["records"]
    )
    return [
        table(
            f"Trace of {d['msg_id']}",
            cols,
            rows,
            right=["client_pid", "cost_ms"],
            optional=["store_time", "client_pid", "cost_ms"],
        )
    ]


def query(args: argparse.Namespace) -> Result:
    admin = admin_of(args)
    cluster = cluster_of(admin)
    if cluster is None:
        rows = [message_row(m) for m in admin.query_by_key(args.topic, args.key, args.begin, args.end, args.max)]
    else:  # each broker's, newest first over all, each row saying its broker
        found = [
            {"broker": name, **message_row(m)}
            for name, one in cluster.each()
            for m in one.query_by_key(args.topic, args.key, args.begin, args.end, args.max)
        ]
        rows = sorted(found, key=lambda r: r["store_timestamp"], reverse=True)[: args.max]
    return Result({"topic": args.topic, "key": args.key, "messages": rows}, _render_query)


def view(args: argparse.Namespace) -> Result:
    admin = admin_of(args)
    cluster = cluster_of(admin)
    if cluster is None:
        msg = admin.view_message(args.msg_id, args.topic)
        return Result(message_detail(msg, admin.message_track(msg)), _render_detail)
    name, msg = cluster.find_message(args.msg_id, args.topic)
    one = dict(cluster.each([name]))[name]
    detail = message_detail(msg, one.message_track(msg))
    detail["headers"] = {"broker": name, **detail["headers"]}
    return Result(detail, _render_detail)


def trace(args: argparse.Namespace) -> Result:
    records = admin_of(args).view_trace(args.msg_id, args.trace_topic)
    data = {"msg_id": args.msg_id, "records": [dataclasses.asdict(r) for r in records]}
    return Result(data, _render_trace, notes=[] if records else [f"no trace records of {args.msg_id} (yet)"])


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "msg",
        help="find messages by key or id, show one, show its trace",
        description="Look messages up while the broker runs (read-only on its index and commitlog).",
    )
    msub = p.add_subparsers(dest="sub_command", required=True, metavar="COMMAND")

    q = msub.add_parser("query", help="messages of a topic with a key (KEYS or msg id)")
    q.add_argument("--topic", required=True)
    q.add_argument("--key", required=True)
    q.add_argument("--begin", type=parse_time, default=0, help="stored at or after (epoch ms or ISO 8601)")
    q.add_argument("--end", type=parse_time, default=None, help="stored at or before (default: now)")
    q.add_argument(
        "--max", type=max_num, default=64, help=f"at most this many, newest first (1..{MAX_QUERY_NUM}, default 64)"
    )
    add_common(q)
    q.set_defaults(run=query)

    v = msub.add_parser("view", help="one message by msg id (UNIQ_KEY) or offset msg id")
    v.add_argument("msg_id")
    v.add_argument("--topic", help="the topic of a msg id (default: look in every topic)")
    add_common(v)
    v.set_defaults(run=view)

    t = msub.add_parser("trace", help="a message's trace records (Pub, SubBefore, SubAfter)")
    t.add_argument("msg_id")
    t.add_argument("--trace-topic", default=TRACE_TOPIC, help=f"(default {TRACE_TOPIC})")
    add_common(t)
    t.set_defaults(run=trace)
