"""Broker and store configuration with RocketMQ's key names and defaults.

Fields are snake_case in Python; files may use RocketMQ's camelCase names
(`flushDiskType=SYNC_FLUSH` in a broker.conf) or the snake_case ones (in TOML).
"""

from __future__ import annotations

import dataclasses
import grp
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shmq.errors import ConfigError

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"
ASYNC_MASTER = "ASYNC_MASTER"
SYNC_MASTER = "SYNC_MASTER"
SLAVE = "SLAVE"
_BROKER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_BROKER_ID = 1024  # the route table's bound (shmq.namesrv.routes)


@dataclass
class BrokerConfig:
    """Everything a broker and its store read; defaults are RocketMQ's unless noted."""

    # store layout
    mapped_file_size_commit_log: int = 128 * 1024 * 1024  # shmq: one machine (RocketMQ: 1 GiB)
    mapped_file_size_consume_queue: int = 300_000 * 20  # sparse: takes blocks as entries are written
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
    # ms: a SYNC_FLUSH send not on disk by then is answered FLUSH_DISK_TIMEOUT, a SYNC_MASTER send not
    # acknowledged by a replica by then FLUSH_SLAVE_TIMEOUT (RocketMQ uses the one key for both waits)
    sync_flush_timeout: int = 3000
    warm_mapped_file_enable: bool = True  # shmq: get commitlog pages into memory before the writer needs them
    # shmq: how far ahead of the commitlog writer pages are warmed (a segment size or more: whole segments)
    warm_ahead_size: int = 16 * 1024 * 1024
    # cleanup
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"  # hours of day, ";"-separated
    disk_max_used_space_ratio: int = 75  # percent: start cleaning expired files early
    disk_space_clean_forcibly_ratio: float = 0.85  # delete even unexpired segments
    disk_space_warning_level_ratio: float = 0.90  # refuse writes
    # shmq: False (RocketMQ: true): past diskSpaceCleanForciblyRatio, unexpired segments are deleted
    # only as far as every consumer group consumed them; True deletes unconsumed ones too (logged)
    clean_file_forcibly_enable: bool = False
    clean_resource_interval: int = 10_000  # ms
    delete_commit_log_files_interval: int = 100  # ms between two deletions
    delete_file_batch_max: int = 10
    # broker
    broker_name: str | None = None  # None: --name, else "default"
    broker_role: str = ASYNC_MASTER
    default_topic_queue_nums: int = 4
    auto_create_topic_enable: bool = True
    # SQL92 subscriptions (RocketMQ defaults both to false). enablePropertyFilter: shmq true, since
    # consumers evaluate filters in their own processes and a broker pays nothing for them;
    # false refuses groups that join with one. enableCalcFilterBitMap: false as in RocketMQ: the
    # bitmap moves filter evaluation onto the broker's single put path (every record of a topic
    # an SQL92 group subscribes to), worth it for selective filters read by many (docs/semantics.md)
    enable_property_filter: bool = True
    enable_calc_filter_bit_map: bool = False
    wait_time_mills_in_send_queue: int = 200
    flush_consumer_offset_interval: int = 5000  # ms
    store_host: int = 0  # shmq: 8-byte store host id written into records and offset msg ids
    # shmq: what one client process, and all clients together, may hold (channels are refused past these)
    max_clients_per_process: int = 64  # channels of one pid (each producer or consumer is one)
    max_channels: int = 1024  # attached clients in total (never more than the state segment's client table)
    max_ring_bytes_total: int = 4 * 1024 * 1024 * 1024  # shared memory of every channel together (both rings)
    # shmq: long polls (PULL_WAIT) one client may hold in all (past it: SYSTEM_BUSY) and on one
    # queue (past it: its oldest there is answered at once)
    max_pull_waiters_per_client: int = 16384
    max_pull_waiters_per_client_queue: int = 16
    # shmq: POP (SimpleConsumer): unacked messages one client may hold (past it a POP is refused
    # SYSTEM_BUSY), and the pop log's growth after which its live state is rewritten to a new file
    pop_max_inflight_per_client: int = 10000
    pop_log_compact_bytes: int = 64 * 1024 * 1024
    # delayed delivery: the delay of each level 1..n (units ms s m h d); the schedule topic has one queue per level
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    timer_max_delay_sec: int = 3 * 24 * 3600  # the furthest delivery time a message may ask for (RocketMQ 5)
    # transactions: a half message unresolved this long (ms) is checked with a producer of its group,
    # at most transactionCheckMax times, one check round every transactionCheckInterval (ms)
    transaction_time_out: int = 6000
    transaction_check_max: int = 15
    transaction_check_interval: int = 60_000
    # HA (docs/HA.md): the master's sender listens here (0: no sender); the replica connects to haMasterAddress
    ha_listen_port: int = 10912
    ha_listen_address: str = "127.0.0.1"  # shmq: loopback unless told (RocketMQ listens on every address)
    ha_master_address: str | None = None  # replica side: "host:port"
    # shmq: shared secret both sides prove with HMAC. Never empty in use: unset, it is read from
    # haAuthTokenFile, else from the store's config/ha.token (a master generates that file once)
    ha_auth_token: str = ""
    ha_auth_token_file: str | None = None  # shmq: a file (mode 0600) holding the token, e.g. a copy of the master's
    # ms: a replica reports (and the sender sends a heartbeat) at least this often
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20000  # ms: a connection silent this long is closed
    ha_transfer_batch_size: int = 32768  # bytes of log per frame
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024  # bytes: a replica further behind is not in sync
    ha_max_frame_size: int = 16 * 1024 * 1024  # shmq: the replica closes a connection sending a bigger frame
    ha_connect_timeout: int = 3000  # shmq, ms
    ha_reconnect_interval: int = 1000  # shmq, ms: first reconnect delay; doubles up to 10x while the master is away
    # shmq: group (name or gid) given read access to the store (folders 0750, files 0640), for
    # consumers running as other users of that group; None: the broker's user only (0700/0600)
    shm_group: str | None = None
    # cluster (docs/CLUSTER.md): the name server this broker registers with ("": standalone)
    namesrv_addr: str = ""
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0  # a replica's id under its master's brokerName (0: 1); a master registers as 0
    # shmq: the brokerName a replica registers under (its master's); every process on this host has a
    # name of its own, so a replica cannot share its master's brokerName as in RocketMQ
    master_broker_name: str | None = None

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
        if self.broker_name is not None:
            _check_name(self.broker_name)
        for key in ("namesrv_addr", "broker_cluster_name", "master_broker_name"):
            value = getattr(self, key)
            if value and not _BROKER_NAME.fullmatch(value):
                raise ConfigError(f"{camel(key)} {value!r}: use 1-64 letters, digits, '_' or '-'")
        if not self.broker_cluster_name:
            raise ConfigError("brokerClusterName must not be empty")
        if not 0 <= self.broker_id <= MAX_BROKER_ID:
            raise ConfigError(f"brokerId must be 0..{MAX_BROKER_ID}, got {self.broker_id}")
        if self.mapped_file_size_commit_log < 4096:
            raise ConfigError("mappedFileSizeCommitLog must be at least 4096 bytes")
        if self.mapped_file_size_consume_queue % 20 or self.mapped_file_size_consume_queue < 20:
            raise ConfigError("mappedFileSizeConsumeQueue must be a positive multiple of 20")
        if self.warm_ahead_size < 0:
            raise ConfigError("warmAheadSize must be 0 or more bytes")
        if self.max_pull_waiters_per_client < 1 or self.max_pull_waiters_per_client_queue < 1:
            raise ConfigError("maxPullWaitersPerClient and maxPullWaitersPerClientQueue must be positive")
        if self.pop_max_inflight_per_client < 1:
            raise ConfigError(f"popMaxInflightPerClient must be positive, got {self.pop_max_inflight_per_client}")
        if self.pop_log_compact_bytes < 4096:
            raise ConfigError(f"popLogCompactBytes must be at least 4096, got {self.pop_log_compact_bytes}")
        if self.max_hash_slot_num < 1 or self.max_index_num < 1:
            raise ConfigError("maxHashSlotNum and maxIndexNum must be positive")
        if not 0 < self.disk_space_warning_level_ratio <= 1 or not 0 < self.disk_space_clean_forcibly_ratio <= 1:
            raise ConfigError("disk space ratios are fractions in (0, 1]")
        if not 0 < self.disk_max_used_space_ratio <= 100:
            raise ConfigError("diskMaxUsedSpaceRatio is a percentage in (0, 100]")
        for key in ("max_clients_per_process", "max_channels", "max_ring_bytes_total"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{camel(key)} must be at least 1")
        if not 0 <= self.ha_listen_port <= 65535:
            raise ConfigError(f"haListenPort must be 0..65535, got {self.ha_listen_port}")
        if self.ha_master_address is not None:
            split_address(self.ha_master_address)
        if self.ha_auth_token and self.ha_auth_token_file:
            raise ConfigError("give one of haAuthToken and haAuthTokenFile, not both")
        for key in (
            "ha_send_heartbeat_interval",
            "ha_housekeeping_interval",
            "ha_transfer_batch_size",
            "ha_max_gap_not_in_sync",
            "ha_max_frame_size",
            "ha_connect_timeout",
            "ha_reconnect_interval",
            "sync_flush_timeout",
        ):
            if getattr(self, key) < 1:
                raise ConfigError(f"{camel(key)} must be at least 1")
        if self.ha_transfer_batch_size > self.ha_max_frame_size:
            raise ConfigError("haTransferBatchSize must not exceed haMaxFrameSize")
        delay_levels(self.message_delay_level)
        for key in (
            "timer_max_delay_sec",
            "transaction_time_out",
            "transaction_check_max",
            "transaction_check_interval",
        ):
            if getattr(self, key) < 1:
                raise ConfigError(f"{camel(key)} must be at least 1")
        for hour in self.delete_when.split(";"):
            if not hour.strip().isdigit() or not 0 <= int(hour) <= 23:
                raise ConfigError(f"deleteWhen takes hours 00-23 separated by ';', got {self.delete_when!r}")

    def check_role(self) -> None:
        """Refuse role settings that cannot keep their promise: a SYNC_MASTER without an HA sender
        could never have a send acknowledged by a replica, a SLAVE without a master to follow
        would serve a store that never changes."""
        if self.broker_role == SYNC_MASTER and self.ha_listen_port <= 0:
            raise ConfigError(
                "brokerRole=SYNC_MASTER needs haListenPort > 0: replicas acknowledge sends through the HA sender"
            )
        if self.broker_role == SLAVE and not self.ha_master_address:
            raise ConfigError("brokerRole=SLAVE needs haMasterAddress=host:port (or shmq replica --master)")
        if self.broker_role == SLAVE and self.namesrv_addr and not self.master_broker_name:
            raise ConfigError(
                "a replica in a cluster (namesrvAddr) needs masterBrokerName: the brokerName of the master it follows"
            )

    @property
    def is_master(self) -> bool:
        return self.broker_role != SLAVE

    def resolve_name(self, name: str | None) -> str:
        """The broker's name: ``name`` (``--name``), else ``brokerName``, else ``SHMQ_BROKER``,
        else ``default``: the environment variable clients find a broker by names it too.

        Both given and different is an error: clients would look for one name and find the other.
        """
        if name is not None and self.broker_name is not None and name != self.broker_name:
            raise ConfigError(
                f"--name {name!r} contradicts brokerName={self.broker_name!r} in the config; "
                "give one of them, or the same name in both"
            )
        return name if name is not None else self.broker_name or os.environ.get("SHMQ_BROKER") or "default"

    def group_id(self) -> int | None:
        """The gid of ``shmGroup`` (a group name or a number), None when unset."""
        if self.shm_group is None:
            return None
        if self.shm_group.isdigit():
            return int(self.shm_group)
        try:
            return grp.getgrnam(self.shm_group).gr_gid
        except KeyError:
            raise ConfigError(f"shmGroup {self.shm_group!r}: no such group") from None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> BrokerConfig:
        """Build from a mapping keyed by RocketMQ camelCase or snake_case names."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, raw in values.items():
            name = key if key in fields else ALIASES.get(key) or _snake(key)
            if key in NOT_SUPPORTED or camel(name) in NOT_SUPPORTED:
                raise ConfigError(f"config key {key!r} is not supported yet: {NOT_SUPPORTED[camel(name)]}")
            if name not in fields:
                raise ConfigError(f"unknown config key {key!r}")
            kwargs[name] = _coerce(fields[name], raw, key)
        return cls(**kwargs)

    @classmethod
    def load(cls, source: str | os.PathLike[str] | Mapping[str, Any] | BrokerConfig | None) -> BrokerConfig:
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
        """The config as a RocketMQ-style broker.conf (keys left unset are left out)."""
        return "".join(
            f"{camel(f.name)}={_render(getattr(self, f.name))}\n"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        )


# RocketMQ spellings that do not follow from our field names
ALIASES = {"warmMapedFileEnable": "warm_mapped_file_enable"}

# RocketMQ keys a config may name but shmq cannot honour yet: refused, never silently ignored
NOT_SUPPORTED = {
    "osPageCacheBusyTimeOutMills": "shmq's busy rule is waitTimeMillsInSendQueue (a send older than that "
    "when the broker reaches it is answered SYSTEM_BUSY)",
}


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
MAX_DELAY_LEVELS = 64


def delay_levels(text: str) -> list[int]:
    """The delays of ``messageDelayLevel`` in ms, level 1 first ("1s 5s 100ms 2h"); ConfigError if malformed."""
    levels = []
    for word in text.split():
        m = _DURATION.fullmatch(word)
        if m is None:
            raise ConfigError(f"messageDelayLevel: {word!r} is not a duration like 100ms, 5s, 1m, 2h or 1d")
        levels.append(int(float(m.group(1)) * _UNIT_MS[m.group(2)]))
    if not 1 <= len(levels) <= MAX_DELAY_LEVELS:
        raise ConfigError(f"messageDelayLevel must name 1..{MAX_DELAY_LEVELS} levels, got {len(levels)}")
    if any(ms < 1 for ms in levels):
        raise ConfigError("messageDelayLevel: every level must be at least 1 ms")
    return levels


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as (host, port); ConfigError if it is not one."""
    host, sep, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ConfigError(f"haMasterAddress must be host:port, got {address!r}")
    return host, int(port)


def _check_name(name: str) -> None:
    """brokerName must be usable in IPC names (the rule of shmq.ring.shm.check_broker_name)."""
    if not _BROKER_NAME.fullmatch(name):
        raise ConfigError(f"brokerName {name!r}: use 1-64 letters, digits, '_' or '-'")


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


_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool, "str": str, "str | None": str}


def _coerce(f: dataclasses.Field[Any], raw: Any, key: str) -> Any:
    kind = f.type if isinstance(f.type, type) else _TYPES[str(f.type)]
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
