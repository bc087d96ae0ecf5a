"""`shmq admin dlq list | resend GROUP`: dead-letter topics with their sizes, and putting letters back.

``dlq_rows`` is pure.
"""

from __future__ import annotations

import argparse
from typing import Any

from shmq.cli.admin.output import FitTable, Result, add_common, admin_of, cluster_of, table
from shmq.cli.subcommands import Subcommands


def dlq_rows(data: list[dict[str, Any]]) -> list[list[Any]]:
    """One row per DLQ topic (per broker over a cluster: its name first)."""
    return [
        [*([d["broker"]] if "broker" in d else []), d["group"], d["topic"], d["queues"], d["messages"]] for d in data
    ]


def _render_list(data: list[dict[str, Any]]) -> FitTable | str:
    if not data:
        return "no dead-letter topics"
    return table(
        "dead-letter topics",
        [*(["broker"] if "broker" in data[0] else []), "group", "topic", "queues", "messages"],
        dlq_rows(data),
        right=["queues", "messages"],
        optional=["queues", "group"],
    )  # the topic names the group


def _list(args: argparse.Namespace) -> Result:
    admin = admin_of(args)
    cluster = cluster_of(admin) is not None
    return Result(
        [
            {
                **({"broker": d.broker} if cluster else {}),
                "group": d.group,
                "topic": d.topic,
                "queues": d.queues,
                "messages": d.messages,
            }
            for d in admin.dlq()
        ],
        _render_list,
    )


def _resend(args: argparse.Namespace) -> Result:
    r = admin_of(args).resend_dlq(args.group, args.msg_id, args.max)
    data = {"group": args.group, "resent": r.resent, "skipped": r.skipped, "remaining": r.remaining}
    return Result(
        data,
        lambda d: (
            f"resent {len(d['resent'])} dead letters of {d['group']}; skipped "
            f"{len(d['skipped'])}; {d['remaining']} not resent yet"
        ),
    )


def register(sub: Subcommands) -> None:
    """Add `dlq` and its subcommands."""
    p = sub.add_parser("dlq", help="dead-letter topics (%%DLQ%%<group>): sizes, resend")
    dsub = p.add_subparsers(dest="sub_command", required=True, metavar="SUBCOMMAND")
    ls = dsub.add_parser("list", help="every %%DLQ%% topic and how many messages it holds")
    add_common(ls)
    ls.set_defaults(run=_list)
    rs = dsub.add_parser("resend", help="put a group's dead letters back on their topics (each at most once)")
    rs.add_argument("group", metavar="GROUP")
    rs.add_argument("--msg-id", action="append", metavar="ID", help="only this message (repeatable)")
    rs.add_argument("--max", type=int, metavar="N", help="at most N messages")
    add_common(rs)
    rs.set_defaults(run=_resend)
