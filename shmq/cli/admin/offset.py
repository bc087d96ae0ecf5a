"""`shmq admin offset reset`: move a consumer group's offsets of a topic (RocketMQ's resetOffsetByTime).

Running members of the group follow at once: they drop what they cached of the topic's queues
and resume from the new offsets (see shmq.broker.offset_reset). ``--timestamp`` takes epoch
milliseconds or an ISO 8601 time (without a zone: local time, as `date` prints it).
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from shmq.cli.admin.output import Result, add_common, admin_of, cluster_of, table
from shmq.cli.subcommands import Subcommands


def parse_timestamp(text: str) -> int:
    """Epoch ms from ``text``: digits are ms already; else ISO 8601 ("2026-11-24T05:00:00",
    "2026-11-24 05:00:00+00:00"); ValueError with what was expected."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--timestamp must be epoch milliseconds or an ISO 8601 time, got {text!r:.60}") from None
    return int(when.timestamp() * 1000)


def reset_rows(offsets: dict[str, Any]) -> list[tuple[int, int]]:
    """(queue id, new offset) rows, by queue id."""
    return sorted((int(q), int(v)) for q, v in offsets.items())


def broker_rows(offsets: dict[str, dict[str, int]]) -> list[tuple[str, int, int]]:
    """(broker, queue id, new offset) rows of a cluster's reset, by broker and queue id."""
    return [(b, q, v) for b, per in sorted(offsets.items()) for q, v in reset_rows(per)]


def _reset(args: argparse.Namespace) -> Result:
    ts = parse_timestamp(args.timestamp) if args.timestamp is not None else None
    admin = admin_of(args)
    data: dict[str, Any] = {"group": args.group, "topic": args.topic}
    if cluster_of(admin) is None:
        offsets = admin.reset_offset(args.group, args.topic, timestamp=ts, offset=args.offset, to=args.to)
        data["offsets"] = {str(q): v for q, v in sorted(offsets.items())}
    else:  # broker -> queue -> offset
        by_queue = admin.reset_offsets(args.group, args.topic, timestamp=ts, offset=args.offset, to=args.to)
        per: dict[str, dict[str, int]] = {}
        for mq, v in sorted(by_queue.items(), key=lambda kv: (kv[0].broker_name, kv[0].queue_id)):
            per.setdefault(mq.broker_name, {})[str(mq.queue_id)] = v
        data["brokers"] = per
    if ts is not None:
        data["timestamp"] = ts

    def render(d: dict[str, Any]) -> Any:
        if "brokers" in d:
            cols = ("broker", "queue", "offset")
            return table(None, cols, broker_rows(d["brokers"]), right=("queue", "offset"))
        return table(None, ("queue", "offset"), reset_rows(d["offsets"]), right=("queue", "offset"))

    return Result(
        data, render, notes=[f"group {args.group}, topic {args.topic}: offsets reset; running members resume from them"]
    )


def register(sub: Subcommands) -> None:
    o = sub.add_parser(
        "offset", help="consumer group offsets: reset", description="Consumer group offsets on a running broker."
    )
    osub = o.add_subparsers(dest="sub_command", required=True, metavar="COMMAND")
    p = osub.add_parser(
        "reset",
        help="move a group's offsets of a topic; running members follow",
        description="Move GROUP's committed offsets of every queue of TOPIC. Running members "
        "drop what they cached and resume from the new offsets. CLUSTERING groups "
        "only (a BROADCASTING member keeps its offsets in its own file).",
    )
    p.add_argument("--group", required=True, help="consumer group")
    p.add_argument("--topic", required=True, help="topic")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--timestamp",
        metavar="TS",
        help="the first message stored at or after this time (epoch ms, or ISO 8601 such as 2026-11-24T05:00:00)",
    )
    where.add_argument("--offset", type=int, metavar="N", help="this queue offset in every queue (clamped to min..max)")
    where.add_argument("--to", choices=("first", "last"), help="each queue's first (min) or last (max) offset")
    add_common(p)
    p.set_defaults(run=_reset)
