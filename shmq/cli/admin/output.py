"""How `shmq admin` commands answer: a ``Result`` printed as rich tables or as JSON, errors as one line.

A command returns data (JSON-able: dicts, lists, str, int, float, bool, None) and, for
people, a function that renders it. ``--json`` prints the data alone, so what a script parses
is exactly what the table was made from. Errors a user can cause (no broker, a bad name, a
broker's refusal, a missing file) are ``ShmqError``, ``ValueError`` or ``OSError``: one line
``shmq admin <command>: error: ...`` on stderr and status 1. Usage errors are argparse's
(status 2).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from rich.console import Console, RenderableType
from rich.table import Table

from shmq.errors import ShmqError

EXIT_ERROR = 1


@dataclass
class Result:
    """What a command found or did: ``data`` for --json, ``render(data)`` for people (None: the
    data as indented JSON), ``status`` the exit status (a check that found problems returns 1)."""

    data: Any
    render: Callable[[Any], RenderableType | Sequence[RenderableType]] | None = None
    status: int = 0
    notes: list[str] = field(default_factory=list)  # lines for people after the render (not in --json)


def add_common(p: argparse.ArgumentParser, broker: bool = True) -> None:
    """The options every admin command has: ``--json``, and ``--name`` for those that talk to a broker."""
    if broker:
        p.add_argument("--name", help="broker name (default: $SHMQ_BROKER, else default)")
    p.add_argument("--json", action="store_true", help="print JSON (for scripts) instead of tables")


def broker_of(args: argparse.Namespace) -> str:
    """The broker a command talks to: --name, else $SHMQ_BROKER, else default."""
    return args.name or os.environ.get("SHMQ_BROKER") or "default"


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
          right: Iterable[str] = ()) -> Table:
    """A plain rich table: ``right`` names the numeric columns (right-aligned)."""
    t = Table(title=title, title_justify="left", header_style="bold")
    right = set(right)
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left")
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    return t


def command_name(args: argparse.Namespace) -> str:
    """`admin topic list`-style name of the parsed command, for error lines."""
    words = ["admin"] + [str(getattr(args, k)) for k in ("admin_command", "sub_command")
                         if getattr(args, k, None)]
    return " ".join(words)


def run_command(args: argparse.Namespace, out: Any = None) -> int:
    """Run ``args.run(args)`` and print its result; the exit status. A command that prints
    its own output (``promote`` reports progress as it goes) returns its status instead."""
    out = out or sys.stdout
    try:
        result: Result | int = args.run(args)
    except (ShmqError, ValueError, OSError) as e:
        print(f"shmq {command_name(args)}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    if isinstance(result, int):
        return result
    if getattr(args, "json", False):
        json.dump(result.data, out, indent=2, sort_keys=False, default=str)
        out.write("\n")
    else:
        console = Console(file=out, soft_wrap=False)
        if result.render is None:
            console.print_json(json.dumps(result.data, default=str))
        else:
            shown = result.render(result.data)
            for part in shown if isinstance(shown, (list, tuple)) else [shown]:
                console.print(part)
        for line in result.notes:
            console.print(line)
    return result.status
