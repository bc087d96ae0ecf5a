"""The `shmq` command line (also `python -m shmq`)."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shmq", description="A RocketMQ-style message broker for one machine.")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("broker", help="run a broker on a store directory")
    b.add_argument("--store", required=True, help="store directory (created if missing)")
    b.add_argument("--name", help="broker name clients attach to (default: brokerName of the config, else default)")
    b.add_argument("--config", help="TOML file or RocketMQ-style broker.conf (key=value)")
    h = sub.add_parser("ha", help="run the HA sender of a running master broker (the broker normally starts it)")
    h.add_argument("--store", required=True, help="the master's store directory")
    h.add_argument("--name", help="the master's broker name (default: brokerName of the config, else default)")
    h.add_argument("--config", help="the master's config file (haListenPort, haAuthToken, ...)")
    args = parser.parse_args(argv)
    if args.command == "broker":
        return _broker(args.store, args.name, args.config)
    if args.command == "ha":
        return _ha(args.store, args.name, args.config)
    return 2


def _broker(store: str, name: str | None, config_path: str | None) -> int:
    """Check the config before anything starts: a wrong key or role is one line and status 2."""
    from shmq.config import BrokerConfig
    from shmq.errors import ConfigError
    from shmq.procs.broker import run_broker
    try:
        config = BrokerConfig.load(config_path)
        config.check_role()
        resolved = config.resolve_name(name)
    except (ConfigError, OSError) as e:
        print(f"shmq broker: error: {e}", file=sys.stderr)
        return 2
    return run_broker(store, resolved, config)


def _ha(store: str, name: str | None, config_path: str | None) -> int:
    from shmq.config import BrokerConfig
    from shmq.errors import ConfigError
    from shmq.procs.ha_sender import run_ha_sender
    try:
        config = BrokerConfig.load(config_path)
        resolved = config.resolve_name(name)
    except (ConfigError, OSError) as e:
        print(f"shmq ha: error: {e}", file=sys.stderr)
        return 2
    return run_ha_sender(store, resolved, config)


if __name__ == "__main__":
    sys.exit(main())
