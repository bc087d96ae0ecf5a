"""The POP state alone (pure): receipts' statuses, the low watermark, FIFO holding, the deadline
heap and what one client holds."""

from __future__ import annotations

from shmq.broker.pop_state import PopState, Row
from shmq.codec.pop_frames import RECEIPT_OK, RECEIPT_STALE, RECEIPT_UNKNOWN

KEY = ("g", "T", 0)


def _row(state: PopState, deadline: int = 100, client: int = 1, fifo: bool = False, attempt: int = 1) -> Row:
    return Row(state.take_token(), deadline, attempt, 3, client, 0, 100, fifo)


def _state_with(n: int, **kw: object) -> PopState:
    s = PopState()
    s.queue(KEY, 10)
    for i in range(n):
        s.hand_out(KEY, 10 + i, _row(s, **kw))  # type: ignore[arg-type]
    s.queues[KEY].cursor = 10 + n
    return s


def test_receipt_statuses_follow_the_rows_current_delivery():
    s = _state_with(2)
    t = s.queues[KEY].rows[10].token
    assert s.check(KEY, 10, t) == RECEIPT_OK
    s.change(KEY, 10, 500)
    assert s.check(KEY, 10, t) == RECEIPT_STALE, "an earlier delivery's token"
    assert s.check(KEY, 10, s.next_token + 5) == RECEIPT_UNKNOWN, "never handed out"
    assert s.check(KEY, 99, t) == RECEIPT_UNKNOWN and s.check(("g", "U", 0), 10, t) == RECEIPT_UNKNOWN
    t11 = s.queues[KEY].rows[11].token
    s.settle(KEY, 11)
    assert s.check(KEY, 11, t11) == RECEIPT_UNKNOWN, "settled already"


def test_the_low_watermark_is_the_first_row_in_flight_or_the_cursor():
    s = _state_with(3)
    qs = s.queues[KEY]
    assert qs.low_watermark() == 10
    s.settle(KEY, 11)
    assert qs.low_watermark() == 10, "a gap does not move it"
    s.settle(KEY, 10)
    assert qs.low_watermark() == 12
    s.settle(KEY, 12)
    assert qs.low_watermark() == 13 == qs.cursor


def test_due_reports_each_delivery_once_and_skips_settled_or_changed_rows():
    s = _state_with(3, deadline=100)
    s.settle(KEY, 11)
    s.change(KEY, 12, 300)
    assert [o for _, o, _ in s.due(150, 10)] == [10]
    assert s.due(150, 10) == []
    assert [o for _, o, _ in s.due(300, 10)] == [12]
    assert s.next_due_ms() is None


def test_fifo_queue_is_held_until_every_row_is_due_and_has_attempts_left():
    s = _state_with(2, deadline=100, fifo=True)
    qs = s.queues[KEY]
    assert qs.fifo_ready(50) is None
    assert qs.fifo_ready(100) == [10, 11]
    qs.rows[11].attempt = 3
    assert qs.fifo_ready(100) is None, "bound for the DLQ: the revive moves it first"
    s.settle(KEY, 10), s.settle(KEY, 11)
    assert qs.fifo_ready(100) == []


def test_what_a_client_holds_is_counted_through_redelivery_and_settling():
    s = _state_with(3, client=1)
    assert s.client_rows(1) == 3
    s.hand_out(KEY, 10, Row(s.take_token(), 200, 2, 3, 2, 0, 100, True))  # handed to client 2 in place
    assert (s.client_rows(1), s.client_rows(2), s.rows) == (2, 1, 3)
    for o in (10, 11, 12):
        s.settle(KEY, o)
    assert s.held == {} and s.rows == 0


def test_workers_start_at_successive_queues():
    s = PopState()
    assert [s.start_index("g", 4) for _ in range(5)] == [0, 1, 2, 3, 0]
