"""`shmq top`: a full-screen monitor of one broker, or of every broker of a name server
(``--namesrv``), in rich ``Live``, keys read without blocking.

Everything shown comes from the broker's state segment (``shmq.monitor``), read-only, so
running it never slows the broker. On a terminal it redraws every ``--interval`` seconds
and answers keys at once: ``q`` quits, ``s`` cycles the sort, ``/`` starts a topic filter
(Enter applies, Esc clears), ``a`` shows or hides system topics. On a pipe (or with
``--once``) it prints one frame and exits: 0 with a broker, 1 when the broker is down.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import termios
import time
import tty
from types import FrameType, TracebackType
from typing import Any

from rich.console import Console, RenderableType
from rich.live import Live

from shmq.cli.help_format import ParagraphHelpFormatter
from shmq.cli.subcommands import Subcommands
from shmq.errors import ConfigError
from shmq.monitor.attach import Attachment
from shmq.monitor.cluster import ClusterAttachment
from shmq.monitor.render import View, render, render_down
from shmq.monitor.render_cluster import BrokerFrame, render_cluster, render_no_routes
from shmq.namesrv.routes import check_namesrv_name, namesrv_or_env

ESC, ENTER, BACKSPACES = "\x1b", ("\r", "\n"), ("\x7f", "\b")
DESCRIPTION = """\
A full-screen monitor of one running broker: topics (in/out rates, max offsets, backlog),
consumer groups (lag, consume rate, trend), clients, flush and replica lag, alerts. It reads
the broker's state segment only, so it never slows the broker, and it waits for a broker
that is down and reattaches when it is back.

With --namesrv NS it shows every broker the name server routes to: a row per broker with
totals, then each broker's topics and groups; brokers appear and disappear as they register
and leave.

keys: q quit, s cycle the sort, / filter topics (Enter applies, Esc clears), a show or hide
system topics.

On a pipe (or with --once) it prints one frame and exits: 0 with a broker, 1 when it is down.
"""


def add_top_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "top",
        help="full-screen monitor of a running broker (reads its state segment only)",
        description=DESCRIPTION,
        formatter_class=ParagraphHelpFormatter,
    )
    p.add_argument("--name", help="broker name (default: $SHMQ_BROKER, else default)")
    p.add_argument(
        "--namesrv",
        metavar="NS",
        help="show every broker of this name server (default: $SHMQ_NAMESRV when neither --name nor "
        "$SHMQ_BROKER is given)",
    )
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1.0)")
    p.add_argument("--once", action="store_true", help="print one frame and exit (also when stdout is not a terminal)")


def run_top(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        print("shmq top: error: --interval must be > 0", file=sys.stderr)
        return 2
    try:
        namesrv = _namesrv(args)
    except ConfigError as e:
        print(f"shmq top: error: {e}", file=sys.stderr)
        return 2
    name = args.name or os.environ.get("SHMQ_BROKER") or "default"
    with ClusterAttachment(namesrv) if namesrv is not None else Attachment(name) as attachment:
        if args.once or not sys.stdout.isatty() or not sys.stdin.isatty():
            return _once(attachment, min(args.interval, 1.0))
        try:
            return _live(attachment, args.interval)
        except KeyboardInterrupt:  # Ctrl-C quits like q (the terminal is restored by then)
            return 0


def _namesrv(args: argparse.Namespace) -> str | None:
    """The name server to show: --namesrv, else $SHMQ_NAMESRV when no broker is named; None: one broker."""
    if args.namesrv and args.name:
        raise ConfigError("give --name (one broker) or --namesrv (every broker of a name server), not both")
    if args.namesrv:
        return check_namesrv_name(args.namesrv)
    return namesrv_or_env(None, args.name or os.environ.get("SHMQ_BROKER"))


def frame(attachment: Attachment | ClusterAttachment, width: int, height: int, view: View) -> RenderableType:
    """The frame for the attachment's state: the monitor, or the broker-down screen."""
    if isinstance(attachment, ClusterAttachment):
        return cluster_frame(attachment, width, height, view)
    snaps = attachment.history.snapshots
    if attachment.down is not None or not snaps:
        return render_down(
            attachment.name,
            attachment.down or "not attached yet",
            time.monotonic() - attachment.down_since,
            attachment.history.latest,
        )
    return render(list(snaps), width, height, view)


