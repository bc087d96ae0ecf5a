"""One frame of `shmq top --namesrv`: a cluster's brokers (pure: no terminal, no broker).

A row per broker of the routes with its rates and sizes, a totals row, then each broker's
topics and consumer groups (the tables of the one-broker screen, titled with the broker's
name), cut to what the screen holds. A broker that left the routes is simply not there; one
still routed but unreadable for a moment shows as down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from shmq.monitor.rates import Rates, rates
from shmq.monitor.render import View, duration, footer, groups_table, rate_text, topics_table
from shmq.monitor.snapshot import Snapshot
from shmq.namesrv.routes import BrokerData

COLUMNS = ("Broker", "Id", "Role", "PID", "Up", "In msg/s", "Msgs in", "Topics", "Groups", "Clients", "Lag")


@dataclass(frozen=True)
class BrokerFrame:
    """What the frame shows of one broker: its route entry, its snapshots (oldest first; none
    while it cannot be read) and why it is down."""

    route: BrokerData
    snaps: Sequence[Snapshot]
    down: str | None = None


def _broker_table(brokers: Sequence[BrokerFrame], all_rates: list[Rates | None]) -> Table:
    t = Table(title="Brokers", title_justify="left", title_style="bold", header_style="bold", box=None, pad_edge=False)
    for i, c in enumerate(
        ["Broker", "Id", "Role", "PID", "Up", "In msg/s", "Msgs in", "Topics", "Groups", "Clients", "Lag"]
    ):
        t.add_column(c, justify="right" if i >= 5 or c in ("Id", "PID") else "left", no_wrap=True)
    total_rate = 0.0
    totals = [0, 0, 0, 0, 0]
    for b, r in zip(brokers, all_rates, strict=True):
        route = b.route
        if r is None or not b.snaps:
            t.add_row(route.broker_name, str(route.broker_id), route.role, str(route.pid), Text("down", style="red"))
            continue
        snap = b.snaps[-1]
        user_topics = sum(not x.system for x in snap.topics.values())
        lag = sum(g.lag for g in snap.groups.values())
        numbers = [snap.broker.msgs_in, user_topics, len(snap.groups), len(snap.clients), lag]
        totals = [a + n for a, n in zip(totals, numbers, strict=True)]
        total_rate += r.in_msgs
        t.add_row(
            route.broker_name,
            str(route.broker_id),
            route.role,
            str(route.pid),
            duration(snap.uptime_s),
            rate_text(r.in_msgs),
            *(f"{n:,}" for n in numbers),
        )
    t.add_row(
        Text("total", style="bold"), "", "", "", "", rate_text(total_rate), *(f"{n:,}" for n in totals), style="bold"
    )
    return t


def render_cluster(
    namesrv: str, server_up: bool, brokers: Sequence[BrokerFrame], width: int, height: int, view: View = View()
) -> RenderableType:
    """The frame for the brokers of name server ``namesrv`` (``server_up``: its process serves;
    if not, the routes are the last it published)."""
    head = Text()
    head.append(f"shmq top - name server {namesrv}", style="bold")
    head.append(f"  {len(brokers)} broker(s)  ")
    if server_up:
        head.append("name server up", style="green")
    else:
        head.append("name server down: routes as it last published them", style="bold red")
    all_rates = [rates(b.snaps) if b.snaps else None for b in brokers]
    parts: list[RenderableType] = [head, Text(""), _broker_table(brokers, all_rates)]
    # lines left for each broker's two tables: head 2, broker table (title, head, rows, total), footer 2
    room = max(0, height - 2 - (len(brokers) + 3) - 2)
    shown = [(b, r) for b, r in zip(brokers, all_rates, strict=True) if r is not None and b.snaps]
    each = room // max(1, len(shown))
    for b, r in shown:
        if each < 8:
            break
        snap = b.snaps[-1]
        limit = max(1, (each - 6) // 2)
        name = b.route.broker_name if b.route.is_master else f"{b.route.broker_name} (id {b.route.broker_id})"
        parts += [
            Text(""),
            topics_table(snap, r, view, 0, limit, title=f"{name}: topics"),
            Text(""),
            groups_table(snap, r, view, 0, limit, title=f"{name}: consumer groups"),
        ]
    parts += [Text(""), footer(view)]
    return Group(*parts)


def render_no_routes(namesrv: str, reason: str, down_s: float) -> RenderableType:
    """The screen while no routes were ever read from ``namesrv``: why, and for how long."""
    t = Text()
    t.append(f"shmq top - name server {namesrv}\n\n", style="bold")
    t.append("no routes - waiting for the name server", style="bold red")
    t.append(f" ({duration(down_s)})\n{reason}\n")
    t.append("\nq quit", style="dim")
    return t
