"""What the HA sender tells a replica besides the log: the epoch list and config files.

Read from the master's store (``config/epochs.json``, ``config/topics.json``,
``config/consumerOffset.json``, and the progress files of the delay, timer, transaction-check and
DLQ-resend services), which the broker writes atomically (rename), so a read sees a whole old or
a whole new file.
"""

from __future__ import annotations

import logging
import os

from shmq.errors import MetadataError
from shmq.ha import protocol as P
from shmq.store.epochs import EpochFile

log = logging.getLogger("shmq.ha")
FILES = ((P.META_TOPICS, "topics.json"), (P.META_OFFSETS, "consumerOffset.json"), *P.PROGRESS_FILES.items())


def load_epochs(store_dir: str) -> list[P.Epoch]:
    """The master's epoch list, read as the store writes it (``EpochFile``); [] if the file is
    absent or damaged (logged: a replica with data then cannot prove shared history and refuses,
    which is the safe side)."""
    try:
        return EpochFile(store_dir).entries
    except (MetadataError, OSError) as e:
        log.error("%s: replicas are told of no epochs", e)
        return []


class MetadataWatcher:
    """Metadata frames of the config files, re-read when a file's identity or mtime changes."""

    def __init__(self, store_dir: str, max_frame: int) -> None:
        self._dir = os.path.join(store_dir, "config")
        self._max_frame = max_frame
        self._seen: dict[int, tuple[int, int, int]] = {}
        self.frames: dict[int, bytes] = {}  # kind -> the whole current frame

    def check(self) -> list[bytes]:
        """Frames of the files that changed since the last check (all of them the first time)."""
        changed = []
        for kind, name in FILES:
            path = os.path.join(self._dir, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            ident = (st.st_ino, st.st_mtime_ns, st.st_size)
            if self._seen.get(kind) == ident:
                continue
            self._seen[kind] = ident
            try:
                with open(path, "rb") as f:
                    text = f.read()
            except OSError as e:
                log.warning("cannot read %s for the replicas: %s", path, e)
                continue
            if 1 + len(text) > self._max_frame:
                log.warning("%s is %d bytes, more than haMaxFrameSize allows: not sent to replicas", path, len(text))
                continue
            frame = P.encode_metadata(kind, text)
            self.frames[kind] = frame
            changed.append(frame)
        return changed
