"""Client durations are seconds; the old millisecond keywords still work for a release, with a warning."""

from __future__ import annotations

import pytest

from shmq import ConsumeContext, Producer, PushConsumer
from shmq.model.message import MessageQueue


def test_producer_batch_max_delay_is_seconds_and_the_ms_keyword_is_deprecated():
    assert Producer("pg", broker="nobody", batch_max_delay=0.25)._accumulator.delay == 0.25
    with pytest.warns(DeprecationWarning, match="batch_max_delay"):
        p = Producer("pg", broker="nobody", batch_max_delay_ms=20)
    assert p._accumulator.delay == pytest.approx(0.02)


def test_push_consumer_suspend_time_is_seconds():
    assert PushConsumer("cg", broker="nobody", suspend_current_queue_time=0.5).suspend_current_queue_time == 0.5
    with pytest.warns(DeprecationWarning, match="suspend_current_queue_time"):
        c = PushConsumer("cg", broker="nobody", suspend_current_queue_time_millis=250)
    assert c.suspend_current_queue_time == pytest.approx(0.25)


def test_consume_context_millis_alias_is_deprecated():
    ctx = ConsumeContext(MessageQueue("T", "b", 0))
    assert ctx.suspend_current_queue_time == 1.0
    with pytest.warns(DeprecationWarning):
        ctx.suspend_current_queue_time_millis = 30
    assert ctx.suspend_current_queue_time == pytest.approx(0.03)
