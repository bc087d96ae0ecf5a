"""Which stores a `shmq` read covers: the one store a path names, or every store under a
cluster's store root. No Spark here (tested alone).

A store is a directory with a `commitlog/` folder, or with a `checkpoint` file (a broker
writes it before its first message). A store root (`shmq cluster --store-root DIR`) is a
directory that is not a store itself and holds stores as subdirectories, one per broker. A
master's store does not record the broker's name, so a root's store is named by its
subdirectory: the launcher names each one after its broker. Other subdirectories (a log
folder, `lost+found`) are not stores and are left out; a directory that holds no store at any
of the two levels is refused with the single store's error.

A root is listed again each time `stores()` is called, so a streaming query sees the brokers
started under it after the query began.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from shmq.errors import NotAStoreError


def is_store(path: str) -> bool:
    """Does `path` hold a shmq store (made by a broker, possibly still empty)?"""
    return os.path.isdir(os.path.join(path, "commitlog")) or os.path.isfile(os.path.join(path, "checkpoint"))


@dataclass(frozen=True, slots=True)
class StoreRef:
    """One store a read covers; `broker` is None when the read names a single store (its rows
    then have no `broker` column)."""

    broker: str | None
    path: str


@dataclass(frozen=True, slots=True)
class StoreSet:
    """What a read's path names: one store (`is_root` False) or a root of stores."""

    path: str
    is_root: bool

    def stores(self, brokers: Iterable[str] | None = None) -> list[StoreRef]:
        """The stores now present, sorted by broker name; only the `brokers` named when given."""
        if not self.is_root:
            return [StoreRef(None, self.path)]
        return [StoreRef(b, os.path.join(self.path, b)) for b in select_brokers(root_brokers(self.path), brokers)]


def root_brokers(root: str) -> list[str]:
    """The names of the subdirectories of `root` that are stores, sorted."""
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(n for n in names if os.path.isdir(os.path.join(root, n)) and is_store(os.path.join(root, n)))


def select_brokers(present: Iterable[str], wanted: Iterable[str] | None) -> list[str]:
    """The brokers of `present` a read covers: all, or those also in `wanted`. Pure."""
    have = sorted(set(present))
    if wanted is None:
        return have
    keep = set(wanted)
    return [b for b in have if b in keep]


def open_stores(path: str) -> StoreSet:
    """The store or root of stores at `path`; NotAStoreError (one line) when it is neither."""
    full = os.path.abspath(path)
    if not os.path.isdir(full):
        raise NotAStoreError(f"{path!r} is not a shmq store: no such directory")
    if is_store(full):
        return StoreSet(full, False)
    if root_brokers(full):
        return StoreSet(full, True)
    raise NotAStoreError(
        f"{path!r} is not a shmq store: it has no commitlog/ directory nor checkpoint file, nor subdirectories "
        "that are stores (give the directory a broker was started with, `shmq broker --store DIR`, or a "
        "cluster's store root, `shmq cluster --store-root DIR`)"
    )


def parse_broker_option(value: str | None) -> list[str] | None:
    """The `broker` option: a comma list of broker names (blanks ignored); None when absent or empty."""
    if value is None:
        return None
    return [b.strip() for b in value.split(",") if b.strip()] or None
