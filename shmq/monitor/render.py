"""Render: one frame of ``shmq top`` from snapshots (pure: no terminal, no broker).

``render`` turns a history of snapshots (``shmq.monitor.rates.History``) and the viewer's
choices (``View``: sort, topic filter, system topics shown) into a rich renderable sized for
a screen of ``width`` x ``height``; ``render_down`` is the screen while the broker is away.
Tests print both on a recording ``Console`` and compare the text with golden files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from shmq.client.admin_state import TopicStatus
from shmq.monitor.rates import GroupRate, Rates, TopicRate, rates
from shmq.monitor.snapshot import Snapshot

SORTS = ("name", "in", "out", "backlog", "lag")
"""Sort keys ``s`` cycles through: topics by name, in rate, out rate or backlog; ``lag`` sorts
the groups by lag (and topics by backlog); the other keys sort groups by name."""
GROWING_ALERT = 5
"""Intervals in a row a group's lag must grow before it is an alert (one burst is not)."""
REPLICA_BEHIND_ALERT = 64 * 1024 * 1024
"""Bytes a replica may be behind before it is an alert."""
SPARKS = "▁▂▃▄▅▆▇█"
ARROWS = {1: ("↑", "red"), 0: ("→", "dim"), -1: ("↓", "green")}
MB = 1024 * 1024


@dataclass(frozen=True)
class View:
    """What the viewer chose: the sort key, a topic filter (substring) and system topics shown."""

    sort: str = "name"
    filter: str = ""
    show_system: bool = False
    editing: bool = False  # typing a filter after ``/``: the footer shows the text being typed

    def next_sort(self) -> View:
        return View(SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)], self.filter, self.show_system, self.editing)


def sparkline(values: Sequence[float], width: int) -> str:
    """The last ``width`` values as unicode bars scaled to their maximum (blank before data)."""
    values = list(values)[-width:]
    top = max(values, default=0.0)
    bars = "".join(
        SPARKS[min(len(SPARKS) - 1, int(v / top * (len(SPARKS) - 1) + 0.5))] if top > 0 else SPARKS[0] for v in values
    )
    return bars.rjust(width)


def human_bytes(n: float) -> str:
    if abs(n) < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):  # noqa: B007 - the unit it stops at is the one printed
        n /= 1024
        if abs(n) < 1024:
            break
    return f"{n:.1f} {unit}"


