"""What every `shmq` command does with --config and --name before it starts anything."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from shmq.config import BrokerConfig
from shmq.errors import ConfigError


def load_config(
    command: str,
    config_path: str | None,
    name: str | None,
    overrides: dict[str, Any] | None = None,
    check_role: bool = False,
) -> tuple[BrokerConfig, str] | None:
    """The config (with ``overrides``) and the resolved broker name; None after printing one
    error line (`shmq <command>: error: ...`), for the caller to exit with status 2."""
    try:
        config = BrokerConfig.load(config_path)
        if overrides:
            config = dataclasses.replace(config, **overrides)
        if check_role:
            config.check_role()
        return config, config.resolve_name(name)
    except (ConfigError, OSError) as e:
        print(f"shmq {command}: error: {e}", file=sys.stderr)
        return None
