"""How `shmq admin` commands answer: a ``Result`` printed as rich tables or as JSON, errors as one line.

A command returns data (JSON-able: dicts, lists, str, int, float, bool, None) and, for
people, a function that renders it. ``--json`` prints the data alone, so what a script parses
is exactly what the table was made from. Errors a user can cause (no broker, a bad name, a
broker's refusal, a missing file) are ``ShmqError``, ``ValueError`` or ``OSError``: one line
``shmq admin <command>: error: ...`` on stderr and status 1 (with ``--json`` also the error, and a
broker's refusal code, as JSON on stdout). Usage errors are argparse's
(status 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from shmq.client.admin import Admin
from shmq.client.cluster_admin import ClusterAdmin
from shmq.errors import BrokerError, ConfigError, ShmqError

EXIT_ERROR = 1
UNLIMITED = 1 << 20  # the width a pipe gets: no line is ever folded or cut


@dataclass
class Result:
    """What a command found or did: ``data`` for --json, ``render(data)`` for people (None: the
    data as indented JSON), ``status`` the exit status (a check that found problems returns 1)."""

    data: Any
    render: Callable[[Any], RenderableType | Sequence[RenderableType]] | None = None
    status: int = 0
    notes: list[str] = field(default_factory=list)  # lines for people after the render (not in --json)


def add_common(p: argparse.ArgumentParser, broker: bool = True) -> None:
    """The options every admin command has: ``--json``, and ``--name`` / ``--namesrv`` for
    those that talk to brokers."""
    if broker:
        p.add_argument("--name", help="broker name (default: $SHMQ_BROKER, else default)")
        p.add_argument(
            "--namesrv",
            metavar="NS",
            help="name server: run on every broker it routes to (default: $SHMQ_NAMESRV when neither "
            "--name nor $SHMQ_BROKER is given)",
        )
    p.add_argument("--json", action="store_true", help="print JSON (for scripts) instead of tables")


def admin_of(args: argparse.Namespace) -> Admin:
    """The admin a command uses: of the cluster of --namesrv (or $SHMQ_NAMESRV, when no broker
    is named), else of one broker: --name, else $SHMQ_BROKER, else default."""
    namesrv = getattr(args, "namesrv", None)
    if namesrv and args.name:
        raise ConfigError("give --name (one broker) or --namesrv (every broker of a name server), not both")
    if namesrv:
        return Admin(namesrv=namesrv)
    return Admin(args.name or os.environ.get("SHMQ_BROKER"))


def cluster_of(admin: Admin) -> ClusterAdmin | None:
    """``admin`` as a cluster admin, None when it speaks to one broker."""
    return admin if isinstance(admin, ClusterAdmin) else None


def perm_text(perm: int) -> str:
    """``6 (rw)``: the number RocketMQ prints and what it means."""
    return f"{perm} ({'r' if perm & 4 else '-'}{'w' if perm & 2 else '-'})"


class FitTable:
    """A table that never cuts a value a user may copy (a msg id, a topic, a path): when it is
    wider than the terminal it leaves out its ``optional`` columns, in that order, until it fits,
    and folds what is still too wide onto more lines; rich's ellipsis is never used. Cells are
    plain text (a ``[tag]`` in a key is printed, not taken for markup)."""

    def __init__(
        self,
        title: str | None,
        columns: Sequence[str],
        rows: Iterable[Sequence[Any]],
        right: Iterable[str] = (),
        optional: Sequence[str] = (),
    ) -> None:
        self.title = title
        self.columns = list(columns)
        self.rows = [["" if v is None else str(v) for v in r] for r in rows]
        self.right = set(right)
        self.optional = [c for c in optional if c in self.columns]

    def build(self, shown: Sequence[str]) -> Table:
        """The rich table of the ``shown`` columns."""
        t = Table(title=None if self.title is None else Text(self.title), title_justify="left", header_style="bold")
        for c in shown:
            t.add_column(c, justify="right" if c in self.right else "left", overflow="fold")
        index = [self.columns.index(c) for c in shown]
        for r in self.rows:
            t.add_row(*(Text(r[i], overflow="fold") for i in index))
        return t

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        shown, left_out = list(self.columns), []
        t = self.build(shown)
        for c in self.optional:
            if Measurement.get(console, options.update_width(UNLIMITED), t).maximum <= options.max_width:
                break
            shown.remove(c)
            left_out.append(c)
            t = self.build(shown)
        yield t
        if left_out:
            yield Text(
                f"({', '.join(left_out)} left out at this width: --json or a wider terminal shows them)", style="dim"
            )


def table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    right: Iterable[str] = (),
    optional: Sequence[str] = (),
) -> FitTable:
    """A plain table: ``right`` names the numeric columns (right-aligned), ``optional`` those
    left out, in that order, on a terminal too narrow for all (see ``FitTable``)."""
    return FitTable(title, columns, rows, right, optional)


def console_for(out: Any) -> Console:
    """A terminal gets tables fitted to its width; a pipe or file gets every value whole on its
    line, whatever the width (what a script or ``grep`` reads must not depend on $COLUMNS)."""
    if out.isatty():
        return Console(file=out, soft_wrap=False)
    return Console(file=out, soft_wrap=False, width=UNLIMITED, no_color=True)


def command_name(args: argparse.Namespace) -> str:
    """`admin topic list`-style name of the parsed command, for error lines."""
    words = ["admin"] + [str(getattr(args, k)) for k in ("admin_command", "sub_command") if getattr(args, k, None)]
    return " ".join(words)


def error_data(e: Exception) -> dict[str, Any]:
    """An error as --json prints it: the message, and a broker's refusal code and its name."""
    data: dict[str, Any] = {"error": str(e)}
    if isinstance(e, BrokerError):
        data.update(code=e.code, code_name=e.code_name)
    return data


def run_command(args: argparse.Namespace, out: Any = None) -> int:
    """Run ``args.run(args)`` and print its result; the exit status. A command that prints
    its own output (``promote`` reports progress as it goes) returns its status instead."""
    out = out or sys.stdout
    try:
        result: Result | int = args.run(args)
    except (ShmqError, ValueError, OSError) as e:
        print(f"shmq {command_name(args)}: error: {e}", file=sys.stderr)
        if getattr(args, "json", False):  # a script reads the refusal, and the broker's code, from stdout too
            json.dump(error_data(e), out, indent=2)
            out.write("\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    if isinstance(result, int):
        return result
    if getattr(args, "json", False):
        json.dump(result.data, out, indent=2, sort_keys=False, default=str)
        out.write("\n")
    else:
        console = console_for(out)
        if result.render is None:
            console.print_json(json.dumps(result.data, default=str))
        else:
            shown = result.render(result.data)
            for part in shown if isinstance(shown, (list, tuple)) else [shown]:
                console.print(part, markup=False)  # names and ids are printed as they are, "[x]" included
        for line in result.notes:
            console.print(line, markup=False)
    return result.status
