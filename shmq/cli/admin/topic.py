"""`shmq admin topic list | create | update | delete | status` (mqadmin topicList, updateTopic,
deleteTopic, topicStatus).

``data_*`` and ``*_rows`` are pure: what --json prints and the table rows made from it.
"""

from __future__ import annotations

import argparse
from typing import Any

from shmq.cli.admin import cluster
from shmq.cli.admin.output import FitTable, Result, add_common, admin_of, cluster_of, perm_text, table
from shmq.cli.subcommands import Subcommands
from shmq.client.admin import TopicInfo
from shmq.client.admin_state import TopicStatus

PERMS = (2, 4, 6)  # RocketMQ's perm values: write, read, read+write
SYSTEM_MARK = "system"


def topic_data(t: TopicStatus) -> dict[str, Any]:
    """A topic's status as JSON: its queues with min/max offsets and the totals (over a
    cluster: the brokers holding it, and each queue's broker)."""
    data = {
        "topic": t.topic,
        "system": t.system,
        "perm": t.perm,
        "read_queue_nums": t.read_queue_nums,
        "write_queue_nums": t.write_queue_nums,
        "messages": t.messages,
        "max_offset": t.max_offset,
        "msgs_in": t.msgs_in,
        "bytes_in": t.bytes_in,
        "queues": [
            {
                **({"broker": q.broker} if q.broker else {}),
                "queue_id": q.queue_id,
                "min_offset": q.min_offset,
                "max_offset": q.max_offset,
                "messages": q.messages,
            }
            for q in t.queues
        ],
    }
    if t.brokers:
        data["brokers"] = list(t.brokers)
    return data


def info_data(t: TopicInfo) -> dict[str, Any]:
    """A topic's config (what create/update return) as JSON (over a cluster: the brokers set)."""
    data: dict[str, Any] = {
        "topic": t.name,
        "system": t.system,
        "perm": t.perm,
        "read_queue_nums": t.read_queue_nums,
        "write_queue_nums": t.write_queue_nums,
        "order": t.order,
    }
    if t.brokers:
        data["brokers"] = list(t.brokers)
    return data


def list_rows(data: list[dict[str, Any]], system: bool = True) -> list[list[Any]]:
    """One row per topic (user topics first, system topics after and marked); over a cluster
    the brokers holding it come second."""
    ordered = sorted(data, key=lambda t: (t["system"], t["topic"]))
    return [
        [
            t["topic"],
            *([", ".join(t["brokers"])] if "brokers" in t else []),
            SYSTEM_MARK if t["system"] else "",
            t["read_queue_nums"],
            t["write_queue_nums"],
            perm_text(t["perm"]),
            t["messages"],
            t["max_offset"],
            t["msgs_in"],
        ]
        for t in ordered
        if system or not t["system"]
    ]


def queue_rows(data: dict[str, Any]) -> list[list[Any]]:
    """One row per queue of a topic (its broker first, over a cluster), and a total row."""
    cluster = "brokers" in data
    rows: list[list[Any]] = [
        [*([q["broker"]] if cluster else []), q["queue_id"], q["min_offset"], q["max_offset"], q["messages"]]
        for q in data["queues"]
    ]
    rows.append([*([""] if cluster else []), "total", "", data["max_offset"], data["messages"]])
    return rows


def _render_list(data: list[dict[str, Any]]) -> FitTable:
    cluster = ["brokers"] if any("brokers" in t for t in data) else []
    return table(
        "topics",
        ["topic", *cluster, "kind", "read q", "write q", "perm", "messages", "max offset", "in (since start)"],
        list_rows(data),
        right=["read q", "write q", "messages", "max offset", "in (since start)"],
        optional=["in (since start)", "max offset", "write q", "read q", "kind"],
    )


def status_line(data: dict[str, Any]) -> str:
    """The line above a topic's queue table."""
    kind = " (system topic)" if data["system"] else ""
    where = f" on {', '.join(data['brokers'])}" if "brokers" in data else ""
    return (
        f"topic {data['topic']}{kind}{where}: perm {perm_text(data['perm'])}, {data['read_queue_nums']} read / "
        f"{data['write_queue_nums']} write queues; stored since the broker started: {data['msgs_in']} messages, "
        f"{data['bytes_in']} bytes"
    )


def _render_status(data: dict[str, Any]) -> list[Any]:
    cluster = ["broker"] if "brokers" in data else []
    return [
        status_line(data),
        table(
            None,
            [*cluster, "queue", "min offset", "max offset", "messages"],
            queue_rows(data),
            right=["queue", "min offset", "max offset", "messages"],
        ),
    ]


