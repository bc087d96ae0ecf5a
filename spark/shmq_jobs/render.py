"""scan.py's output from collected rows: rich tables for people, JSON for programs. Pure."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from shmq_jobs.lag import GroupLag
from shmq_jobs.summary import TopicSummary


def utc_iso(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO 8601 UTC with milliseconds (`Z`)."""
    if ms is None:
        return None
    when = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def report(store: str, topics: list[TopicSummary], lags: list[GroupLag], problems: list[str]) -> dict[str, Any]:
    """The JSON document of `scan.py --json` (times as ISO 8601 UTC)."""
    out_topics = []
    for t in topics:
        d = asdict(t)
        d["first_store_time"], d["last_store_time"] = utc_iso(d.pop("first_store_ms")), utc_iso(d.pop("last_store_ms"))
        d["top_tags"] = [{"tag": n, "count": c} for n, c in t.top_tags]
        d["top_keys"] = [{"key": n, "count": c} for n, c in t.top_keys]
        out_topics.append(d)
    return {"store": store, "topics": out_topics, "consumer_lag": [asdict(g) for g in lags], "problems": problems}


def to_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=False)


def _ranked(items: list[tuple[str, int]]) -> str:
    return "\n".join(f"{name} ({count:,})" for name, count in items) or "-"


def _size(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:,.1f} {unit}"
    return f"{n:,} B"


def _span(first_ms: int, last_ms: int) -> str:
    """Two lines, first and last, to the millisecond: narrow enough for an 80-column terminal."""
    return "\n".join(
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] for ms in (first_ms, last_ms)
    )


def tables(store: str, topics: list[TopicSummary], lags: list[GroupLag]) -> list[Table]:
    """Three tables: per-topic figures, top tags and keys, consumer lag per group."""
    t = Table(title=f"topics of {store}")
    for col in ("topic", "messages", "queues", "stored", "bodies"):
        t.add_column(col, justify="left" if col == "topic" else "right")
    t.add_column("stored first - last (UTC)", no_wrap=True)
    for s in topics:
        t.add_row(
            s.topic,
            f"{s.messages:,}",
            str(s.queues),
            _size(s.stored_bytes),
            _size(s.body_bytes),
            _span(s.first_store_ms, s.last_store_ms),
        )
    if len(topics) > 1:
        t.add_row(
            "[bold]all",
            f"[bold]{sum(s.messages for s in topics):,}",
            str(sum(s.queues for s in topics)),
            _size(sum(s.stored_bytes for s in topics)),
            _size(sum(s.body_bytes for s in topics)),
            _span(min(s.first_store_ms for s in topics), max(s.last_store_ms for s in topics)),
        )
    k = Table(title="top tags and keys")
    for col in ("topic", "tags (messages)", "keys (messages)"):
        k.add_column(col)
    for s in topics:
        k.add_row(s.topic, _ranked(s.top_tags), _ranked(s.top_keys))
    g = Table(title="consumer lag (config/consumerOffset.json, as of the broker's last persist)")
    for col in ("group", "topic", "queues", "behind", "broker offset", "consumer offset", "lag"):
        g.add_column(col, justify="left" if col in ("group", "topic") else "right")
    for lag in lags:
        g.add_row(
            lag.group,
            lag.topic,
            str(lag.queues),
            str(lag.behind),
            f"{lag.broker_offset:,}",
            f"{lag.consumer_offset:,}",
            f"{lag.lag:,}",
        )
    return [t, k, g]


def print_report(
    console: Console, store: str, topics: list[TopicSummary], lags: list[GroupLag], problems: list[str]
) -> None:
    for table in tables(store, topics, lags):
        console.print(table)
    if not topics:
        console.print("no messages in the topics scanned")
    if not lags:
        console.print("no consumer group has committed an offset on these topics")
    for p in problems:
        console.print(f"[bold yellow]warning[/]: {p}")
