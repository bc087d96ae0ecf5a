"""What each key of `BrokerConfig` means: the table the configuration reference of the docs
site is rendered from (docs/hooks.py), so the page lists exactly the keys the code accepts.

Names, types and defaults come from the dataclass itself; this table adds what the code cannot
say: the unit, which part of shmq acts on the key, and what it does (Markdown, one sentence or
two). tests/test_config.py fails when a field of `BrokerConfig` has no entry here, or an entry
names no field.
"""

from __future__ import annotations

from typing import NamedTuple


class KeyDoc(NamedTuple):
    """One key's documentation: `unit` (ms, bytes, bool...; "" when none), `read_by` (the store,
    the broker process, the HA sender, the replica, the command line), `meaning` (Markdown)."""

    unit: str
    read_by: str
    meaning: str


KEY_DOCS: dict[str, KeyDoc] = {
    "mapped_file_size_commit_log": KeyDoc("bytes", "store", "size of each commitlog segment (RocketMQ: 1 GiB)"),
    "mapped_file_size_consume_queue": KeyDoc(
        "bytes", "store", "size of each consume-queue file (300,000 entries of 20 bytes; sparse)"
    ),
    "max_hash_slot_num": KeyDoc("slots", "store", "hash slots per index file"),
    "max_index_num": KeyDoc("entries", "store", "entries per index file (one fewer is usable)"),
    "message_index_enable": KeyDoc("bool", "store", "keep the key index (`index/`); off = no key queries"),
    "max_message_size": KeyDoc("bytes", "store", "largest message body accepted"),
    "flush_disk_type": KeyDoc("enum", "store", "ASYNC_FLUSH or SYNC_FLUSH"),
    "flush_interval_commit_log": KeyDoc("ms", "store", "ASYNC_FLUSH: how often the flush thread wakes"),
    "flush_commit_log_least_pages": KeyDoc("pages", "store", "ASYNC_FLUSH: flush only once this many pages are dirty"),
    "flush_commit_log_thorough_interval": KeyDoc(
        "ms", "store", "ASYNC_FLUSH: flush whatever is dirty at least this often"
    ),
    "flush_interval_consume_queue": KeyDoc("ms", "store", "how often consume queues, index and checkpoint are flushed"),
    "flush_consume_queue_least_pages": KeyDoc(
        "pages", "store", "a consume queue is flushed in a round only with at least this many dirty pages"
    ),
    "flush_consume_queue_thorough_interval": KeyDoc(
        "ms",
        "store",
        "at least this often every queue is flushed whatever its dirty pages, and only then does the "
        "checkpoint advance",
    ),
    "sync_flush_timeout": KeyDoc(
        "ms",
        "store, broker process",
        "SYNC_FLUSH: a put waiting longer gets FLUSH_DISK_TIMEOUT; SYNC_MASTER: a send no replica "
        "acknowledged by then gets FLUSH_SLAVE_TIMEOUT (one key for both waits, as in RocketMQ)",
    ),
    "warm_mapped_file_enable": KeyDoc(
        "bool",
        "store",
        "get commitlog pages into memory before the writer needs them (RocketMQ's spelling "
        "`warmMapedFileEnable` is accepted too)",
    ),
    "warm_ahead_size": KeyDoc(
        "bytes",
        "store",
        "how far ahead of the commitlog writer pages are warmed; a segment size or more warms whole "
        "segments ahead (shmq only)",
    ),
    "file_reserved_time": KeyDoc("hours", "store", "commitlog segments older than this (by file mtime) are expired"),
    "delete_when": KeyDoc(
        "hours", "store", 'local hours (`;`-separated, e.g. `"03;15"`) at which expired segments are deleted'
    ),
    "disk_max_used_space_ratio": KeyDoc("percent", "store", "above this, expired segments are deleted at any hour"),
    "disk_space_clean_forcibly_ratio": KeyDoc(
        "fraction", "store", "above this, the oldest segments are deleted even if not expired"
    ),
    "disk_space_warning_level_ratio": KeyDoc("fraction", "store", "above this, writes are refused (DiskFullError)"),
    "clean_file_forcibly_enable": KeyDoc(
        "bool",
        "store",
        "forced cleanup may delete unexpired segments that a group has not consumed, logging what was "
        "lost (RocketMQ's default is true)",
    ),
    "clean_resource_interval": KeyDoc("ms", "store", "how often the cleanup service measures the disk and deletes"),
    "delete_commit_log_files_interval": KeyDoc("ms", "store", "pause between two segment deletions in one round"),
    "delete_file_batch_max": KeyDoc("files", "store", "most segments deleted in one round"),
    "broker_name": KeyDoc(
        "",
        "command line, launcher",
        "the broker's name (prefixes shared-memory names) when `--name` / `Broker(name=...)` is not "
        "given; unset and no `--name`: `default`; both given and different: the broker refuses to "
        "start",
    ),
    "broker_role": KeyDoc(
        "enum",
        "broker process",
        "ASYNC_MASTER, SYNC_MASTER (needs `haListenPort` > 0) or SLAVE (a replica; needs `haMasterAddress`)",
    ),
    "default_topic_queue_nums": KeyDoc("queues", "broker process", "queues of an auto-created topic"),
    "auto_create_topic_enable": KeyDoc("bool", "broker process", "create a topic on its first send"),
    "enable_property_filter": KeyDoc(
        "bool",
        "broker process",
        "accept consumer groups that subscribe with SQL92 (`shmq.sql(...)`); false refuses them at "
        "join (RocketMQ: false)",
    ),
    "enable_calc_filter_bit_map": KeyDoc(
        "bool",
        "broker process",
        "compute each SQL92 group's filter at dispatch into the consume-queue extension "
        "(`consumequeue_ext/`), so its consumers skip non-matching messages unread",
    ),
    "wait_time_mills_in_send_queue": KeyDoc("ms", "broker process", "a send waiting longer is rejected as busy"),
    "flush_consumer_offset_interval": KeyDoc(
        "ms",
        "broker process",
        "how often committed consumer offsets are written to `config/`; also when the delay, timer "
        "and transaction progress files are fsynced",
    ),
    "store_host": KeyDoc("id", "store", "8-byte id written into STOREHOST and offset message ids (shmq only)"),
    "max_clients_per_process": KeyDoc(
        "channels", "broker process", "channels one client process may hold; an attach past it is refused"
    ),
    "max_channels": KeyDoc(
        "clients", "broker process", "attached clients in total (capped by the state segment's client table, 1,024)"
    ),
    "max_ring_bytes_total": KeyDoc(
        "bytes", "broker process", "shared memory of all channels together, both rings of each"
    ),
    "max_pull_waiters_per_client": KeyDoc(
        "long polls",
        "broker process",
        "long polls one client may hold in all; past it a new one is answered SYSTEM_BUSY",
    ),
    "max_pull_waiters_per_client_queue": KeyDoc(
        "long polls",
        "broker process",
        "long polls one client may hold on one queue; one more answers its oldest there at once",
    ),
    "pop_max_inflight_per_client": KeyDoc(
        "messages",
        "broker process",
        "unacked POP messages one client may hold; past it a receive is answered SYSTEM_BUSY",
    ),
    "pop_log_compact_bytes": KeyDoc(
        "bytes", "broker process", "growth of the pop log after which its live state is rewritten to a new file"
    ),
    "message_delay_level": KeyDoc(
        "durations",
        "broker process",
        "the delay of each level of `Message(delay_level=n)`, level 1 first (units ms s m h d, 1..64 "
        "levels); `SCHEDULE_TOPIC_XXXX` has one queue per level",
    ),
    "timer_max_delay_sec": KeyDoc(
        "s",
        "broker process",
        "the furthest a message may ask to be delivered (`deliver_at` / `delay`); further is refused "
        "(MESSAGE_ILLEGAL). Keep `fileReservedTime` above it",
    ),
    "transaction_time_out": KeyDoc(
        "ms",
        "broker process",
        "a half message unresolved this long (since it was stored) is checked with a live transaction "
        "producer of its group",
    ),
    "transaction_check_max": KeyDoc(
        "checks", "broker process", "checks of one half message before it is discarded (logged)"
    ),
    "transaction_check_interval": KeyDoc("ms", "broker process", "how often the transaction check service runs"),
    "ha_listen_port": KeyDoc("port", "broker process, HA sender", "a master's HA sender listens here; 0: no sender"),
    "ha_listen_address": KeyDoc(
        "address", "HA sender", "where the HA sender listens; loopback unless told (RocketMQ listens on every address)"
    ),
    "ha_master_address": KeyDoc(
        "host:port", "replica", "the master a replica follows (`shmq replica --master` sets it)"
    ),
    "ha_auth_token": KeyDoc(
        "secret",
        "HA sender, replica",
        "shared secret both sides prove with HMAC over fresh nonces before any log byte moves. Never "
        "empty in use: unset, the token comes from `haAuthTokenFile`, else from the store's "
        "`config/ha.token`, which a master generates once (mode 0600) and a replica must be given (a "
        "copy of its master's); a replica with no token refuses to start",
    ),
    "ha_auth_token_file": KeyDoc(
        "path",
        "HA sender, replica",
        "a file holding the token instead of `haAuthToken` (not both); refused if other users can "
        "read it (chmod 600) (shmq only)",
    ),
    "ha_send_heartbeat_interval": KeyDoc(
        "ms",
        "HA sender, replica",
        "a replica reports its offset, and an idle sender sends a heartbeat frame, at least this often",
    ),
    "ha_housekeeping_interval": KeyDoc(
        "ms", "HA sender, replica", "a connection silent this long is closed (either side)"
    ),
    "ha_transfer_batch_size": KeyDoc("bytes", "HA sender", "most log bytes in one frame"),
    "ha_max_gap_not_in_sync": KeyDoc(
        "bytes",
        "broker process",
        "a replica further behind than this is not in sync: SYNC_MASTER sends get SLAVE_NOT_AVAILABLE",
    ),
    "ha_max_frame_size": KeyDoc(
        "bytes", "replica", "a replica closes a connection that announces a bigger frame (shmq only)"
    ),
    "ha_connect_timeout": KeyDoc("ms", "replica", "a replica's connect attempt gives up after this (shmq only)"),
    "ha_reconnect_interval": KeyDoc(
        "ms",
        "replica",
        "first delay before a replica reconnects; doubles up to 10x while the master stays away (shmq only)",
    ),
    "shm_group": KeyDoc(
        "group name or gid",
        "store",
        "group given read access to the store (folders 02750, files 0640) for consumers running as "
        "other users; unset: the broker's user only (0700/0600). Shared-memory objects stay 0600 for "
        "now",
    ),
    "namesrv_addr": KeyDoc(
        "name",
        "broker process",
        "the name server (on this host) the broker registers with, its topics included; empty: a "
        "standalone broker. A name server that is not running does not stop the broker: it registers "
        "once one serves, and again whenever one restarts",
    ),
    "broker_cluster_name": KeyDoc("name", "broker process", "the cluster the broker registers in"),
    "broker_id": KeyDoc(
        "",
        "broker process",
        "a replica's id under its master's broker name (>= 1; 0 registers as 1); a master always registers as 0",
    ),
    "master_broker_name": KeyDoc(
        "name",
        "broker process",
        "the broker name a replica registers under: its master's (required for a replica with "
        "`namesrvAddr`); a master with it set (a promoted replica) takes that broker name over (shmq only)",
    ),
}
