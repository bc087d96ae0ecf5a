"""`shmq admin clients`: the attached clients (mqadmin consumerConnection / producerConnection, for all).

``client_data`` and ``client_rows`` are pure.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from shmq.cli.admin.output import FitTable, Result, add_common, admin_of, cluster_of, table
from shmq.cli.subcommands import Subcommands
from shmq.client.admin_state import ClientInfo


def client_data(c: ClientInfo, cluster: bool = False) -> dict[str, Any]:
    """A client as JSON (with its broker over a cluster)."""
    return {
        **({"broker": c.broker} if cluster else {}),
        "client_id": c.client_id,
        "pid": c.pid,
        "role": c.role,
        "group": c.group,
        "attached_ms": c.attached_ms,
        "request_fill": c.request_fill,
        "response_fill": c.response_fill,
    }


def local_time(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def client_rows(data: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [
            *([c["broker"]] if "broker" in c else []),
            c["client_id"],
            c["pid"],
            c["role"],
            c["group"] or "",
            local_time(c["attached_ms"]),
            c["request_fill"],
            c["response_fill"],
        ]
        for c in data
    ]


def _render(data: list[dict[str, Any]]) -> FitTable:
    return table(
        f"{len(data)} clients attached",
        [
            *(["broker"] if data and "broker" in data[0] else []),
            "client id",
            "pid",
            "role",
            "group",
            "attached",
            "request ring bytes",
            "response ring bytes",
        ],
        client_rows(data),
        right=["client id", "pid", "request ring bytes", "response ring bytes"],
        optional=["response ring bytes", "request ring bytes", "attached"],
    )


def _clients(args: argparse.Namespace) -> Result:
    admin = admin_of(args)
    return Result([client_data(c, cluster_of(admin) is not None) for c in admin.clients()], _render)


def register(sub: Subcommands) -> None:
    """Add `clients`."""
    p = sub.add_parser("clients", help="attached producers and consumers: pid, group, ring fill")
    add_common(p)
    p.set_defaults(run=_clients)
