"""`shmq admin cluster list` and `shmq admin topic route` (mqadmin clusterList, topicRoute):
what a name server routes to, read from its route segment, with each broker's live numbers.

``cluster_rows``, ``route_data`` and ``route_rows`` are pure.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from rich.console import RenderableType

from shmq.cli.admin.output import FitTable, Result, add_common, admin_of, cluster_of, command_name, perm_text, table
from shmq.cli.subcommands import Subcommands
from shmq.client.cluster_admin import ClusterAdmin
from shmq.errors import ConfigError
from shmq.namesrv.routes import TopicRoute


def cluster_admin(args: argparse.Namespace) -> ClusterAdmin:
    """The cluster admin of --namesrv / $SHMQ_NAMESRV; one broker alone has no routes."""
    admin = cluster_of(admin_of(args))
    if admin is None:
        raise ConfigError(f"`shmq {command_name(args)}` reads a name server's routes: give --namesrv NS")
    return admin


def cluster_rows(data: list[dict[str, Any]]) -> list[list[Any]]:
    """One row per broker; numbers its state could not give show as "-"."""
    return [
        [
            b["cluster"],
            b["broker_name"],
            b["broker_id"],
            b["role"],
            b["pid"],
            b["topics"],
            "-" if b["msgs_in"] is None else b["msgs_in"],
            "-" if b["connections"] is None else b["connections"],
            b["store_dir"],
        ]
        for b in data
    ]


def render_list(data: list[dict[str, Any]]) -> FitTable | str:
    """`cluster list` for people: at 80 columns the store, cluster, clients, topics and pid
    columns go first, never the broker's name."""
    if not data:
        return "no broker is registered"
    return table(
        "brokers",
        ["cluster", "broker", "id", "role", "pid", "topics", "msgs in", "clients", "store"],
        cluster_rows(data),
        right=["id", "pid", "topics", "msgs in", "clients"],
        optional=["store", "cluster", "clients", "topics", "pid"],
    )


def _list(args: argparse.Namespace) -> Result:
    admin = cluster_admin(args)
    return Result([dataclasses.asdict(b) for b in admin.cluster_list()], render_list)


def route_data(route: TopicRoute) -> dict[str, Any]:
    """A topic's route as JSON: each broker holding it with its queue counts and perm."""
    brokers = []
    for b in route.brokers:
        t = b.topic(route.topic)
        assert t is not None  # a route holds only brokers with the topic
        brokers.append(
            {
                "broker_name": b.broker_name,
                "broker_id": b.broker_id,
                "role": b.role,
                "attach_name": b.attach_name,
                "read_queue_nums": t.read_queues,
                "write_queue_nums": t.write_queues,
                "perm": t.perm,
            }
        )
    return {
        "topic": route.topic,
        "brokers": brokers,
        "write_queues": len(route.write_queues()),
        "read_queues": len(route.read_queues()),
    }


def route_rows(data: dict[str, Any]) -> list[list[Any]]:
    return [
        [b["broker_name"], b["broker_id"], b["role"], b["read_queue_nums"], b["write_queue_nums"], perm_text(b["perm"])]
        for b in data["brokers"]
    ]


def _render_route(data: dict[str, Any]) -> list[RenderableType]:
    return [
        f"topic {data['topic']}: {data['write_queues']} write queues, {data['read_queues']} read queues in all",
        table(
            None,
            ["broker", "id", "role", "read q", "write q", "perm"],
            route_rows(data),
            right=["id", "read q", "write q"],
        ),
    ]


def route(args: argparse.Namespace) -> Result:
    """`shmq admin topic route`: registered in the topic family, where mqadmin has it."""
    r = cluster_admin(args).topic_route(args.topic)
    if not r.exists:
        raise ValueError(f"no broker of name server {args.namesrv or 'of $SHMQ_NAMESRV'} has topic {args.topic!r}")
    return Result(route_data(r), _render_route)


def register(sub: Subcommands) -> None:
    """Add `cluster list`."""
    p = sub.add_parser("cluster", help="the brokers a name server routes to (--namesrv)")
    csub = p.add_subparsers(dest="sub_command", required=True, metavar="SUBCOMMAND")
    ls = csub.add_parser("list", help="every registered broker: cluster, id, role, pid, topics, msgs in, clients")
    add_common(ls)
    ls.set_defaults(run=_list)
