"""The streaming source's offset arithmetic, alone (no Spark, no store)."""

from __future__ import annotations

import json

import pytest

from shmq.spark.stream_offsets import (
    QueueRange,
    fair_split,
    next_end,
    parse_queue_key,
    plan_ranges,
    queue_key,
    sorted_offset,
)


def test_queue_key_round_trip_and_rejects_garbage() -> None:
    assert queue_key("T%x-1", 3) == "T%x-1/3"
    assert parse_queue_key("T%x-1/3") == (None, "T%x-1", 3)
    assert queue_key("T%x-1", 3, "ns1-b0") == "ns1-b0/T%x-1/3"
    assert parse_queue_key("ns1-b0/T%x-1/3") == ("ns1-b0", "T%x-1", 3)
    for bad in ("T", "/3", "T/", "T/x", "T/-1", "b//3", "/T/3", "a/b/T/3"):
        with pytest.raises(ValueError):
            parse_queue_key(bad)


def test_sorted_offset_serializes_the_same_whatever_the_insertion_order() -> None:
    a = sorted_offset({"b/0": 1, "a/1": 2, "a/0": 3})
    b = sorted_offset({"a/0": 3, "a/1": 2, "b/0": 1})
    assert json.dumps(a) == json.dumps(b) == '{"a/0": 3, "a/1": 2, "b/0": 1}'


def test_fair_split_gives_equal_shares_and_redistributes_what_small_queues_leave() -> None:
    assert fair_split({"a": 100, "b": 100, "c": 100}, 30) == {"a": 10, "b": 10, "c": 10}
    assert fair_split({"a": 2, "b": 100, "c": 100}, 30) == {"a": 2, "b": 14, "c": 14}
    assert fair_split({"a": 2, "b": 3, "c": 0}, 30) == {"a": 2, "b": 3, "c": 0}
    assert fair_split({"a": 5, "b": 5}, 0) == {"a": 0, "b": 0}


def test_fair_split_never_exceeds_budget_or_backlog() -> None:
    avail = {f"q{i}": (i * 37) % 11 for i in range(9)}
    for budget in range(60):
        got = fair_split(avail, budget)
        assert sum(got.values()) == min(budget, sum(avail.values()))
        assert all(0 <= got[k] <= avail[k] for k in avail)


def test_fair_split_remainder_goes_to_the_longest_backlog_so_no_queue_starves() -> None:
    assert fair_split({"a": 1, "b": 5, "c": 3}, 2) == {"a": 0, "b": 1, "c": 1}
    # budget 1 over three equal queues, applied repeatedly: every queue moves within 3 rounds
    backlog = {"a": 3, "b": 3, "c": 3}
    moved = set()
    for _ in range(3):
        got = fair_split(backlog, 1)
        moved |= {k for k, v in got.items() if v}
        backlog = {k: backlog[k] - got[k] for k in backlog}
    assert moved == {"a", "b", "c"}


def test_next_end_reads_all_available_and_picks_up_new_queues_at_their_head() -> None:
    start = {"T/0": 5, "T/1": 7}
    heads = {"T/0": 0, "T/1": 0, "T/2": 4, "U/0": 0}
    tails = {"T/0": 9, "T/1": 7, "T/2": 6, "U/0": 0}
    assert next_end(start, heads, tails) == {"T/0": 9, "T/1": 7, "T/2": 6, "U/0": 0}


def test_next_end_returns_start_when_nothing_is_new_and_never_goes_backwards() -> None:
    start = {"T/0": 5, "T/1": 7, "gone/0": 3}
    heads = {"T/0": 0, "T/1": 0}
    tails = {"T/0": 5, "T/1": 6}  # T/1's end went back (a crash truncated it): keep 7
    assert next_end(start, heads, tails) == start


def test_next_end_rate_limit_splits_fairly_from_each_start() -> None:
    start = {"T/0": 0, "T/1": 10}
    heads = {"T/0": 0, "T/1": 0, "T/2": 0}
    tails = {"T/0": 100, "T/1": 12, "T/2": 100}
    end = next_end(start, heads, tails, max_rows=20)
    assert end == {"T/0": 9, "T/1": 12, "T/2": 9}
    assert sum(end[k] - start.get(k, 0) for k in end) == 20


def test_next_end_counts_from_the_head_when_cleanup_passed_the_start() -> None:
    end = next_end({"T/0": 5}, {"T/0": 50}, {"T/0": 100}, max_rows=10)
    assert end == {"T/0": 60}


def test_next_end_with_a_target_stops_there_and_ignores_queues_found_later() -> None:
    target = {"T/0": 20, "T/1": 4}
    heads = {"T/0": 0, "T/1": 0, "T/9": 0}
    tails = {"T/0": 50, "T/1": 50, "T/9": 50}
    start = {"T/0": 0}
    first = next_end(start, heads, tails, max_rows=12, target=target)
    assert first == {"T/0": 8, "T/1": 4}
    second = next_end(first, heads, tails, max_rows=12, target=target)
    assert second == {"T/0": 20, "T/1": 4}
    assert next_end(second, heads, tails, max_rows=12, target=target) == second


def test_plan_ranges_reads_new_queues_from_their_head_and_reports_lost_entries() -> None:
    start = {"T/0": 5, "T/1": 3, "T/2": 8}
    end = {"T/0": 9, "T/1": 20, "T/2": 8, "T/3": 4}
    heads = {"T/0": 0, "T/1": 10, "T/2": 0, "T/3": 1}
    assert plan_ranges(start, end, heads) == [
        QueueRange("T", 0, 5, 9),
        QueueRange("T", 1, 10, 20, lost=7, lost_from=3),
        QueueRange("T", 3, 1, 4),
    ]


def test_plan_ranges_loss_beyond_the_batch_end_counts_only_up_to_the_end() -> None:
    assert plan_ranges({"T/0": 5}, {"T/0": 8}, {"T/0": 30}) == [QueueRange("T", 0, 30, 30, lost=3, lost_from=5)]


def test_a_root_stream_takes_a_new_broker_at_its_head_and_keeps_a_removed_one() -> None:
    """Keys of a store root name the broker: a broker started later is a new queue, one whose
    store is gone keeps its offset and is no longer read."""
    start = {"b0/T/0": 4, "b1/T/0": 2}
    heads = {"b0/T/0": 0, "b2/T/0": 0, "b2/T/1": 1}  # b1 removed, b2 started
    tails = {"b0/T/0": 6, "b2/T/0": 3, "b2/T/1": 5}
    end = next_end(start, heads, tails)
    assert end == {"b0/T/0": 6, "b1/T/0": 2, "b2/T/0": 3, "b2/T/1": 5}
    assert plan_ranges(start, end, heads) == [
        QueueRange("T", 0, 4, 6, broker="b0"),
        QueueRange("T", 0, 0, 3, broker="b2"),
        QueueRange("T", 1, 1, 5, broker="b2"),
    ]
