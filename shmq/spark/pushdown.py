"""Filters Spark pushes down, turned into what a scan plans with: which topics and queues, and
which queue offsets and store times. Pure: no files, no Spark session.

A filter is accepted only when the scan then applies it exactly (Spark does not evaluate an
accepted filter again): broker (a store root's column) chooses stores, topic and queue_id
choose queues, queue_offset cuts each queue's range, and store_timestamp cuts it too (store
times never decrease along a queue, so a time bound is an offset bound found by binary search)
and is also checked row by row when the batch is built.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import EqualTo, Filter, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual, Not

_COMPARISONS = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
_NO_LIMIT = 1 << 62
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True, slots=True)
class ScanBounds:
    """The AND of the accepted filters. Ranges are half-open: [lo, hi)."""

    brokers: frozenset[str] | None = None  # None: no filter choosing brokers
    brokers_out: frozenset[str] = frozenset()  # brokers a `broker != ...` filter leaves out
    topics: frozenset[str] | None = None  # None: no topic filter
    queue_ids: frozenset[int] | None = None
    offset_lo: int = 0
    offset_hi: int = _NO_LIMIT
    time_lo_ms: int = 0  # store_timestamp, milliseconds
    time_hi_ms: int = _NO_LIMIT

    @property
    def empty(self) -> bool:
        return (
            (self.brokers is not None and not self.brokers - self.brokers_out)
            or (self.topics is not None and not self.topics)
            or (self.queue_ids is not None and not self.queue_ids)
            or self.offset_lo >= self.offset_hi
            or self.time_lo_ms >= self.time_hi_ms
        )

    @property
    def has_time(self) -> bool:
        return self.time_lo_ms > 0 or self.time_hi_ms < _NO_LIMIT

    def wants_broker(self, broker: str | None) -> bool:
        """Does the scan read the store of `broker` (None: a single store, always read)?"""
        if broker is None:
            return True
        return broker not in self.brokers_out and (self.brokers is None or broker in self.brokers)

    def wants(self, topic: str, queue_id: int | None = None) -> bool:
        if self.topics is not None and topic not in self.topics:
            return False
        return queue_id is None or self.queue_ids is None or queue_id in self.queue_ids


def _to_ms(value: Any) -> tuple[int, bool] | None:
    """A timestamp filter value as (ms floor, exact): exact when it has no sub-millisecond part."""
    if not isinstance(value, dt.datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    us = (value - _EPOCH) // dt.timedelta(microseconds=1)
    return us // 1000, us % 1000 == 0


def _int_value(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _range(kind: type, v: int, exact: bool) -> tuple[int, int]:
    """[lo, hi) of integer keys k (ms or offsets) satisfying `k <op> v`; for a time with a
    sub-millisecond part v is its floor and `exact` is False (k is whole milliseconds)."""
    if kind is EqualTo:
        return (v, v + 1) if exact else (0, 0)
    if kind is GreaterThan:
        return v + 1, _NO_LIMIT
    if kind is GreaterThanOrEqual:
        return (v, _NO_LIMIT) if exact else (v + 1, _NO_LIMIT)
    if kind is LessThan:
        return (0, v) if exact else (0, v + 1)
    return 0, v + 1  # LessThanOrEqual


def _string_values(f: Filter) -> frozenset[str] | None:
    """The strings an EqualTo or In filter names; None for any other filter or value."""
    values = (f.value,) if isinstance(f, EqualTo) else tuple(f.value) if isinstance(f, In) else None
    if values is None or not all(isinstance(v, str) for v in values):
        return None
    return frozenset(values)


def _accept_broker(bounds: ScanBounds, f: Filter) -> ScanBounds | None:
    """Bounds narrowed by a filter on `broker` (=, IN, and their negations: the column is never
    null, so NOT is exact), or None when it is another kind."""
    if isinstance(f, Not):
        out = _string_values(f.child)
        return None if out is None else replace(bounds, brokers_out=bounds.brokers_out | out)
    got = _string_values(f)
    if got is None:
        return None
    return replace(bounds, brokers=got if bounds.brokers is None else bounds.brokers & got)


def _accept(bounds: ScanBounds, f: Filter) -> ScanBounds | None:
    """Bounds narrowed by `f`, or None when the scan cannot apply `f` exactly."""
    child = getattr(f, "child", None)
    if isinstance(f, Not) and getattr(child, "attribute", None) == ("broker",):
        return _accept_broker(bounds, f)
    attr = getattr(f, "attribute", None)
    if not isinstance(attr, tuple) or len(attr) != 1:
        return None
    col = attr[0]
    if col == "broker":
        return _accept_broker(bounds, f)
    if col == "topic":
        got = _string_values(f)
        if got is None:
            return None
        return replace(bounds, topics=got if bounds.topics is None else bounds.topics & got)
    if col == "queue_id":
        values = (f.value,) if isinstance(f, EqualTo) else tuple(f.value) if isinstance(f, In) else None
        if values is None or not all(_int_value(v) is not None for v in values):
            return None
        ids = frozenset(values)
        return replace(bounds, queue_ids=ids if bounds.queue_ids is None else bounds.queue_ids & ids)
    if not isinstance(f, _COMPARISONS):
        return None
    if col == "queue_offset":
        v = _int_value(f.value)
        if v is None:
            return None
        lo, hi = _range(type(f), v, True)
        return replace(bounds, offset_lo=max(bounds.offset_lo, lo), offset_hi=min(bounds.offset_hi, hi))
    if col == "store_timestamp":
        ms = _to_ms(f.value)
        if ms is None:
            return None
        lo, hi = _range(type(f), *ms)
        return replace(bounds, time_lo_ms=max(bounds.time_lo_ms, lo), time_hi_ms=min(bounds.time_hi_ms, hi))
    return None


def push_filters(bounds: ScanBounds, filters: Iterable[Filter]) -> tuple[ScanBounds, list[Filter]]:
    """Fold the filters the scan applies exactly into `bounds`; return the rest for Spark."""
    rest: list[Filter] = []
    for f in filters:
        narrowed = _accept(bounds, f)
        if narrowed is None:
            rest.append(f)
        else:
            bounds = narrowed
    return bounds, rest
