"""MessageHandler: log records arrive as messages; a broker down at start is waited for; a full
buffer drops and counts; shmq's own logging is never published; the logging call stays cheap."""

from __future__ import annotations

import logging
import os
import time

import pytest

import shmq
from shmq import MessageHandler
from tests.pulling import read_topic
from tests.waiting import wait_for


def _read_all(broker: str, topic: str) -> list:
    """Every message of ``topic``, in queue order per queue, then by store time."""
    return sorted(read_topic(broker, topic, "log-reader"), key=lambda m: (m.store_timestamp, m.queue_offset))


@pytest.fixture
def app_log():
    """A logger of the application's own, detached from the root (the test adds the handler)."""
    log = logging.getLogger(f"app.t{os.getpid()}.{time.monotonic_ns()}")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    yield log
    for h in list(log.handlers):
        log.removeHandler(h)
        h.close()


def test_records_arrive_with_body_tags_and_properties(store_dir, broker_name, config, app_log):
    with shmq.Broker(store_dir, broker_name, config):
        h = MessageHandler("AppLog", broker=broker_name, level=logging.INFO)
        h.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        app_log.addHandler(h)
        app_log.debug("below the level")
        app_log.info("hello %s", "world")
        try:
            1 / 0  # noqa: B018 - raises, for a record with a traceback
        except ZeroDivisionError:
            app_log.exception("it failed")
        assert h.flush(5) and h.sent == 2
        h.close()
        msgs = _read_all(broker_name, "AppLog")
    assert [m.tags for m in msgs] == ["INFO", "ERROR"]
    assert msgs[0].body == f"INFO {app_log.name}: hello world".encode()
    assert msgs[1].body.startswith(f"ERROR {app_log.name}: it failed\nTraceback".encode())
    p = msgs[0].properties
    assert (p["logger"], p["level"], p["levelno"], p["pid"], p["thread"]) == (
        app_log.name,
        "INFO",
        "20",
        str(os.getpid()),
        "MainThread",
    )
    assert p["func"] == "test_records_arrive_with_body_tags_and_properties"
    assert abs(int(p["time"]) / 1000 - time.time()) < 60 and p["path"] == __file__ and int(p["line"]) > 0
    assert msgs[1].properties["exc_type"] == "ZeroDivisionError" and "exc_type" not in p
    assert (h.dropped, h.failed) == (0, 0)


def test_broker_down_at_start_then_up_delivers_the_buffer_and_counts_the_rest(
    store_dir, broker_name, config, app_log, capsys
):
    h = MessageHandler("AppLog", broker=broker_name, buffer_size=100, retry_interval=0.05)
    app_log.addHandler(h)
    costs = []
    for i in range(1000):
        t = time.perf_counter()
        app_log.info("record %d", i)
        costs.append(time.perf_counter() - t)
    costs.sort()
    # never waits for the broker (an attach attempt each time); a loaded machine's preemptions
    # and GIL hand-overs cost a few ms here and there
    assert costs[int(len(costs) * 0.99)] < 0.05, f"p99 {costs[int(len(costs) * 0.99)] * 1e3:.3f} ms"
    assert h.dropped == 900 and h.sent == 0
    assert wait_for(lambda: isinstance(h.last_error, shmq.BrokerNotFoundError), 30)
    time.sleep(0.2)  # a few more attempts: still one warning (at most one a minute)
    err = capsys.readouterr().err
    assert err.count("log records dropped") == 1 and "no broker named" in err, err
    with shmq.Broker(store_dir, broker_name, config):
        assert h.flush(10) and h.sent == 100
        app_log.info("after the broker came")
        assert h.flush(5) and h.sent == 101
        h.close()
        msgs = _read_all(broker_name, "AppLog")
    assert [m.body for m in msgs] == [f"record {i}".encode() for i in range(100)] + [b"after the broker came"]
    assert h.dropped == 900


def test_no_recursion_with_shmq_loggers_at_debug_on_the_root(store_dir, broker_name, config):
    root = logging.getLogger()
    old_level = root.level
    with shmq.Broker(store_dir, broker_name, config):
        h = MessageHandler("AppLog", broker=broker_name)
        root.addHandler(h)
        root.setLevel(logging.DEBUG)
        try:
            logging.getLogger("shmq.client").debug("the client's own line")
            logging.getLogger("shmq").warning("shmq's own warning")
            logging.getLogger("app").warning("one line of the app")
            assert h.flush(5)
            time.sleep(0.2)  # anything the sending logged in turn would be buffered by now
            assert h.flush(5) and h.sent == 1
        finally:
            root.removeHandler(h)
            root.setLevel(old_level)
            h.close()
        assert [m.body for m in _read_all(broker_name, "AppLog")] == [b"one line of the app"]


def test_close_gives_up_within_its_timeout_when_no_broker_comes(broker_name, app_log, capsys):
    h = MessageHandler("AppLog", broker=broker_name, retry_interval=0.05, close_timeout=0.3)
    app_log.addHandler(h)
    app_log.warning("never sent")
    t = time.monotonic()
    h.close()
    assert time.monotonic() - t < 10 and not h._thread.is_alive()  # its 0.3 s close_timeout, not a hang
    assert (h.sent, h.dropped) == (0, 1) and "1 log records not sent within close_timeout" in capsys.readouterr().err
    app_log.warning("after close")
    assert h.dropped == 2


def test_a_bad_topic_fails_at_construction():
    with pytest.raises(shmq.BadTopicError):
        MessageHandler("bad topic!")


def test_broker_restarting_keeps_the_records_logged_while_it_was_down(store_dir, broker_name, config, app_log):
    h = MessageHandler("AppLog", broker=broker_name, retry_interval=0.05)
    app_log.addHandler(h)
    with shmq.Broker(store_dir, broker_name, config):
        app_log.info("before")
        assert h.flush(5) and h.sent == 1
    app_log.info("while down")
    assert wait_for(lambda: h.last_error is not None, 10)  # the send failed, the record waits
    with shmq.Broker(store_dir, broker_name, config):
        assert h.flush(10) and h.sent == 2
        h.close()
        assert [m.body for m in _read_all(broker_name, "AppLog")] == [b"before", b"while down"]
    assert (h.dropped, h.failed) == (0, 0)
