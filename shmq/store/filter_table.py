"""consumerFilter.json: the SQL92 filter bitmap's generations, which (topic, group, expression)
each one evaluated. Written by the broker's bitmap dispatcher (``shmq.store.write.filter_bitmap``), read
by consumers (``shmq.store.read.filter_bitmap``): the one format both sides share."""

from __future__ import annotations

import os

FILTER_TABLE = "consumerFilter.json"
KEEP_GENERATIONS = 256  # generations the table remembers (older entries read as "not computed")

Subscription = tuple[str, str, str]  # (topic, group, SQL92 expression)


def table_path(store_dir: str) -> str:
    return os.path.join(store_dir, "config", FILTER_TABLE)


def parse_table(data: object) -> tuple[int, dict[int, frozenset[Subscription]]]:
    """consumerFilter.json: ``{"generation": g, "generations": {"g": [[topic, group, expr], ...]}}``."""
    if (
        not isinstance(data, dict)
        or type(data.get("generation")) is not int
        or not isinstance(data.get("generations"), dict)
    ):
        raise ValueError('not a {"generation": int, "generations": {...}} object')
    out: dict[int, frozenset[Subscription]] = {}
    for key, subs in data["generations"].items():
        if not isinstance(subs, list) or not all(
            isinstance(s, list) and len(s) == 3 and all(isinstance(x, str) for x in s) for s in subs
        ):
            raise ValueError(f"generation {key!r:.20} is not a list of [topic, group, expression]")
        out[int(key)] = frozenset((t, g, e) for t, g, e in subs)
    if not 0 <= data["generation"] < 2**32 or any(not 0 < g <= data["generation"] for g in out):
        raise ValueError("generation numbers out of range")
    return data["generation"], out
