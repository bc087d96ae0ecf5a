"""`shmq admin store verify | dump`: offline checks and exports of a store folder.

Both read the files only (ACCESS_READ mappings; the lock file is neither created nor taken).
verify refuses a store a broker has open, since its files change under the check; dump reads
whatever is there (records are appended whole, so a running store dumps consistently up to
where it was when each segment was read).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from shmq.cli.admin.output import Result, add_common, table
from shmq.cli.subcommands import Subcommands
from shmq.store.dump import dump_rows
from shmq.store.verify import verify_store


def _render_verify(d: dict[str, Any]) -> list[RenderableType]:  # verify_store's JSON report
    parts: list[RenderableType] = [
        f"Store {d['store']}",
        table(None, ["checked", "count"], d["counts"].items(), right=["count"]),
    ]
    if d["problems"]:
        shown = len(d["problems"])
        title = f"{d['problem_count']} problem(s)" + (f", first {shown}" if shown < d["problem_count"] else "")
        parts.append(
            table(
                title,
                ["file", "position", "problem"],
                ([p["file"], p["position"], p["problem"]] for p in d["problems"]),
                right=["position"],
            )
        )
    parts.append(
        Text("OK: no problems found", style="green")
        if d["ok"]
        else Text(f"FAILED: {d['problem_count']} problem(s)", style="red")
    )
    return parts


def verify(args: argparse.Namespace) -> Result:
    report = verify_store(args.dir)
    return Result(report.to_json(), _render_verify, status=0 if report.ok else 1)


def dump(args: argparse.Namespace) -> int:
    out = sys.stdout
    for row in dump_rows(args.dir, args.topic, args.from_offset, args.max):
        out.write(json.dumps(row, separators=(",", ":")))
        out.write("\n")
    out.flush()
    return 0


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "store",
        help="check or export a store folder (offline, read-only)",
        description="Offline tools on a store folder; they never write to it.",
    )
    ssub = p.add_subparsers(dest="sub_command", required=True, metavar="COMMAND")

    v = ssub.add_parser("verify", help="check records (CRC), consume queues and index against the commitlog")
    v.add_argument("dir", help="store folder (its broker stopped)")
    add_common(v, broker=False)
    v.set_defaults(run=verify)

    d = ssub.add_parser("dump", help="records as JSON lines (Spark's column names, body base64)")
    d.add_argument("dir", help="store folder")
    d.add_argument("--topic", help="only this topic's records")
    d.add_argument(
        "--from", dest="from_offset", type=int, default=0, metavar="OFFSET", help="first commitlog offset (default 0)"
    )
    d.add_argument("--max", type=int, default=None, help="at most this many records")
    d.set_defaults(run=dump)
