"""The name a replica serves under, kept in its store (``config/replica.json``).

Clients of a replica know it by its broker name; when it is promoted they must find the new
master under that same name. The replica records the name at every start, so ``shmq admin
promote --store DIR`` can start the master under it without being told (and a replica that
is no longer running, or whose config is lost, still says what it was).
"""

from __future__ import annotations

import os

from shmq.store.config_files import load_json, write_json

RECORD = os.path.join("config", "replica.json")


def record_served_name(store_dir: str, name: str, master: str | None) -> None:
    """Write (atomically, durably) that ``store_dir`` is served as replica ``name`` of ``master``."""
    write_json(os.path.join(store_dir, RECORD), {"brokerName": name, "haMasterAddress": master})


def _check(data: object) -> None:
    if not isinstance(data, dict) or not isinstance(data.get("brokerName"), str) or not data["brokerName"]:
        raise ValueError(f'expected {{"brokerName": NAME, ...}}, got {data!r}')


def served_name(store_dir: str) -> str | None:
    """The name recorded by the last replica start on ``store_dir``; None if none was recorded
    (or neither copy of the record is readable)."""
    loaded = load_json(os.path.join(store_dir, RECORD), _check)
    return loaded.data["brokerName"] if loaded.data is not None else None
