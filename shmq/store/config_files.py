"""JSON files under DIR/config/ (topics, consumer offsets, delay offsets), written atomically.

Write to a temp file, fsync, rename over the old one, fsync the folder: a crash leaves either
the old or the new file, never a torn one. The previous version is kept as `<name>.bak` so a
file damaged by other means can still be read.
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from shmq.store import files


def write_json(path: str, data: Any) -> None:
    """Replace ``path`` atomically; the temp file is private like the file it becomes (store.files)."""
    directory = os.path.dirname(path) or "."
    files.make_dirs(directory)
    tmp = f"{path}.tmp"
    try:
        with os.fdopen(files.open_file(tmp, os.O_WRONLY | os.O_TRUNC)[0], "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:  # a full disk: the old file stays, the torn copy goes
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if os.path.exists(path):
        os.replace(path, f"{path}.bak")
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_json(path: str, default: Any = None) -> Any:
    """The file's content; falls back to `<name>.bak`, then to `default`."""
    for candidate in (path, f"{path}.bak"):
        try:
            with open(candidate, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            continue
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
    return default