def duration(seconds: float) -> str:
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{d}d {h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def rate_text(v: float) -> str:
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def _header(snap: Snapshot, r: Rates) -> Text:
    b, p = snap.broker, snap.process
    cpu = f"{p.cpu_percent:.0f}%" if p.cpu_percent is not None else "?"
    rss = human_bytes(p.rss) if p.rss is not None else "?"
    disk = f"{b.disk_used_ratio:.0%}" if b.disk_used_ratio >= 0 else "?"
    t = Text()
    t.append(f"shmq top - {snap.name}", style="bold")
    t.append(
        f"  {b.role}  v{b.version or '?'}  pid {b.pid}  up {duration(snap.uptime_s)}"
        f"  CPU {cpu}  RSS {rss}  disk {disk}\n"
    )
    t.append(
        f"in {rate_text(r.in_msgs)} msg/s {r.in_bytes / MB:.2f} MB/s   flush lag {human_bytes(b.flush_lag)}   "
        f"replica lag {_replica(snap)}   busy rejections {b.busy_rejections} ({rate_text(r.busy_rejections)}/s)\n"
    )
    t.append(
        f"delay backlog {b.delay_backlog}   timer backlog {b.timer_backlog}   half (transactions) "
        f"{b.half_backlog}   DLQ messages {b.dlq_messages}   store {b.store_dir}"
    )
    return t


def _replica(snap: Snapshot) -> str:
    b = snap.broker
    lag = b.replica_lag
    text = "-" if lag is None else human_bytes(lag)
    if b.role == "SLAVE":
        return text
    return f"{text} ({b.replicas_in_sync}/{b.replicas} in sync)" if b.replicas else f"{text} (no replica)"


def alerts(snap: Snapshot, r: Rates) -> list[tuple[str, str]]:
    """(style, text) of each thing an operator should look at now, worst first."""
    b = snap.broker
    out: list[tuple[str, str]] = []
    if b.disk_used_ratio >= 0 and b.disk_used_ratio >= b.disk_warning_ratio > 0:
        out.append(
            (
                "bold red",
                f"disk {b.disk_used_ratio:.0%} used: over the warning level "
                f"{b.disk_warning_ratio:.0%}: writes are refused",
            )
        )
    elif b.disk_used_ratio >= 0 and b.disk_used_ratio >= b.disk_clean_ratio > 0:
        out.append(
            (
                "yellow",
                f"disk {b.disk_used_ratio:.0%} used: over {b.disk_clean_ratio:.0%}, "
                "old commitlog files are deleted before their time",
            )
        )
    if b.role != "SLAVE" and b.replicas and not b.replicas_in_sync:
        out.append(("bold red", f"{b.replicas} replica(s) connected, none in sync"))
    elif b.role == "SYNC_MASTER" and not b.replicas:
        out.append(("red", "SYNC_MASTER without a replica: sends wait for one"))
    lag = b.replica_lag
    if lag is not None and lag > REPLICA_BEHIND_ALERT:
        out.append(("red", f"replica {human_bytes(lag)} behind"))
    for name, g in sorted(r.groups.items()):
        if g.growing_for >= GROWING_ALERT:
            out.append(
                ("yellow", f"group {name}: lag grew {g.growing_for} intervals in a row (now {snap.groups[name].lag})")
            )
    if r.busy_rejections:
        out.append(("yellow", f"broker busy: {rate_text(r.busy_rejections)} rejections/s"))
    return out


def _backlog(snap: Snapshot, topic: str) -> int:
    """Messages of ``topic`` its slowest group has still to consume (0: no group reads it)."""
    lags = [
        sum(v for (t, _), v in g.lag_by_queue.items() if t == topic)
        for g in snap.groups.values()
        if any(t == topic for t, _ in g.committed)
    ]
    return max(lags, default=0)


def _topic_rows(snap: Snapshot, r: Rates, view: View) -> list[tuple[TopicStatus, TopicRate, int]]:
    rows = [
        (t, r.topics[n], _backlog(snap, n))
        for n, t in snap.topics.items()
        if (view.show_system or not t.system or t.dlq) and view.filter.lower() in n.lower()
    ]
    keys = {
        "in": lambda x: -x[1].in_msgs,
        "out": lambda x: -x[1].out_msgs,
        "backlog": lambda x: -x[2],
        "lag": lambda x: -x[2],
    }
    rows.sort(key=lambda x: x[0].topic)
    if view.sort in keys:
        rows.sort(key=keys[view.sort])
    return rows


def _table(title: str, columns: Sequence[str], right: int) -> Table:
    """A compact table: the columns from index ``right`` on are numbers (right-aligned)."""
    t = Table(
        title=title,
        title_justify="left",
        title_style="bold",
        header_style="bold",
        box=None,
        pad_edge=False,
        expand=False,
    )
    for i, c in enumerate(columns):
        t.add_column(c, justify="right" if i >= right else "left", no_wrap=True)
    return t


def topics_table(snap: Snapshot, r: Rates, view: View, spark: int, limit: int, title: str = "Topics") -> Table:
    """Topic rows; the sparkline columns only when the screen has room for them (``spark`` > 0)."""
    rows = _topic_rows(snap, r, view)
    t = _table(
        f"{title} ({len(rows)})",
        ["Topic", "Queues", "In msg/s", "In MB/s"]
        + ["In"] * bool(spark)
        + ["Out msg/s", "Out MB/s"]
        + ["Out"] * bool(spark)
        + ["Max offset", "Stored", "Backlog"],
        1,
    )
    for row, rate, backlog in rows[:limit]:
        ins: list[RenderableType] = [Text(sparkline(rate.in_series, spark), style="cyan")] if spark else []
        outs: list[RenderableType] = [Text(sparkline(rate.out_series, spark), style="green")] if spark else []
        t.add_row(
            row.topic,
            str(len(row.queues)),
            rate_text(rate.in_msgs),
            f"{rate.in_bytes / MB:.2f}",
            *ins,
            rate_text(rate.out_msgs),
            f"{rate.out_bytes / MB:.2f}",
            *outs,
            f"{row.max_offset:,}",
            f"{row.messages:,}",
            f"{backlog:,}",
            style="dim" if row.system else None,
        )
    if len(rows) > limit:
        t.add_row(f"... {len(rows) - limit} more", style="dim")
    return t


def groups_table(snap: Snapshot, r: Rates, view: View, spark: int, limit: int, title: str = "Consumer groups") -> Table:
    """Group rows (by name, or by lag with the ``lag`` sort); the lag sparkline when ``spark`` > 0."""
    names = sorted(snap.groups)
    if view.sort == "lag":
        names.sort(key=lambda n: -snap.groups[n].lag)
    t = _table(
        f"{title} ({len(names)})",
        ["Group", "Model", "Topics", "Members", "Lag", "Consume msg/s", "Trend"] + ["Lag history"] * bool(spark),
        3,
    )
    for n in names[:limit]:
        g, rate = snap.groups[n], r.groups.get(n, GroupRate(0.0, 0, 0, ()))
        arrow, colour = ARROWS[rate.trend]
        lag_style = "yellow" if rate.growing_for >= GROWING_ALERT else None
        t.add_row(
            n,
            "broadcast" if g.broadcasting else "cluster",
            ",".join(g.topics()) or "-",
            str(g.members),
            Text(f"{g.lag:,}", style=lag_style or ""),
            rate_text(rate.consume),
            Text(arrow, style=colour),
            *([Text(sparkline(rate.lag_series, spark), style="magenta")] if spark else []),
        )
    if len(names) > limit:
        t.add_row(f"... {len(names) - limit} more", style="dim")
    return t


def _clients(snap: Snapshot, limit: int) -> Table:
    t = _table(
        f"Clients ({len(snap.clients)})", ["PID", "Kind", "Group", "Attached", "Request ring", "Response ring"], 3
    )
    clients = sorted(snap.clients, key=lambda c: (c.pid, c.client_id))
    for c in clients[:limit]:
        attached = duration(max(0.0, (snap.taken_ms - c.attached_ms) / 1000))
        t.add_row(
            str(c.pid), c.role, c.group or "-", attached, human_bytes(c.request_fill), human_bytes(c.response_fill)
        )
    if len(clients) > limit:
        t.add_row(f"... {len(clients) - limit} more", style="dim")
    return t


def footer(view: View) -> Text:
    if view.editing:
        return Text(f"filter topics: {view.filter}_   (Enter applies, Esc clears)", style="reverse")
    shown = f"   filter: {view.filter!r}" if view.filter else ""
    system = "shown" if view.show_system else "hidden"
    return Text(f"q quit   s sort ({view.sort})   / filter topics{shown}   a system topics ({system})", style="dim")


def render(snaps: Sequence[Snapshot], width: int, height: int, view: View = View()) -> RenderableType:
    """One frame from the latest snapshot of ``snaps`` (oldest first) and the rates over them."""
    snap = snaps[-1]
    r = rates(snaps)
    spark = min(30, (width - 110) // 2)  # what two sparklines leave of the topic table's width
    spark = spark if spark >= 6 else 0
    warn = alerts(snap, r)
    # lines left for table rows: header 3, alerts, 3 tables x (blank + title + head), blank + footer
    room = max(3, height - 3 - len(warn) - 9 - 3)
    n_groups, n_clients = len(snap.groups), len(snap.clients)
    clients = min(n_clients, max(1, room // 4))
    groups = min(n_groups, max(1, (room - clients) // 3))
    topics = max(1, room - clients - groups - (n_clients > clients) - (n_groups > groups) - 1)
    parts: list[RenderableType] = [_header(snap, r)]
    parts += [Text(f"! {text}", style=style) for style, text in warn]
    parts += [
        Text(""),
        topics_table(snap, r, view, spark, topics),
        Text(""),
        groups_table(snap, r, view, spark, groups),
        Text(""),
        _clients(snap, clients),
        Text(""),
        footer(view),
    ]
    return Group(*parts)


def render_down(name: str, reason: str, down_s: float, last: Snapshot | None) -> RenderableType:
    """The screen while broker ``name`` is not there: why, for how long, and what it last was."""
    t = Text()
    t.append(f"shmq top - {name}\n\n", style="bold")
    t.append("broker down - waiting for it", style="bold red")
    t.append(f" ({duration(down_s)})\n{reason}\n")
    if last is not None:
        b = last.broker
        t.append(
            f"\nlast seen: {b.role} pid {b.pid}, {len(last.topics)} topics, {len(last.groups)} groups, "
            f"store {b.store_dir}\n",
            style="dim",
        )
    t.append("\nq quit", style="dim")
    return t
