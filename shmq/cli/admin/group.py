"""`shmq admin group list | progress GROUP` (mqadmin consumerProgress).

``*_data`` and ``*_rows`` are pure: what --json prints and the table rows made from it.
"""

from __future__ import annotations

import argparse
from typing import Any

from shmq.cli.admin.output import FitTable, Result, add_common, admin_of, cluster_of, table
from shmq.cli.subcommands import Subcommands
from shmq.client.admin_reports import ConsumerProgress, GroupInfo


def group_data(g: GroupInfo) -> dict[str, Any]:
    return {
        "group": g.group,
        "model": g.model,
        "version": g.version,
        "members": g.members,
        "subscriptions": g.subscriptions,
    }


def progress_data(p: ConsumerProgress, cluster: bool = False) -> dict[str, Any]:
    """Per queue: committed offset, the queue's min and max, lag (and its broker, over a
    cluster); and the totals."""
    return {
        "group": p.group,
        "online": p.online,
        "model": p.model,
        "lag": p.lag,
        "queues": [
            {
                **({"broker": q.broker_name} if cluster else {}),
                "topic": q.topic,
                "queue_id": q.queue_id,
                "committed": q.committed,
                "min_offset": q.min_offset,
                "max_offset": q.max_offset,
                "lag": q.lag,
            }
            for q in p.queues
        ],
    }


def group_rows(data: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [
            g["group"],
            g["model"],
            len(g["members"]),
            g["version"],
            ", ".join(f"{t} ({e})" for t, e in g["subscriptions"].items()),
        ]
        for g in data
    ]


def progress_rows(data: dict[str, Any]) -> list[list[Any]]:
    """One row per queue (committed -1 shows as "-": never committed; its broker first over a
    cluster), and a total row."""
    cluster = _cluster(data)
    rows: list[list[Any]] = [
        [
            *([q["broker"]] if cluster else []),
            q["topic"],
            q["queue_id"],
            q["max_offset"],
            q["committed"] if q["committed"] >= 0 else "-",
            q["lag"],
        ]
        for q in data["queues"]
    ]
    rows.append(
        [*([""] if cluster else []), "total", "", sum(q["max_offset"] for q in data["queues"]), "", data["lag"]]
    )
    return rows


def _cluster(data: dict[str, Any]) -> bool:
    return any("broker" in q for q in data["queues"])


def _render_groups(data: list[dict[str, Any]]) -> FitTable:
    return table(
        "consumer groups",
        ["group", "model", "members", "version", "subscriptions"],
        group_rows(data),
        right=["members", "version"],
        optional=["version", "members"],
    )


def _render_progress(data: dict[str, Any]) -> FitTable:
    state = "online" if data["online"] else "no consumer running"
    title = f"{data['group']} ({data['model'] or '-'}, {state})  lag {data['lag']}"
    return table(
        title,
        [*(["broker"] if _cluster(data) else []), "topic", "queue", "max offset", "committed", "lag"],
        progress_rows(data),
        right=["queue", "max offset", "committed", "lag"],
    )


def _list(args: argparse.Namespace) -> Result:
    return Result([group_data(g) for g in admin_of(args).groups().values()], _render_groups)


def _progress(args: argparse.Namespace) -> Result:
    admin = admin_of(args)
    p = admin.consumer_progress(args.group)
    result = Result(progress_data(p, cluster_of(admin) is not None), _render_progress)
    if not p.queues:
        result.notes.append(f"group {args.group!r} has no committed offset and no live member")
    return result


def register(sub: Subcommands) -> None:
    """Add `group` and its subcommands."""
    p = sub.add_parser("group", help="consumer groups and their progress (committed offsets, lag)")
    gsub = p.add_subparsers(dest="sub_command", required=True, metavar="SUBCOMMAND")
    ls = gsub.add_parser("list", help="groups the broker knows: model, members, subscriptions")
    add_common(ls)
    ls.set_defaults(run=_list)
    pr = gsub.add_parser("progress", help="per queue: max offset, committed offset, lag (consumerProgress)")
    pr.add_argument("group", metavar="GROUP")
    add_common(pr)
    pr.set_defaults(run=_progress)
