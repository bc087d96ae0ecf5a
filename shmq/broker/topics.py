"""TopicConfigManager: the broker's topic table (queues, perms), persisted as config/topics.json.

The table is rebuilt from the store when it cannot be read: every loaded value is checked, a
damaged file or entry is logged as an error with what replaced it, and topics the store holds
messages for get an entry from their consume queues. Topic config can always be rebuilt, so a
damaged topics.json never stops the broker from starting.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from shmq.codec import record as fmt
from shmq.model.perm import PERM_INHERIT, PERM_READ, PERM_RW, PERM_WRITE
from shmq.store.config_files import load_json, set_aside, write_json

log = logging.getLogger("shmq.broker")

MAX_QUEUE_NUMS = 1024


@dataclass
class TopicConfig:
    """RocketMQ's TopicConfig: queue counts for readers and writers, a perm bit set, and ``order``
    (an ordered topic: every POP group takes a queue's messages one delivery at a time, as a FIFO
    group does)."""

    name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_RW
    order: bool = False
    _next_queue: int = 0

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    def next_queue(self) -> int:
        """Round robin over the write queues, for sends that leave the choice to the broker."""
        q = self._next_queue % self.write_queue_nums
        self._next_queue = q + 1
        return q

    def to_json(self) -> dict[str, str | int]:
        return {
            "topicName": self.name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "order": self.order,
        }


def _is_int(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool)


def _check_nums(read: int, write: int, perm: int) -> None:
    for what, n in (("readQueueNums", read), ("writeQueueNums", write)):
        if not _is_int(n) or not 1 <= n <= MAX_QUEUE_NUMS:
            raise ValueError(f"{what} must be an int in 1..{MAX_QUEUE_NUMS}, got {n!r}")
    if not _is_int(perm) or perm & ~(PERM_RW | PERM_INHERIT):
        raise ValueError(f"perm must be a combination of 4 (read), 2 (write), 1 (inherit), got {perm!r}")


def _check_file(data: Any) -> None:
    """The shape of topics.json; single entries are checked one by one (``topic_from_json``)."""
    if not isinstance(data, dict) or not isinstance(data.get("topicConfigTable", {}), dict):
        raise ValueError('not a {"topicConfigTable": {...}} object')


def topic_from_json(name: str, entry: Any) -> TopicConfig:
    """One entry of topics.json with every value checked (the same rules as an admin update)."""
    fmt.check_topic(name)
    if not isinstance(entry, dict):
        raise ValueError(f"entry is not an object: {entry!r:.60}")
    if entry.get("topicName", name) != name:
        raise ValueError(f"topicName {entry.get('topicName')!r:.60} differs from its key")
    read, write, perm = entry.get("readQueueNums"), entry.get("writeQueueNums"), entry.get("perm")
    _check_nums(read, write, perm)  # type: ignore[arg-type]
    order = entry.get("order", False)
    if not isinstance(order, bool):
        raise ValueError(f"order must be true or false, got {order!r:.40}")
    return TopicConfig(name, read, write, perm, order)  # type: ignore[arg-type]


class TopicConfigManager:
    """Topics by name; a change is written to disk before it is acknowledged. A topic created on
    its first send (``persist=False``) is written by the broker once for all topics created in a
    pass, before any answer of that pass goes out."""

    def __init__(self, store_dir: str, default_queue_nums: int = 4) -> None:
        self.path = os.path.join(store_dir, "config", "topics.json")
        self.default_queue_nums = default_queue_nums
        self.topics: dict[str, TopicConfig] = {}
        self.dirty = False  # created without persisting: the broker persists before it answers
        loaded = load_json(self.path, _check_file)
        # what could not be used, each with what was done instead; ``repair`` logs them
        self.problems = [f"{p}; not used" for p in loaded.problems]
        self.source = loaded.source
        for name, entry in ((loaded.data or {}).get("topicConfigTable") or {}).items():
            try:
                self.topics[name] = topic_from_json(name, entry)
            except (ValueError, TypeError) as e:
                self.problems.append(f"{loaded.source}: topic {name!r:.140}: {e}; entry dropped")

    def get(self, name: str) -> TopicConfig | None:
        return self.topics.get(name)

    def create_or_update(
        self,
        name: str,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        persist: bool = True,
        order: bool | None = None,
    ) -> TopicConfig:
        """RocketMQ's updateTopic: create the topic, or change its queue counts, perm and order.

        ``persist=False`` (auto-create) leaves the write to the caller: the whole table is
        rewritten each time, and with thousands of topics created one by one that was most of
        the cost of creating one (measured 2 ms per topic at 300 topics, growing with the table)."""
        fmt.check_topic(name)
        old = self.topics.get(name)
        read = (
            read_queue_nums
            if read_queue_nums is not None
            else (old.read_queue_nums if old else self.default_queue_nums)
        )
        write = (
            write_queue_nums
            if write_queue_nums is not None
            else (old.write_queue_nums if old else self.default_queue_nums)
        )
        p = perm if perm is not None else (old.perm if old else PERM_RW)
        _check_nums(read, write, p)
        o = order if order is not None else (old.order if old else False)
        tc = TopicConfig(name, read, write, p, o)
        self.topics[name] = tc
        if persist:
            self.persist()
        else:
            self.dirty = True
        return tc

    def repair(self, queues: dict[str, list[int]]) -> list[str]:
        """After loading: give a config entry to each topic that has consume queues but none (a
        topic auto-created by a broker that died before writing topics.json, or one whose entry
        or whole file was damaged), log loudly what was damaged and what replaced it, and write
        the repaired table (the damaged file is kept as ``topics.json.damaged``). A rebuilt
        topic's queue count is what auto-creation gives, or more if a higher queue id was
        written; its perm is read-write. Returns the rebuilt topics."""
        missing = [
            t
            for t in sorted(queues)
            if t not in self.topics and len(t) <= fmt.MAX_TOPIC_LENGTH and fmt.TOPIC_PATTERN.match(t)
        ]
        for name in missing:
            n = min(MAX_QUEUE_NUMS, max(self.default_queue_nums, max(queues[name]) + 1))
            self.topics[name] = TopicConfig(name, n, n, PERM_RW)
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        if self.problems:
            used = (
                f"loaded {len(self.topics) - len(missing)} topics from {self.source}"
                if self.source
                else "no readable copy"
            )
            log.error(
                "topic config damaged: %s. Done instead: %s, rebuilt %d from the consume queues%s",
                " | ".join(self.problems[:10]),
                used,
                len(missing),
                f" ({shown})" if missing else "",
            )
            if self.source != self.path:  # the newest copy is unusable: keep it for inspection
                aside = set_aside(self.path)
                if aside:
                    log.error("damaged %s kept as %s", self.path, aside)
        elif missing:
            log.warning(
                "rebuilt the config of %d topics that had messages but no entry in topics.json: %s", len(missing), shown
            )
        if missing or self.problems:
            self.persist()
            self.problems = []
        return missing

    def delete(self, name: str) -> bool:
        if self.topics.pop(name, None) is None:
            return False
        self.persist()
        return True

    def persist(self) -> None:
        write_json(self.path, {"topicConfigTable": {n: t.to_json() for n, t in sorted(self.topics.items())}})
        self.dirty = False
