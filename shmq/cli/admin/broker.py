"""`shmq admin broker status` (mqadmin brokerStatus + getBrokerConfig): the broker's state and the config in force.

``summary_rows`` and ``config_rows`` are pure.
"""

from __future__ import annotations

import argparse
from typing import Any

from shmq.cli.admin.output import FitTable, Result, add_common, admin_of, cluster_of, table
from shmq.cli.subcommands import Subcommands

MIB = 1024 * 1024


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def summary_rows(d: dict[str, Any]) -> list[list[Any]]:
    """(key, value) rows of everything but the config; alerts spelled out next to the value."""
    disk = _ratio(d["disk_used_ratio"])
    if d["disk_full"]:
        disk += f"  WRITES REFUSED (over diskSpaceWarningLevelRatio {_ratio(d['disk_space_warning_level_ratio'])})"
    elif d["disk_used_ratio"] > d["disk_max_used_space_ratio"]:
        disk += f"  over diskMaxUsedSpaceRatio {_ratio(d['disk_max_used_space_ratio'])}: cleanup deletes early"
    else:
        disk += f"  (diskMaxUsedSpaceRatio {_ratio(d['disk_max_used_space_ratio'])})"
    rss = "-" if d["rss_bytes"] is None else f"{d['rss_bytes'] / MIB:.1f} MiB"
    cpu = "-" if d["cpu_percent"] is None else f"{d['cpu_percent']:.1f} %"
    rows: list[list[Any]] = [
        ["name", d["name"]],
        ["version", d["version"]],
        ["role", d["role"]],
        ["pid", d["pid"]],
        ["store", d["store_dir"]],
        ["uptime", f"{d['uptime_s']:.0f} s"],
        ["cpu", cpu],
        ["rss", rss],
        ["commitlog min offset", d["commitlog_min_offset"]],
        ["commitlog max offset", d["commitlog_max_offset"]],
        ["flushed offset", f"{d['flushed_offset']}  ({d['commitlog_max_offset'] - d['flushed_offset']} bytes behind)"],
        ["disk used", disk],
        ["clients", d["clients"]],
        ["messages in", d["msgs_in"]],
        ["bytes in", d["bytes_in"]],
        ["busy rejections", d["busy_rejections"]],
    ]
    if d["replicas"] is None:
        rows.append(["replicas", "- (no HA segment)"])
    elif not d["replicas"]:
        rows.append(["replicas", "none connected"])
    for r in d["replicas"] or []:
        state = "streaming" if r["streaming"] else "handshake"
        rows.append(
            [
                f"replica {r['name'] or r['address']}",
                f"acked {r['acked_offset']} ({r['lag_bytes']} bytes behind, {state})",
            ]
        )
    return rows


def config_rows(config: dict[str, Any]) -> list[list[Any]]:
    return [[k, "" if v is None else str(v)] for k, v in sorted(config.items())]


def _render(d: dict[str, Any]) -> list[FitTable]:
    return [
        table(f"broker {d['name']}", ["", "value"], summary_rows(d)),
        table("config in force", ["key", "value"], config_rows(d["config"])),
    ]


def _render_each(d: dict[str, dict[str, Any]]) -> list[FitTable]:
    """A cluster's brokers one after the other (config tables left to --json: they repeat)."""
    return [table(f"broker {name}", ["", "value"], summary_rows(s)) for name, s in d.items()]


def _status(args: argparse.Namespace) -> Result:
    admin = admin_of(args)
    return Result(admin.broker_status(), _render if cluster_of(admin) is None else _render_each)


def register(sub: Subcommands) -> None:
    """Add `broker status`."""
    p = sub.add_parser("broker", help="the broker's status and the config in force")
    bsub = p.add_subparsers(dest="sub_command", required=True, metavar="SUBCOMMAND")
    s = bsub.add_parser("status", help="role, uptime, offsets, disk use, replicas, CPU and memory, config")
    add_common(s)
    s.set_defaults(run=_status)
