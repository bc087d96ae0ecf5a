"""Consumer offsets kept on the client: the next queue offset to consume, per topic and queue.

`OffsetTable` is the in-memory table every consumer updates as messages are processed; a
clustering consumer commits what changed (`take_dirty`) to the broker, which persists it.
`LocalFileOffsetStore` adds a JSON file for BROADCASTING consumers, whose offsets are their
own (RocketMQ's LocalFileOffsetStore): `~/.shmq/offsets/<broker>/<instance>/<group>.json` by default.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
import threading

from shmq.codec import record as fmt
from shmq.errors import BadArgumentError
from shmq.store import config_files

QueueKey = tuple[str, int]
MAKE_DIR_TRIES = 5  # a folder another member removes as we write in it is made again this often

_instances = itertools.count(1)  # default instance names: unique per consumer object in this process


def instance_name(name: str | None) -> tuple[str, bool]:
    """A broadcasting member's instance name and whether it was made up here. Without a name (or
    with RocketMQ's "DEFAULT") it is ``<pid>-<n>``, unique per consumer object (RocketMQ uses the
    pid), so members on one host never share a file; such a file dies with its consumer."""
    if name in (None, "DEFAULT"):
        return f"{os.getpid()}-{next(_instances)}", True
    return str(name), False


class OffsetTable:
    """Thread-safe (topic, queue id) -> next offset, remembering which entries changed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets: dict[QueueKey, int] = {}
        self._dirty: set[QueueKey] = set()

    def update(self, topic: str, queue_id: int, offset: int, increase_only: bool = False) -> bool:
        """Set the offset; with `increase_only` a lower value is ignored (a late ack of an old batch).

        Returns whether the table changed.
        """
        if offset < 0:
            raise BadArgumentError(f"offset must be >= 0, got {offset}")
        key = (topic, queue_id)
        with self._lock:
            old = self._offsets.get(key)
            if old == offset or (increase_only and old is not None and offset < old):
                return False
            self._offsets[key] = offset
            self._dirty.add(key)
            return True

    def read(self, topic: str, queue_id: int) -> int:
        """The stored offset, or -1 if none (RocketMQ's readOffset convention)."""
        with self._lock:
            return self._offsets.get((topic, queue_id), -1)

    def remove(self, topic: str, queue_id: int) -> None:
        """Forget a queue this consumer no longer owns (after a rebalance)."""
        with self._lock:
            self._offsets.pop((topic, queue_id), None)
            self._dirty.discard((topic, queue_id))

    def snapshot(self) -> dict[QueueKey, int]:
        with self._lock:
            return dict(self._offsets)

    def take_dirty(self) -> dict[QueueKey, int]:
        """Entries changed since the last call, which the caller now commits."""
        with self._lock:
            out = {k: self._offsets[k] for k in self._dirty}
            self._dirty.clear()
            return out

    def __len__(self) -> int:
        return len(self._offsets)


def default_offset_dir(broker: str) -> str:
    return os.path.join(os.path.expanduser("~"), ".shmq", "offsets", broker)


def _default_dirs(broker: str) -> list[str]:
    """The folders of the default place, innermost first: ``~/.shmq/offsets/<broker>``, then
    ``~/.shmq/offsets`` and ``~/.shmq``."""
    inner = default_offset_dir(broker)
    return [inner, os.path.dirname(inner), os.path.dirname(os.path.dirname(inner))]


class LocalFileOffsetStore(OffsetTable):
    """An OffsetTable persisted to one JSON file per consumer group and instance:
    ``<directory>/<instance>/<group>.json`` (RocketMQ keys it by client id and group too), so
    two members of one broadcasting group never share a file. Each write goes to a fresh
    temp file in the same folder (``mkstemp``: no name two writers can share), is fsynced and
    renamed over the file; the previous version stays as ``<group>.json.bak``."""

    def __init__(self, group: str, instance: str, broker: str = "default", directory: str | None = None) -> None:
        super().__init__()
        for name, what in ((group, "consumer group"), (instance, "instance name"), (broker, "broker name")):
            if not fmt.TOPIC_PATTERN.match(name or ""):
                raise BadArgumentError(f"{what} {name!r} must match [%|a-zA-Z0-9_-]+ (it names a file)")
        self.group = group
        self.instance = instance
        self.path = os.path.join(directory or default_offset_dir(broker), instance, f"{group}.json")
        # folders ``delete`` removes once empty: the instance's, and the default place's (shmq made
        # them); a directory the user gave stays
        self._made_dirs = [os.path.dirname(self.path)] + (_default_dirs(broker) if directory is None else [])
        self._persist_lock = threading.Lock()

    def load(self) -> None:
        """Read the file (or its backup); a missing file means a member that never consumed."""
        data = config_files.read_json(self.path, default={}) or {}
        for topic, queues in data.get("offsets", {}).items():
            for qid, offset in queues.items():
                self.update(topic, int(qid), int(offset))
        self.take_dirty()

    def persist(self) -> None:
        """Write the whole table if anything changed since the last persist."""
        with self._persist_lock:
            changed = self.take_dirty()
            if not changed:
                return
            table: dict[str, dict[str, int]] = {}
            for (topic, qid), offset in sorted(self.snapshot().items()):
                table.setdefault(topic, {})[str(qid)] = offset
            try:
                _write_atomically(self.path, {"group": self.group, "instance": self.instance, "offsets": table})
            except BaseException:
                with self._lock:
                    self._dirty.update(changed)
                raise

    def delete(self) -> None:
        """Remove the file, its backup and the folders shmq made for it that are then empty (the
        instance's; with the default place also ``~/.shmq/offsets/<broker>`` and up): for a member
        whose instance name dies with its process (the default), nobody reads it again."""
        with self._persist_lock:
            for p in (self.path, f"{self.path}.bak"):
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
            for directory in self._made_dirs:
                try:
                    os.rmdir(directory)
                except FileNotFoundError:  # gone already: its parent may be empty now
                    continue
                except OSError:  # another instance's or group's file is there
                    break


def _temp_file(directory: str, prefix: str) -> tuple[int, str]:
    """A new temp file in ``directory``, made if missing. Another member's ``delete`` may remove
    the folder, once empty, between the two steps: then it is made again."""
    for _ in range(MAKE_DIR_TRIES - 1):
        os.makedirs(directory, exist_ok=True)
        try:
            return tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
        except FileNotFoundError:
            continue
    os.makedirs(directory, exist_ok=True)
    return tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)


def _write_atomically(path: str, data: object) -> None:
    directory = os.path.dirname(path)
    fd, tmp = _temp_file(directory, f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.replace(path, f"{path}.bak")
        except FileNotFoundError:  # the first write (or another writer of this path just moved it)
            pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
