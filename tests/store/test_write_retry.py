"""WriteRetry: the retry delay of a failing metadata write and its once-per-state log lines."""

from __future__ import annotations

import logging

from shmq.store.write_retry import FIRST_DELAY_S, WriteRetry

log = logging.getLogger("test.write_retry")


def test_failures_back_off_and_log_once_per_reason(caplog):
    w = WriteRetry(log, "writing x.json", max_delay=1.0)
    assert w.due(0.0) and not w.failing
    with caplog.at_level(logging.WARNING, "test.write_retry"):
        t = 0.0
        for delay in [FIRST_DELAY_S, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]:  # doubling, capped
            w.failed(OSError(30, "Read-only file system"), t)  # the write fails on every try allowed
            assert not w.due(t + delay - 1e-6) and w.due(t + delay)
            t += delay
        assert caplog.text.count("writing x.json failed") == 1 and "Read-only" in caplog.text
        w.failed(OSError(28, "No space left on device"), t)  # another reason: said once more
        w.failed(OSError(28, "No space left on device"), t + 2)
        assert caplog.text.count("writing x.json failed") == 2 and w.failures == 10
        w.succeeded()
        assert "writing x.json works again (after 10 failed tries)" in caplog.text
        assert w.due(t) and not w.failing
        w.succeeded()  # a success while working is not logged
        assert caplog.text.count("works again") == 1
        w.failed(OSError(30, "Read-only file system"), t)  # failing again after it worked: logged again
        assert caplog.text.count("writing x.json failed") == 3


def test_reasons_differing_only_in_numbers_are_one_state(caplog):
    w = WriteRetry(log, "writing x.json")
    with caplog.at_level(logging.WARNING, "test.write_retry"):
        w.failed("disk 91.2% used", 0.0)
        w.failed("disk 93.8% used", 1.0)
    assert caplog.text.count("failed") == 1
