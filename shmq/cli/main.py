"""The `shmq` command line (also `python -m shmq`)."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shmq", description="A RocketMQ-style message broker for one machine.")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("broker", help="run a broker on a store directory")
    b.add_argument("--store", required=True, help="store directory (created if missing)")
    b.add_argument("--name", default="default", help="broker name clients attach to (default: default)")
    b.add_argument("--config", help="TOML file or RocketMQ-style broker.conf (key=value)")
    args = parser.parse_args(argv)
    if args.command == "broker":
        from shmq.procs.broker import run_broker
        return run_broker(args.store, args.name, args.config)
    return 2


if __name__ == "__main__":
    sys.exit(main())
