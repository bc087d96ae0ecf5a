"""JSON files under DIR/config/ (topics, consumer offsets, delay offsets), written atomically.

Write to a temp file, fsync, rename over the old one, fsync the folder: a crash leaves either
the old or the new file, never a torn one. The previous version is kept as `<name>.bak` so a
file damaged by other means can still be read.
"""
from __future__ import annotations

import json
import os
from typing import Any


def write_json(path: str, data: Any) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
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