def cluster_frame(cluster: ClusterAttachment, width: int, height: int, view: View) -> RenderableType:
    """The cluster's frame: every broker of the routes, or the screen while there are none."""
    if cluster.problem is not None:
        return render_no_routes(cluster.name, cluster.problem, time.monotonic() - cluster.down_since)
    brokers = [BrokerFrame(b, list(a.history.snapshots), a.down) for b, a in cluster.members]
    return render_cluster(cluster.name, cluster.server_alive(), brokers, width, height, view)


def _once(attachment: Attachment | ClusterAttachment, gap: float) -> int:
    """Two samples ``gap`` apart (rates need two), one frame printed. On a pipe every row is
    printed, 160 columns wide unless COLUMNS says otherwise (a file has no screen to fit)."""
    console = Console()
    width, height = console.size.width, console.size.height
    if not console.is_terminal:
        width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else 160
        console.width, height = width, 1_000_000
    up = attachment.sample()
    if up:
        time.sleep(gap)
        up = attachment.sample()
    console.print(frame(attachment, width, height, View()))
    return 0 if up else 1


def _live(attachment: Attachment | ClusterAttachment, interval: float) -> int:
    # the terminal's own size, followed on resize: COLUMNS/LINES (which rich prefers) are what
    # a shell exported at some point and may be stale
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)
    console = Console()
    view = View()
    with Keys() as keys, Live(console=console, screen=True, auto_refresh=False) as live:
        next_sample = 0.0
        while True:
            now = time.monotonic()
            if now >= next_sample:
                attachment.sample()
                next_sample = now + interval
                live.update(frame(attachment, *console.size, view), refresh=True)
            pressed = keys.read(max(0.0, next_sample - time.monotonic()))
            if not pressed:
                continue
            for key in pressed:
                view, quit_ = on_key(view, key)
                if quit_:
                    return 0
            live.update(frame(attachment, *console.size, view), refresh=True)


def on_key(view: View, key: str) -> tuple[View, bool]:
    """The view after ``key`` and whether to quit (pure: the key map in one place)."""
    if view.editing:
        if key in ENTER:
            return View(view.sort, view.filter, view.show_system), False
        if key == ESC:
            return View(view.sort, "", view.show_system), False
        if key in BACKSPACES:
            return View(view.sort, view.filter[:-1], view.show_system, True), False
        if key.isprintable():
            return View(view.sort, view.filter + key, view.show_system, True), False
        return view, False
    if key in ("q", "Q"):
        return view, True
    if key == "s":
        return view.next_sort(), False
    if key == "/":
        return View(view.sort, view.filter, view.show_system, True), False
    if key == "a":
        return View(view.sort, view.filter, not view.show_system), False
    if key == ESC:
        return View(view.sort, "", view.show_system), False
    return view, False


class Keys:
    """The terminal in cbreak mode (keys arrive at once, unechoed) until exit, and restored
    then whatever ends the monitor: an exception, Ctrl-C or SIGTERM (turned into SystemExit
    here so the ``with`` blocks unwind)."""

    def __init__(self) -> None:
        self.fd = sys.stdin.fileno()
        self._saved: list[Any] | None = None  # termios.tcgetattr's list (its items differ in type)
        self._old_term: object = None

    def __enter__(self) -> Keys:
        self._saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)
        self._old_term = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        return self

    def read(self, timeout: float) -> str:
        """Keys typed within ``timeout`` seconds ('' if none)."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        return os.read(self.fd, 64).decode(errors="ignore") if ready else ""

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
        signal.signal(signal.SIGTERM, self._old_term)  # type: ignore[arg-type]


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)
