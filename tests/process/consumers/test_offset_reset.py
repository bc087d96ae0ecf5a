"""`offset reset` while consumers run (a real broker process, consumers in this process): push
and lite pull members drop what they cached and resume from the new offsets, their later
commits do not put the old positions back, and a restarted member starts from the reset."""

from __future__ import annotations

import threading

import pytest

import shmq
from shmq import Admin, ConsumeFrom, ConsumeResult, LitePullConsumer, Message, Producer, PushConsumer
from shmq.cli.main import main
from shmq.errors import BrokerError
from tests.waiting import wait_for


def _send(broker: str, topic: str, count: int) -> None:
    with Producer("reset-producer", broker=broker) as p:
        for i in range(count):
            p.send(Message(topic, b"%d" % i))


def _committed(admin: Admin, group: str, topic: str, qid: int = 0) -> int:
    return int(admin._call("query_offset", {"group": group, "topic": topic, "queue_id": qid})["offset"])


class Gated:
    """A listener recording each message's queue offset as its call starts, then waiting for ``gate``."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, msgs, ctx) -> ConsumeResult:
        self.seen.extend(m.queue_offset for m in msgs)
        self.gate.wait(10)
        return ConsumeResult.SUCCESS


def _push(broker: str, listener: Gated) -> PushConsumer:
    c = PushConsumer(
        "cg",
        broker=broker,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        consume_thread_max=1,
        persist_consumer_offset_interval=0.05,
    )
    c.subscribe("R", "*")
    c.register_listener(listener)
    return c.start()


def test_push_group_resumes_from_first_and_keeps_it_across_a_restart(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        admin = Admin(broker_name)
        admin.create_topic("R", queues=1)
        _send(broker_name, "R", 10)
        listener = Gated()
        c = _push(broker_name, listener)
        try:
            assert wait_for(lambda: listener.seen == list(range(10)), 10), listener.seen
            assert wait_for(lambda: _committed(admin, "cg", "R") == 10, 30)
            listener.gate.clear()  # the next listener call holds: the position stays at the reset
            assert admin.reset_offset("cg", "R", to="first") == {0: 0}
            assert wait_for(lambda: listener.seen[10:] == [0], 30), listener.seen
            assert not wait_for(lambda: _committed(admin, "cg", "R") != 0, 0.5)  # 10 commit intervals
        finally:
            c.shutdown()  # its listener call is still running: the commit is the smallest offset in process
            listener.gate.set()
        assert _committed(admin, "cg", "R") == 0
        again = Gated()
        c = _push(broker_name, again)
        try:
            assert wait_for(lambda: again.seen == list(range(10)), 10), again.seen
        finally:
            c.shutdown()


def test_reset_to_last_skips_the_backlog(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        admin = Admin(broker_name)
        admin.create_topic("R", queues=1)
        listener = Gated()
        listener.gate.clear()
        c = _push(broker_name, listener)
        try:
            _send(broker_name, "R", 5)
            assert wait_for(lambda: listener.seen == [0], 30), listener.seen  # held in the listener
            _send(broker_name, "R", 20)  # the backlog: pulled into the process queue or still in the store
            assert admin.reset_offset("cg", "R", to="last") == {0: 25}
            assert wait_for(lambda: c._resets.applied == 1, 30)
            listener.gate.set()
            _send(broker_name, "R", 3)
            assert wait_for(lambda: len(listener.seen) >= 4, 30), listener.seen
            assert not wait_for(lambda: len(listener.seen) > 4, 0.3), listener.seen
            # only the call in flight at the reset, then the new ones (a concurrent listener's
            # calls may run in either order: two pullers take turns calling it)
            assert listener.seen[0] == 0 and sorted(listener.seen) == [0, 25, 26, 27], listener.seen
            assert wait_for(lambda: _committed(admin, "cg", "R") == 28, 30)
        finally:
            c.shutdown()


def test_group_without_members_just_commits(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        admin = Admin(broker_name)
        admin.create_topic("R", queues=1)
        _send(broker_name, "R", 10)
        listener = Gated()
        c = _push(broker_name, listener)
        try:
            assert wait_for(lambda: listener.seen == list(range(10)), 10), listener.seen
        finally:
            c.shutdown()
        assert admin.reset_offset("cg", "R", offset=6) == {0: 6}
        assert _committed(admin, "cg", "R") == 6
        again = Gated()
        c = _push(broker_name, again)
        try:
            assert wait_for(lambda: again.seen == [6, 7, 8, 9], 10), again.seen
        finally:
            c.shutdown()


def test_lite_pull_drops_its_buffer_and_follows_the_reset(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        admin = Admin(broker_name)
        admin.create_topic("R", queues=1)
        _send(broker_name, "R", 10)
        c = LitePullConsumer("lg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET, pull_batch_size=2)
        c.subscribe("R", "*")
        with c.start():
            assert [m.queue_offset for m in c.poll(5)] == [0, 1]  # 2..9 read ahead into its buffer
            assert admin.reset_offset("lg", "R", to="last") == {0: 10}
            assert wait_for(lambda: c._resets.applied == 1, 30)
            _send(broker_name, "R", 3)
            got: list[int] = []
            assert wait_for(lambda: got.extend(m.queue_offset for m in c.poll(0.05)) or len(got) >= 3, 30)
            assert got == [10, 11, 12]
            assert admin.reset_offset("lg", "R", timestamp=0) == {0: 0}  # before every message: the first
            assert wait_for(lambda: c._resets.applied == 2, 30)
            got = []
            assert wait_for(lambda: got.extend(m.queue_offset for m in c.poll(0.05)) or len(got) >= 13, 30)
            assert got == list(range(13))
            c.commit()
            assert _committed(admin, "lg", "R") == 13


def test_bad_arguments_and_unknown_names(store_dir, broker_name, config, capsys):
    with shmq.Broker(store_dir, broker_name, config):
        admin = Admin(broker_name)
        admin.create_topic("R", queues=2)
        admin._call("commit_offset", {"group": "cg", "topic": "R", "queue_id": 0, "offset": 0})
        with pytest.raises(ValueError, match="exactly one"):
            admin.reset_offset("cg", "R", timestamp=1, offset=2)
        with pytest.raises(BrokerError, match="topic 'Nope' does not exist"):
            admin.reset_offset("cg", "Nope", to="first")
        with pytest.raises(BrokerError, match="consumer group 'ghost' is unknown"):
            admin.reset_offset("ghost", "R", to="first")
        assert (
            main(
                ["admin", "offset", "reset", "--name", broker_name, "--group", "ghost", "--topic", "R", "--to", "first"]
            )
            == 1
        )
        err = capsys.readouterr().err
        assert err.startswith("shmq admin offset reset: error: ") and "'ghost' is unknown" in err
        assert err.count("\n") == 1
        assert (
            main(
                [
                    "admin",
                    "offset",
                    "reset",
                    "--name",
                    broker_name,
                    "--group",
                    "cg",
                    "--topic",
                    "R",
                    "--offset",
                    "5",
                    "--json",
                ]
            )
            == 0
        )
        import json

        assert json.loads(capsys.readouterr().out) == {"group": "cg", "topic": "R", "offsets": {"0": 0, "1": 0}}
