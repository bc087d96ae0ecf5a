"""`shmq exporter` as a user runs it: a real process scraped over HTTP, a real broker stopped and restarted."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import shmq
from shmq import Message, Producer
from tests.ipc_tracking import IpcTracker
from tests.monitor.test_prometheus import parse
from tests.waiting import wait_for

SMALL = {
    "mappedFileSizeCommitLog": 4 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 4096,
    "maxHashSlotNum": 1009,
    "maxIndexNum": 4000,
}


@contextmanager
def exporter_process(args: list[str], serving: str) -> Iterator[str]:
    """``shmq exporter ARGS --port 0`` as a process (its metrics URL once its first line starts
    with ``serving``); it must exit on SIGTERM."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "shmq", "exporter", *args, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith(f"{serving} on http://127.0.0.1:"), line + proc.stderr.read()  # type: ignore[union-attr]
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        try:
            status = proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    assert status == 0


@pytest.fixture
def exporter(ipc_tracker: IpcTracker) -> Iterator[tuple[str, str]]:
    """(broker name, metrics URL) of an exporter process on a free port; it must exit on SIGTERM."""
    name = ipc_tracker.name("x")
    with exporter_process(["--name", name], f"serving broker {name!r}") as url:
        yield name, url


def _scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return parse(r.read().decode("utf-8"))[1]


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], metric: str, **labels: str) -> float | None:
    for (name, got), value in samples.items():
        if name == metric and set(labels.items()) <= got:
            return value
    return None


def test_scrapes_follow_the_broker_down_up_and_restarted(exporter, ipc_tracker: IpcTracker, tmp_path) -> None:
    name, url = exporter
    assert _value(_scrape(url), "shmq_up") == 0  # no broker yet: still HTTP 200
    store = ipc_tracker.store(str(tmp_path / "store"))
    with shmq.Broker(store, name, SMALL):
        with Producer("pg", broker=name) as p:
            for i in range(25):
                p.send(Message("Metrics", b"m%d" % i))
        # counters are published on the broker's 10 ms tick: 25 sync sends can all fit before one
        assert wait_for(lambda: _value(_scrape(url), "shmq_topic_messages_in_total", topic="Metrics") == 25)
        samples = _scrape(url)
        assert _value(samples, "shmq_up", broker=name) == 1
        assert _value(samples, "shmq_topic_messages_in_total", topic="Metrics") == 25
        assert _value(samples, "shmq_topic_max_offset", topic="Metrics") == 25
        assert (_value(samples, "shmq_broker_resident_memory_bytes") or 0) > 0
    assert _value(_scrape(url), "shmq_up") == 0
    with shmq.Broker(store, name, SMALL):  # the same name again: the exporter reattaches
        samples = _scrape(url)
        assert _value(samples, "shmq_up") == 1
        assert _value(samples, "shmq_topic_messages_in_total", topic="Metrics") == 0  # counters restart
        assert _value(samples, "shmq_topic_max_offset", topic="Metrics") == 25  # offsets persist


def test_pop_messages_in_flight_per_group_then_acked(exporter, ipc_tracker: IpcTracker, tmp_path) -> None:
    """The broker publishes POP messages in flight (total and per group) with its once-a-second health."""
    name, url = exporter
    with shmq.Broker(ipc_tracker.store(str(tmp_path / "store")), name, SMALL):
        with Producer("pg", broker=name) as p:
            for i in range(5):
                p.send(Message("Jobs", b"job %d" % i))
        sc = shmq.SimpleConsumer("workers", broker=name, subscriptions={"Jobs": "*"}, await_duration=0.5).start()
        try:
            got: list = []
            assert wait_for(lambda: got.extend(sc.receive(16, 60.0)) or len(got) == 5, timeout=30)
            assert wait_for(
                lambda: _value(_scrape(url), "shmq_group_pop_inflight_messages", group="workers") == 5, timeout=30
            )
            assert _value(_scrape(url), "shmq_pop_inflight_messages") == 5
            for m in got[:3]:
                sc.ack(m)
            assert wait_for(
                lambda: _value(_scrape(url), "shmq_group_pop_inflight_messages", group="workers") == 2, timeout=30
            )
        finally:
            sc.shutdown()


def test_rocketmq5_lag_latency_is_the_age_of_the_oldest_message_not_committed(
    ipc_tracker: IpcTracker, tmp_path
) -> None:
    name = ipc_tracker.name("x")
    with shmq.Broker(ipc_tracker.store(str(tmp_path / "store")), name, SMALL):
        shmq.Admin(name).create_topic("Aged", queues=1)
        with Producer("pg", broker=name) as p:
            t0 = time.time()
            for i in range(5):
                p.send(Message("Aged", b"early %d" % i))
            t1 = time.time()
            time.sleep(1.5)
            for i in range(5):
                p.send(Message("Aged", b"late %d" % i))
        c = shmq.LitePullConsumer(
            "ager", broker=name, consume_from=shmq.ConsumeFrom.FIRST_OFFSET, auto_commit=False, pull_batch_size=1
        )
        c.subscribe("Aged")
        c.start()
        try:
            assert wait_for(lambda: len(c.poll(timeout=1.0)) == 1, timeout=30)
            c.commit_sync()  # offset 1: "early 1" is the oldest message the group has not committed
            args = ["--name", name, "--names", "rocketmq5"]
            with exporter_process(args, f"serving broker {name!r}") as url:
                labels = {"consumer_group": "ager", "topic": "Aged"}
                assert wait_for(lambda: _value(_scrape(url), "rocketmq_consumer_lag_messages", **labels) == 9)
                before = time.time()
                age = _value(_scrape(url), "rocketmq_consumer_lag_latency", **labels)
                after = time.time()
        finally:
            c.shutdown()
    assert age is not None
    assert (before - t1) * 1000 - 50 <= age <= (after - t0) * 1000 + 50  # 50 ms: clocks read at other moments


def test_root_links_metrics_and_other_paths_are_404(exporter) -> None:
    _, url = exporter
    root = url.removesuffix("metrics")
    with urllib.request.urlopen(root, timeout=10) as r:
        assert b'href="/metrics"' in r.read()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(root + "nope", timeout=10)
    assert e.value.code == 404


def test_port_in_use_is_one_error_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "shmq", "exporter", "--port", str(port)], capture_output=True, text=True, timeout=30
        )
    assert done.returncode == 1
    assert done.stderr == f"shmq exporter: error: cannot listen on 127.0.0.1:{port}: address already in use\n"


def test_non_loopback_address_warns() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "shmq", "exporter", "--name", "nobody-here", "--port", "0", "--address", "0.0.0.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("serving broker 'nobody-here' on http://0.0.0.0:"), line
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "not loopback" in err
