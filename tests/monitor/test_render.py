"""Frames of `shmq top` from hand-made snapshots, compared with golden text files.

Regenerate the files after a deliberate change of the screen with
``SHMQ_UPDATE_GOLDEN=1 pytest tests/monitor/test_render.py`` and review the diff.
"""

from __future__ import annotations

import io
import os
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console, RenderableType

from shmq.client.admin_state import ClientInfo
from shmq.monitor.rates import rates
from shmq.monitor.render import View, alerts, human_bytes, render, render_down, sparkline
from shmq.monitor.snapshot import Snapshot
from tests.monitor.snapshots import STARTED_MS, group, orders_run, snapshot, topic

GOLDEN = Path(__file__).parent / "golden"


def text_of(frame: RenderableType, width: int = 160) -> str:
    console = Console(file=io.StringIO(), record=True, width=width, color_system=None, legacy_windows=False)
    console.print(frame)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("SHMQ_UPDATE_GOLDEN") or not path.exists():
        path.write_text(text)
        if not os.environ.get("SHMQ_UPDATE_GOLDEN"):
            pytest.fail(f"{path} was missing: written, review it and run again")
    assert text == path.read_text(), f"frame differs from {path} (SHMQ_UPDATE_GOLDEN=1 regenerates it)"


def busy_broker(seconds: int = 10) -> list[Snapshot]:
    """Orders and Payments receiving, two groups (one falling behind), system topics, clients."""
    snaps = []
    clients = (
        ClientInfo(1, 3001, "producer", None, STARTED_MS + 1000, 4096, 0),
        ClientInfo(2, 3002, "consumer", "cg", STARTED_MS + 2000, 128, 65536),
        ClientInfo(3, 3003, "consumer", "audit", STARTED_MS + 2000, 0, 0),
    )
    for s in range(seconds + 1):
        orders = topic("Orders", [s * 50, s * 50], size=512)
        payments = topic("Payments", [s * 5 * (s % 3)] * 4, size=2048)
        dlq = topic("%DLQ%cg", [3])
        retry = topic("%RETRY%cg", [s])
        schedule = topic("SCHEDULE_TOPIC_XXXX", [2, 0, 1])
        cg = group("cg", {"Orders": orders}, {("Orders", 0): s * 50, ("Orders", 1): s * 45}, members=2)
        audit = group(
            "audit",
            {"Orders": orders, "Payments": payments},
            {("Orders", 0): s * 10, ("Orders", 1): s * 10, ("Payments", 0): 0},
        )
        snaps.append(
            snapshot(
                s,
                [orders, payments, dlq, retry, schedule],
                [cg, audit],
                clients,
                max_phy_offset=s * 80_000,
                flush_offset=s * 80_000 - 4096,
                delay_backlog=3,
                dlq_messages=3,
                busy_rejections=0,
            )
        )
    return snaps


def test_sparkline_scales_to_the_maximum() -> None:
    assert sparkline([0, 1, 2, 4], 4) == "▁▃▅█"
    assert sparkline([0, 0], 4) == "  ▁▁"
    assert sparkline([8, 0, 4, 8], 3) == "▁▅█"  # the last values only


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (1023, 1024, 80 << 20, 5000 << 30)] == [
        "1023 B",
        "1.0 KiB",
        "80.0 MiB",
        "5000.0 GiB",
    ]


def test_busy_broker_frame() -> None:
    check_golden("busy", text_of(render(busy_broker(), 160, 50)))


def test_sorted_by_in_rate_with_system_topics_and_a_filter() -> None:
    frame = render(busy_broker(), 160, 50, View(sort="in", show_system=True))
    text = text_of(frame)
    assert text.index("Payments ") < text.index("Orders ")  # 200 msg/s before 100
    check_golden("sorted_system", text)
    filtered = text_of(render(busy_broker(), 160, 50, View(filter="pay")))
    assert "Payments" in filtered and "Orders   " not in filtered.split("Consumer groups")[0]


def test_system_topics_hidden_by_default_but_dlq_shown() -> None:
    text = text_of(render(busy_broker(), 160, 50)).split("Consumer groups")[0]
    assert "%DLQ%cg" in text and "%RETRY%cg" not in text and "SCHEDULE_TOPIC_XXXX" not in text


def test_alerts_frame() -> None:
    snaps = orders_run(8)  # lag grows every second
    last = snaps[-1]
    snaps[-1] = replace(
        last,
        broker=replace(
            last.broker,
            role="SYNC_MASTER",
            disk_used_ratio=0.93,
            replicas=2,
            replicas_in_sync=0,
            replica_offset=0,
            max_phy_offset=200 * 1024 * 1024,
        ),
    )
    warn = [text for _, text in alerts(snaps[-1], rates(snaps))]
    assert any("warning level" in w for w in warn) and any("none in sync" in w for w in warn)
    assert any("group cg" in w for w in warn) and any("behind" in w for w in warn)
    check_golden("alerts", text_of(render(snaps, 160, 50)))


def test_small_screen_truncates_the_tables() -> None:
    snaps = [snapshot(0, [topic(f"T{i:02d}", [i]) for i in range(40)])]
    text = text_of(render(snaps, 120, 24), width=120)
    assert "more" in text and len(text.splitlines()) <= 24
    check_golden("small", text)


def test_filter_being_typed_shows_in_the_footer() -> None:
    text = text_of(render(orders_run(1), 160, 40, View(filter="Ord", editing=True)))
    assert "filter topics: Ord_" in text


def test_broker_down_frame() -> None:
    check_golden(
        "down",
        text_of(render_down("b1", "no broker named 'b1' is running (no state segment)", 75.0, busy_broker(1)[-1])),
    )
