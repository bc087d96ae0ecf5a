"""BROADCASTING members keep their own offsets: one file per group and instance."""

from __future__ import annotations

import os
import threading

import shmq
from shmq import ConsumeFrom, ConsumeResult, Message, MessageModel, Producer, PushConsumer
from tests.waiting import wait_for


class Collector:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, msgs, ctx) -> ConsumeResult:
        with self.lock:
            self.bodies += [m.body for m in msgs]
        return ConsumeResult.SUCCESS


def _member(broker: str, offsets: str, sink: Collector, **kw) -> PushConsumer:
    c = PushConsumer(
        "bc",
        broker=broker,
        model=MessageModel.BROADCASTING,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        offset_store_dir=offsets,
        persist_consumer_offset_interval=0.05,
        **kw,
    )
    c.subscribe("B", "*")
    c.register_listener(sink)
    return c.start()


def _files(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_default_members_never_share_offsets(store_dir, broker_name, config, tmp_path):
    """Regression (issue 9 A2): with the default instance name two members on one host shared
    one offset file, and a member started after the other consumed skipped everything."""
    offsets = str(tmp_path / "offsets")
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        for i in range(20):
            p.send(Message("B", b"%d" % i))
        first_sink, second_sink = Collector(), Collector()
        first = _member(broker_name, offsets, first_sink)
        assert wait_for(lambda: len(first_sink.bodies) == 20, 10)
        mine = os.path.join(first.instance_name, "bc.json")
        assert wait_for(lambda: mine in _files(offsets), 30)  # its offsets are on disk
        second = _member(broker_name, offsets, second_sink)
        try:
            assert first.instance_name != second.instance_name
            assert first.instance_name.startswith(f"{os.getpid()}-")
            assert wait_for(lambda: len(second_sink.bodies) == 20, 10), len(second_sink.bodies)
            assert sorted(second_sink.bodies) == sorted(first_sink.bodies)
        finally:
            first.shutdown()
            second.shutdown()
    assert _files(offsets) == []  # a default instance's file dies with it


def test_default_place_is_left_empty(store_dir, broker_name, config, tmp_path, monkeypatch):
    """A default member (default offset place, default instance name) leaves no empty
    ``~/.shmq/offsets/<broker>/`` behind once it shuts down."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    sink = Collector()
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        for i in range(5):
            p.send(Message("B", b"%d" % i))
        c = PushConsumer(
            "bc",
            broker=broker_name,
            model=MessageModel.BROADCASTING,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            persist_consumer_offset_interval=0.05,
        )
        c.subscribe("B", "*")
        c.register_listener(sink)
        c.start()
        try:
            assert wait_for(lambda: len(sink.bodies) == 5, 30)
            assert wait_for(lambda: _files(str(tmp_path / "home")) != [], 30)  # its offsets are on disk
        finally:
            c.shutdown()
    assert not os.path.exists(tmp_path / "home" / ".shmq")


def test_a_named_instance_resumes_from_its_file(store_dir, broker_name, config, tmp_path):
    offsets = str(tmp_path / "offsets")
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        for i in range(10):
            p.send(Message("B", b"%d" % i))
        sink = Collector()
        c = _member(broker_name, offsets, sink, instance_name="node1")
        assert wait_for(lambda: len(sink.bodies) == 10, 10)
        c.shutdown()
        assert os.path.join("node1", "bc.json") in _files(offsets)
        for i in range(10, 15):
            p.send(Message("B", b"%d" % i))
        again = Collector()
        c = _member(broker_name, offsets, again, instance_name="node1")
        try:
            assert wait_for(lambda: len(again.bodies) == 5, 10)
            assert sorted(again.bodies) == sorted(b"%d" % i for i in range(10, 15))
        finally:
            c.shutdown()
