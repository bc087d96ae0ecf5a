"""pushdown.push_filters alone (no Spark session, no files): which filters the scan takes, and
the bounds they fold into. A taken filter is not evaluated by Spark again, so every bound here
must describe exactly the rows the filter keeps."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from shmq.spark.pushdown import ScanBounds, push_filters

UTC = dt.UTC
T = dt.datetime(2026, 11, 24, 1, 2, 3, 456000, tzinfo=UTC)
T_MS = int(T.timestamp() * 1000)
HALF = dt.timedelta(microseconds=500)


def _push(*filters):
    return push_filters(ScanBounds(), list(filters))


def test_topic_and_queue_filters_choose_queues() -> None:
    b, rest = _push(
        In(("topic",), ("A", "B")), EqualTo(("topic",), "B"), In(("queue_id",), (0, 2, 3)), EqualTo(("queue_id",), 2)
    )
    assert rest == [] and b.topics == {"B"} and b.queue_ids == {2}
    assert b.wants("B", 2) and not b.wants("A", 2) and not b.wants("B", 0) and b.wants("B")
    b, _ = _push(EqualTo(("topic",), "A"), EqualTo(("topic",), "B"))
    assert b.empty  # topic = A AND topic = B


@pytest.mark.parametrize(
    "f, lo, hi",
    [
        (GreaterThanOrEqual(("queue_offset",), 5), 5, None),
        (GreaterThan(("queue_offset",), 5), 6, None),
        (LessThan(("queue_offset",), 5), 0, 5),
        (LessThanOrEqual(("queue_offset",), 5), 0, 6),
        (EqualTo(("queue_offset",), 5), 5, 6),
    ],
)
def test_queue_offset_comparisons_are_half_open_ranges(f, lo, hi) -> None:
    b, rest = _push(f)
    assert rest == [] and b.offset_lo == lo and (hi is None or b.offset_hi == hi)


@pytest.mark.parametrize(
    "f, lo, hi",
    [
        (GreaterThanOrEqual(("store_timestamp",), T), T_MS, None),
        (GreaterThan(("store_timestamp",), T), T_MS + 1, None),
        (LessThan(("store_timestamp",), T), None, T_MS),
        (LessThanOrEqual(("store_timestamp",), T), None, T_MS + 1),
        (EqualTo(("store_timestamp",), T), T_MS, T_MS + 1),
        # store times are whole milliseconds: a literal between two of them rounds the right way
        (GreaterThanOrEqual(("store_timestamp",), T + HALF), T_MS + 1, None),
        (GreaterThan(("store_timestamp",), T + HALF), T_MS + 1, None),
        (LessThan(("store_timestamp",), T + HALF), None, T_MS + 1),
        (LessThanOrEqual(("store_timestamp",), T + HALF), None, T_MS + 1),
        (GreaterThanOrEqual(("store_timestamp",), T.replace(tzinfo=None)), T_MS, None),
    ],
)  # naive: UTC
def test_store_timestamp_comparisons_in_milliseconds(f, lo, hi) -> None:
    b, rest = _push(f)
    assert rest == [] and b.has_time
    assert (lo is None or b.time_lo_ms == lo) and (hi is None or b.time_hi_ms == hi)


def test_equality_with_a_sub_millisecond_time_matches_nothing() -> None:
    b, rest = _push(EqualTo(("store_timestamp",), T + HALF))
    assert rest == [] and b.empty


def test_bounds_are_the_and_of_the_filters() -> None:
    b, _ = _push(
        GreaterThanOrEqual(("queue_offset",), 3),
        LessThan(("queue_offset",), 10),
        GreaterThan(("queue_offset",), 4),
        LessThanOrEqual(("queue_offset",), 7),
    )
    assert (b.offset_lo, b.offset_hi) == (5, 8)
    b, _ = _push(GreaterThan(("queue_offset",), 7), LessThan(("queue_offset",), 7))
    assert b.empty


def test_filters_the_scan_cannot_apply_exactly_go_back_to_spark() -> None:
    others = [
        EqualTo(("tags",), "x"),
        EqualTo(("queue_offset",), "5"),
        In(("queue_offset",), (1, 2)),
        EqualNullSafe(("topic",), "A"),
        Not(EqualTo(("topic",), "A")),
        IsNotNull(("topic",)),
        StringStartsWith(("topic",), "A"),
        EqualTo(("queue_id",), True),
        GreaterThan(("queue_id",), 1),
        EqualTo(("store_timestamp",), dt.date(2026, 1, 1)),
        EqualTo(("properties", "a"), "b"),
        In(("topic",), ("A", 1)),
    ]
    b, rest = push_filters(ScanBounds(), others)
    assert rest == others and b == ScanBounds() and not b.has_time and not b.empty
