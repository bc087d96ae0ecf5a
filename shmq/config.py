"""Broker and store configuration with RocketMQ's key names and defaults.

Fields are snake_case in Python; files may use RocketMQ's camelCase names
(`flushDiskType=SYNC_FLUSH` in a broker.conf) or the snake_case ones (in TOML).
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass
from typing import Any, Mapping

from shmq.errors import ConfigError

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"
ASYNC_MASTER = "ASYNC_MASTER"
SYNC_MASTER = "SYNC_MASTER"
SLAVE = "SLAVE"


@dataclass
class BrokerConfig:
    """Everything a broker and its store read; defaults are RocketMQ's unless noted."""

    # store layout
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    message_index_enable: bool = True
    max_message_size: int = 4 * 1024 * 1024
    # flush
    flush_disk_type: str = ASYNC_FLUSH
    flush_interval_commit_log: int = 500  # ms
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000  # ms: flush whatever is dirty at least this often
    flush_interval_consume_queue: int = 1000  # ms
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000  # ms: flush every queue and write the checkpoint
    sync_flush_timeout: int = 5000  # ms, SYNC_FLUSH ack gives FLUSH_DISK_TIMEOUT after this
    warm_mapped_file_enable: bool = True  # shmq: touch the next segment's pages ahead of time
    # cleanup
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"  # hours of day, ";"-separated
    disk_max_used_space_ratio: int = 75  # percent: start cleaning expired files early
    disk_space_clean_forcibly_ratio: float = 0.85  # delete even unexpired segments
    disk_space_warning_level_ratio: float = 0.90  # refuse writes
    clean_resource_interval: int = 10_000  # ms
    delete_commit_log_files_interval: int = 100  # ms between two deletions
    delete_file_batch_max: int = 10
    # broker
    broker_name: str = "default"
    broker_role: str = ASYNC_MASTER
    default_topic_queue_nums: int = 4
    auto_create_topic_enable: bool = True
    wait_time_mills_in_send_queue: int = 200
    os_page_cache_busy_time_out_mills: int = 1000
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    flush_consumer_offset_interval: int = 5000  # ms
    store_host: int = 0  # shmq: 8-byte store host id written into records and offset msg ids

    def __post_init__(self) -> None:
        # RocketMQ 5 writes these two as percentages (90), 4.x as fractions (0.90): accept both
        for name in ("disk_space_clean_forcibly_ratio", "disk_space_warning_level_ratio"):
            if getattr(self, name) > 1:
                setattr(self, name, getattr(self, name) / 100)
        self.validate()

    def validate(self) -> None:
        if self.flush_disk_type not in (ASYNC_FLUSH, SYNC_FLUSH):
            raise ConfigError(f"flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH, got {self.flush_disk_type!r}")
        if self.broker_role not in (ASYNC_MASTER, SYNC_MASTER, SLAVE):
            raise ConfigError(f"brokerRole must be ASYNC_MASTER, SYNC_MASTER or SLAVE, got {self.broker_role!r}")
        if self.mapped_file_size_commit_log < 4096:
            raise ConfigError("mappedFileSizeCommitLog must be at least 4096 bytes")
        if self.mapped_file_size_consume_queue % 20 or self.mapped_file_size_consume_queue < 20:
            raise ConfigError("mappedFileSizeConsumeQueue must be a positive multiple of 20")
        if self.max_hash_slot_num < 1 or self.max_index_num < 1:
            raise ConfigError("maxHashSlotNum and maxIndexNum must be positive")
        if not 0 < self.disk_space_warning_level_ratio <= 1 or not 0 < self.disk_space_clean_forcibly_ratio <= 1:
            raise ConfigError("disk space ratios are fractions in (0, 1]")
        if not 0 < self.disk_max_used_space_ratio <= 100:
            raise ConfigError("diskMaxUsedSpaceRatio is a percentage in (0, 100]")
        for hour in self.delete_when.split(";"):
            if not hour.strip().isdigit() or not 0 <= int(hour) <= 23:
                raise ConfigError(f"deleteWhen takes hours 00-23 separated by ';', got {self.delete_when!r}")

    @property
    def delay_levels_ms(self) -> list[int]:
        """messageDelayLevel parsed to milliseconds, level 1 first."""
        units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        out = []
        for item in self.message_delay_level.split():
            try:
                out.append(int(item[:-1]) * units[item[-1]])
            except (KeyError, ValueError):
                raise ConfigError(f"messageDelayLevel item {item!r} is not like 10s, 1m, 2h") from None
        return out

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "BrokerConfig":
        """Build from a mapping keyed by RocketMQ camelCase or snake_case names."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, raw in values.items():
            name = key if key in fields else _ALIASES.get(key) or _snake(key)
            if name not in fields:
                raise ConfigError(f"unknown config key {key!r}")
            kwargs[name] = _coerce(fields[name], raw, key)
        return cls(**kwargs)

    @classmethod
    def load(cls, source: "str | os.PathLike[str] | Mapping[str, Any] | BrokerConfig | None") -> "BrokerConfig":
        """Accept a config object, a dict, a TOML file or a RocketMQ-style key=value file."""
        if source is None:
            return cls()
        if isinstance(source, BrokerConfig):
            return source
        if isinstance(source, Mapping):
            return cls.from_mapping(source)
        path = os.fspath(source)
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".toml"):
            try:
                values = tomllib.loads(data.decode("utf-8"))
            except tomllib.TOMLDecodeError as e:
                raise ConfigError(f"{path}: {e}") from None
            return cls.from_mapping(values.get("broker", values))
        return cls.from_mapping(parse_properties(data.decode("utf-8"), path))

    def to_properties(self) -> str:
        """The config as a RocketMQ-style broker.conf."""
        return "".join(f"{camel(f.name)}={_render(getattr(self, f.name))}\n" for f in dataclasses.fields(self))


# RocketMQ spellings that do not follow from our field names
_ALIASES = {"warmMapedFileEnable": "warm_mapped_file_enable"}


def parse_properties(text: str, origin: str = "<config>") -> dict[str, str]:
    """Java-properties style `key=value` lines; `#` and `!` start comments."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise ConfigError(f"{origin}:{n}: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def _render(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _coerce(f: dataclasses.Field[Any], raw: Any, key: str) -> Any:
    kind = f.type if isinstance(f.type, type) else {"int": int, "float": float, "bool": bool, "str": str}[f.type]
    try:
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            if str(raw).lower() in ("true", "1", "yes"):
                return True
            if str(raw).lower() in ("false", "0", "no"):
                return False
            raise ValueError(raw)
        if kind is int and isinstance(raw, float):
            raise ValueError(raw)
        return kind(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"config key {key!r}: {raw!r} is not a valid {kind.__name__}") from None
