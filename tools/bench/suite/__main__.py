"""``python -m tools.bench.suite [--quick] [--only NAME ...] [--workloads WORD ...] [--out DIR]``

QUICK=1 in the environment is --quick."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from . import report
from .install import ROOT
from .runner import run_suite
from .settings import settings


def _exit_on_sigterm() -> None:
    """Make SIGTERM (a timeout's, make's, CI's) unwind like Ctrl-C, so the suite's ``finally``
    stops the brokers and servers it started instead of leaving them running."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def parser() -> argparse.ArgumentParser:
    """The suite's options (also how tests/bench checks the commands docs/BENCHMARKS.md gives)."""
    ap = argparse.ArgumentParser(prog="python -m tools.bench.suite", description=__doc__)
    ap.add_argument(
        "--quick",
        action="store_true",
        default=os.environ.get("QUICK", "") not in ("", "0"),
        help="the one-minute smoke run (also QUICK=1)",
    )
    ap.add_argument("--only", nargs="*", help="system names to run (default: all)")
    ap.add_argument(
        "--workloads",
        nargs="*",
        metavar="WORD",
        help="only the workloads whose name contains one of these words (e.g. replicated, durable, "
        "latency, '1->1'); shmq's queue-scaling and backlog extras run only with the word extras",
    )
    ap.add_argument("--reps", type=int, help="repetitions (default 3)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"), help="where the JSON and markdown go")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    _exit_on_sigterm()
    s = settings(a.quick)
    if a.reps:
        s = type(s)(**{**s.__dict__, "reps": a.reps})
    res = run_suite(s, only=a.only, words=a.workloads)
    report.show(res)
    js, md = report.save(res, a.out)
    print(f"[bench] wrote {js} and {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