def _render_info(data: dict[str, Any]) -> str:
    where = f" on {', '.join(data['brokers'])}" if "brokers" in data else ""
    return (
        f"topic {data['topic']}: {data['read_queue_nums']} read / {data['write_queue_nums']} write queues, "
        f"perm {perm_text(data['perm'])}{', ordered' if data.get('order') else ''}{where}"
    )


def _list(args: argparse.Namespace) -> Result:
    data = [topic_data(t) for t in admin_of(args).topics_status().values()]
    if not args.system:
        data = [t for t in data if not t["system"]]
    return Result(data, _render_list)


def _status(args: argparse.Namespace) -> Result:
    return Result(topic_data(admin_of(args).topic_status(args.topic)), _render_status)


def _on_brokers(args: argparse.Namespace) -> dict[str, Any]:
    """``brokers=`` for a cluster admin when --broker was given; --broker without --namesrv is an error."""
    if not args.broker:
        return {}
    if cluster_of(admin_of(args)) is None:
        raise ValueError("--broker picks brokers of a name server's cluster: give --namesrv NS too")
    return {"brokers": args.broker}


def _create(args: argparse.Namespace) -> Result:
    t = admin_of(args).create_topic(
        args.topic, queues=args.queues, perm=args.perm, order=args.order, **_on_brokers(args)
    )
    return Result(info_data(t), _render_info)


def _update(args: argparse.Namespace) -> Result:
    if args.queues is None and args.read_queues is None and args.write_queues is None and args.perm is None:
        raise ValueError("nothing to change: give --queues, --read-queues, --write-queues or --perm")
    admin = admin_of(args)
    if args.topic not in admin.topics():  # over a cluster: on no broker
        raise ValueError(f"no topic {args.topic!r} (create it with `shmq admin topic create`)")
    t = admin.update_topic(
        args.topic,
        args.queues,
        read_queue_nums=args.read_queues,
        write_queue_nums=args.write_queues,
        perm=args.perm,
        **_on_brokers(args),
    )
    return Result(info_data(t), _render_info)


def _delete(args: argparse.Namespace) -> Result:
    deleted = admin_of(args).delete_topic(args.topic, **_on_brokers(args))
    if not deleted:
        raise ValueError(f"no topic {args.topic!r}")
    return Result(
        {"topic": args.topic, "deleted": True},
        lambda d: f"topic {d['topic']} deleted (its stored messages stay until cleanup)",
    )


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def register(sub: Subcommands) -> None:
    """Add `topic` and its subcommands."""
    p = sub.add_parser("topic", help="list, create, update, delete topics and show a topic's queues")
    tsub = p.add_subparsers(dest="sub_command", required=True, metavar="SUBCOMMAND")
    ls = tsub.add_parser("list", help="every topic: queues, perm, messages stored, max offset (system topics marked)")
    ls.add_argument("--no-system", dest="system", action="store_false", help="leave system topics out")
    add_common(ls)
    ls.set_defaults(run=_list)
    c = tsub.add_parser("create", help="create a topic (or set its queues and perm, if it exists)")
    c.add_argument("topic", metavar="TOPIC")
    c.add_argument("--queues", type=_positive, default=4, help="read and write queues (default 4)")
    c.add_argument("--perm", type=int, choices=PERMS, default=6, help="2 write, 4 read, 6 both (default 6)")
    c.add_argument(
        "--order", action="store_true", help="an ordered topic: every POP group takes each queue one delivery at a time"
    )
    _add_broker_choice(c)
    add_common(c)
    c.set_defaults(run=_create)
    u = tsub.add_parser("update", help="change an existing topic's queue counts or perm")
    u.add_argument("topic", metavar="TOPIC")
    u.add_argument("--queues", type=_positive, help="read and write queues")
    u.add_argument("--read-queues", type=_positive, help="read queues (readQueueNums)")
    u.add_argument("--write-queues", type=_positive, help="write queues (writeQueueNums)")
    u.add_argument("--perm", type=int, choices=PERMS, help="2 write, 4 read, 6 both")
    _add_broker_choice(u)
    add_common(u)
    u.set_defaults(run=_update)
    d = tsub.add_parser("delete", help="forget a topic's config (its stored messages stay until cleanup)")
    d.add_argument("topic", metavar="TOPIC")
    _add_broker_choice(d)
    add_common(d)
    d.set_defaults(run=_delete)
    s = tsub.add_parser("status", help="a topic's queues with their min and max offsets")
    s.add_argument("topic", metavar="TOPIC")
    add_common(s)
    s.set_defaults(run=_status)
    r = tsub.add_parser("route", help="the brokers of a name server holding a topic, with their queues (--namesrv)")
    r.add_argument("--topic", required=True, help="topic")
    add_common(r)
    r.set_defaults(run=cluster.route)


def _add_broker_choice(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--broker",
        action="append",
        metavar="NAME",
        help="with --namesrv: only this master broker (repeatable; default: every master)",
    )
