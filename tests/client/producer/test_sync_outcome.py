"""A sync send's result slot (``_Outcome``): set by whichever thread reads the answer, read by
the sending thread, also when that thread has to wait for the reader thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from shmq.client.producer.producer import _Outcome
from shmq.errors import SendTimeoutError


def _set_42(o: _Outcome) -> None:
    o.set_result(42)


def _fail(o: _Outcome) -> None:
    o.set_exception(SendTimeoutError("no answer"))


@pytest.mark.parametrize("delay", [0.0, 0.02])
@pytest.mark.parametrize("settle", [_set_42, _fail])
def test_result_waits_for_another_threads_outcome(settle: Callable[[_Outcome], None], delay: float) -> None:
    o = _Outcome()
    t = threading.Thread(target=lambda: (time.sleep(delay), settle(o)))
    t.start()
    try:
        if settle is _set_42:
            assert o.result() == 42
        else:
            with pytest.raises(SendTimeoutError, match="no answer"):
                o.result()
    finally:
        t.join(30)
    assert o.done()


def test_done_result_is_read_without_waiting() -> None:
    o = _Outcome()
    assert not o.done()
    o.set_result("r")
    assert o.done() and o.result() == "r" and o.result() == "r"
