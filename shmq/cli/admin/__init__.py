"""`shmq admin`: operate a broker, or every broker of a name server, from a shell (RocketMQ
mqadmin's vocabulary).

Each command family is one module of this package with a ``register(sub)`` that adds its
argparse subcommands; every leaf sets ``run`` (``run(args) -> Result``) with ``set_defaults``.
``run_admin`` calls it, prints the result (a rich table for people, ``--json`` for scripts) and
turns every error into one line on stderr and a non-zero status, so scripts can rely on the
exit code and people never see a traceback for a mistake of theirs.
"""

from __future__ import annotations

import argparse
import importlib

from shmq.cli.admin.output import run_command
from shmq.cli.subcommands import Subcommands

# the command families, in the order `shmq admin --help` lists them
FAMILIES = (
    "shmq.cli.admin.cluster",
    "shmq.cli.admin.promote",
    "shmq.cli.admin.topic",
    "shmq.cli.admin.group",
    "shmq.cli.admin.clients",
    "shmq.cli.admin.broker",
    "shmq.cli.admin.dlq",
    "shmq.cli.admin.offset",
    "shmq.cli.admin.msg",
    "shmq.cli.admin.store",
)


def add_admin_parser(sub: Subcommands) -> None:
    """Add `admin` and every family's subcommands to the `shmq` parser's subcommands."""
    a = sub.add_parser(
        "admin",
        help="operations on brokers and stores (topics, groups, offsets, messages, ...)",
        description="Operations on a running broker (over its control queue and read-only on its "
        "store files) and on stopped stores.",
    )
    asub = a.add_subparsers(dest="admin_command", required=True, metavar="COMMAND")
    for family in FAMILIES:
        importlib.import_module(family).register(asub)


def run_admin(args: argparse.Namespace) -> int:
    """Run the parsed admin command; the process exit status."""
    return run_command(args)
