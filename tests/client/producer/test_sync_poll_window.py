"""The sync send's poll window follows the answer times: long enough for the usual answer,
at most SYNC_POLL_S when answers are slow (SYNC_FLUSH), short again when they are fast."""

from __future__ import annotations

from shmq.client.producer.producer import SYNC_POLL_S, recent_answer_time, sync_poll_window


def test_window_from_recent_answer_times() -> None:
    assert sync_poll_window(45e-6) == 4 * 45e-6
    assert sync_poll_window(SYNC_POLL_S / 2) == SYNC_POLL_S  # at most SYNC_POLL_S
    assert sync_poll_window(SYNC_POLL_S / 2 + 1e-6) == SYNC_POLL_S  # slow answers: the full window
    assert sync_poll_window(0.0) == 0.0


def test_average_follows_and_survives_one_stall() -> None:
    recent = SYNC_POLL_S / 2
    for _ in range(40):
        recent = recent_answer_time(recent, 45e-6)
    assert abs(recent - 45e-6) < 2e-6 and sync_poll_window(recent) > 150e-6
    stalled = recent_answer_time(recent, 1.0)  # one stall counts at most 2 x SYNC_POLL_S
    assert sync_poll_window(stalled) > 0
    for _ in range(40):
        recent = recent_answer_time(recent, 500e-6)  # SYNC_FLUSH under load
    assert sync_poll_window(recent) == SYNC_POLL_S
    for _ in range(40):
        recent = recent_answer_time(recent, 45e-6)
    assert abs(sync_poll_window(recent) - 4 * 45e-6) < 20e-6  # back to a short window
