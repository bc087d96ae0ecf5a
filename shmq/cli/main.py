"""The `shmq` command line (also `python -m shmq`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from shmq import __version__
from shmq.cli.admin import add_admin_parser, run_admin
from shmq.cli.demo import __doc__ as demo_doc
from shmq.cli.demo import add_arguments as add_demo_arguments
from shmq.cli.exporter import __doc__ as exporter_doc
from shmq.cli.exporter import add_arguments as add_exporter_arguments
from shmq.cli.help_format import ParagraphHelpFormatter
from shmq.cli.top import add_top_parser

ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `shmq`: what it can do, not a usage error
        parser.print_help()
        return 0
    return _run(args)


def build_parser() -> argparse.ArgumentParser:
    """The whole `shmq` command line; the docs' tests parse their examples with it."""
    parser = argparse.ArgumentParser(prog="shmq", description="A RocketMQ-style message broker for one machine.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command")
    b = sub.add_parser("broker", help="run a broker on a store directory (a replica with brokerRole=SLAVE)")
    _store_args(b)
    b.add_argument("--role", choices=ROLES, help="brokerRole, over the config's (what `shmq admin promote` uses)")
    r = sub.add_parser("replica", help="run a replica (brokerRole=SLAVE) following a master over TCP")
    _store_args(r)
    r.add_argument("--master", help="the master's HA address host:port (haMasterAddress, over the config's)")
    n = sub.add_parser("namesrv", help="run a name server: brokers with namesrvAddr register, clients read routes")
    n.add_argument(
        "--name", default="default", help="the name server's name (namesrvAddr of its brokers; default: default)"
    )
    c = sub.add_parser("cluster", help="run a name server and N brokers in the foreground until Ctrl-C")
    c.add_argument("--store-root", required=True, help="directory holding one store per broker (created if missing)")
    c.add_argument("--brokers", type=int, default=2, help="how many brokers (default 2), named <namesrv>-b<i>")
    c.add_argument("--namesrv", default="default", help="the name server's name (default: default)")
    c.add_argument("--config", help="TOML file or broker.conf every broker reads")
    add_admin_parser(sub)
    h = sub.add_parser("ha", help="run the HA sender of a running master broker (the broker normally starts it)")
    h.add_argument("--store", required=True, help="the master's store directory")
    h.add_argument("--name", help="the master's broker name (default: brokerName of the config, else default)")
    h.add_argument("--config", help="the master's config file (haListenPort, haAuthToken, ...)")
    d = sub.add_parser(
        "demo",
        help="run the demo: a broker, producers and consumers in processes; checks, throughput, latency",
        description=demo_doc,
        formatter_class=ParagraphHelpFormatter,
    )
    add_demo_arguments(d)
    e = sub.add_parser(
        "exporter",
        help="serve a broker's metrics over HTTP for Prometheus (GET /metrics)",
        description=exporter_doc,
        formatter_class=ParagraphHelpFormatter,
    )
    add_exporter_arguments(e)
    add_top_parser(sub)
    return parser


def _run(args: argparse.Namespace) -> int:
    """Run the parsed subcommand; the exit status."""
    if args.command == "demo":
        from shmq.cli.demo import run

        return run(args)
    if args.command == "broker":
        return _broker("broker", args.store, args.name, args.config, {"broker_role": args.role} if args.role else {})
    if args.command == "replica":
        overrides: dict[str, Any] = {"broker_role": "SLAVE"}
        if args.master:
            overrides["ha_master_address"] = args.master
        return _broker("replica", args.store, args.name, args.config, overrides)
    if args.command == "namesrv":
        from shmq.procs.namesrv import run_namesrv

        return run_namesrv(args.name)
    if args.command == "cluster":
        from shmq.cli.cluster import run_cluster

        return run_cluster(args.store_root, args.brokers, args.namesrv, args.config)
    if args.command == "admin":
        return run_admin(args)
    if args.command == "exporter":
        from shmq.cli.exporter import run as run_exporter

        return run_exporter(args)
    if args.command == "ha":
        return _ha(args.store, args.name, args.config)
    if args.command == "top":
        from shmq.cli.top import run_top

        return run_top(args)
    return 2


def _version() -> str:
    """`shmq 0.1.0 (compiled paths: on)`: whether this install runs the compiled hot paths."""
    import shmq.codec.record  # noqa: F401  (the codec picks its compiled twins at import)
    from shmq import _speedups

    st = _speedups.status()
    return f"shmq {__version__} (compiled paths: {'on' if st['enabled'] else 'off, ' + st['reason']})"


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, help="store directory (created if missing)")
    p.add_argument(
        "--name",
        help="broker name clients attach to (default: brokerName of the config, else $SHMQ_BROKER, else default)",
    )
    p.add_argument("--config", help="TOML file or RocketMQ-style broker.conf (key=value)")


def _broker(command: str, store: str, name: str | None, config_path: str | None, overrides: dict[str, Any]) -> int:
    """Check the config before anything starts: a wrong key or role is one line and status 2.
    A SLAVE runs the replica daemon (the broker plus the HA client)."""
    from shmq.cli.options import load_config

    loaded = load_config(command, config_path, name, overrides, check_role=True)
    if loaded is None:
        return 2
    config, resolved = loaded
    if config.is_master:
        from shmq.procs.broker import run_broker

        return run_broker(store, resolved, config)
    from shmq.procs.replica import run_replica

    return run_replica(store, resolved, config)


def _ha(store: str, name: str | None, config_path: str | None) -> int:
    from shmq.cli.options import load_config
    from shmq.procs.ha_sender import run_ha_sender

    loaded = load_config("ha", config_path, name)
    return 2 if loaded is None else run_ha_sender(store, loaded[1], loaded[0])


if __name__ == "__main__":
    sys.exit(main())
