"""The whole-system chaos run's judge (tools/chaos/system_check.py): pure, so each invariant is
shown to catch what it is for."""

from __future__ import annotations

from collections import Counter

from tools.chaos.system_check import Ledger, committed_past_unconsumed, judge


def _ledger() -> Ledger:
    ledger = Ledger()
    ledger.add_producer_lines(
        [["A", "p0i0", "0", "0", "0"], ["A", "p0i0", "1", "1", "0"], ["S", "p0i0", "2", "SLAVE_NOT_AVAILABLE"]]
    )
    ledger.add_consumer_lines(
        [
            ["C", "p0i0", "0", "0", "0", "1"],
            ["C", "p0i0", "1", "1", "0", "1"],
            ["C", "p0i0", "1", "1", "0", "1"],
            ["C", "p0i0", "2", "0", "1", "1"],
        ]
    )
    return ledger


def test_a_clean_run_has_no_violations_and_counts_redeliveries():
    stored = {(0, 0): ("p0i0", 0), (1, 0): ("p0i0", 1), (0, 1): ("p0i0", 2)}
    v = judge(_ledger(), stored)
    assert v.violations() == {} and (v.acked, v.stored, v.redelivered) == (2, 3, 1)
    assert _ledger().statuses == Counter({"SLAVE_NOT_AVAILABLE": 1})


def test_an_acked_message_missing_or_moved_is_lost():
    v = judge(_ledger(), {(0, 0): ("p0i0", 0), (1, 0): ("p0i0", 9), (0, 1): ("p0i0", 2)})
    assert v.lost == [("p0i0", 1)]


def test_a_delivery_of_something_not_sent_or_not_stored_there_is_unsent():
    ledger = _ledger()
    ledger.add_consumer_lines(
        [
            ["C", "?", "-1", "2", "0", "0"],  # a body no producer made
            ["C", "p0i0", "7", "3", "0", "1"],
        ]
    )  # past what p0i0 ever tried
    stored = {(0, 0): ("p0i0", 0), (1, 0): ("p0i0", 1), (0, 1): ("p0i0", 2), (3, 0): ("p0i0", 7)}
    assert judge(ledger, stored).unsent == [(2, 0), (3, 0)]


def test_a_stored_message_never_delivered_is_reported():
    stored = {(0, 0): ("p0i0", 0), (1, 0): ("p0i0", 1), (0, 1): ("p0i0", 2), (0, 2): ("p0i0", 3)}
    assert judge(_ledger(), stored).never_consumed == [(0, 2)]


def test_a_commit_past_a_message_no_consumer_took():
    consumed = Counter({(0, 0): 1, (0, 2): 1, (1, 0): 1})
    assert committed_past_unconsumed({0: 1, 1: 1}, consumed) == []
    assert committed_past_unconsumed({0: 3, 1: 1}, consumed) == [(0, 1, 3)]
