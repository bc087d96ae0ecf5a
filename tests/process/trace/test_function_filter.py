"""subscribe(topic, callable): a plain predicate on the message, evaluated by the consumer."""

from __future__ import annotations

import logging
import threading

import shmq
from shmq import Admin, ConsumeFrom, ConsumeResult, Message, Producer, PullConsumer, PullStatus, PushConsumer
from shmq.filter.function import FunctionFilter
from tests.waiting import wait_for


def _send(p: Producer, n: int) -> None:
    for i in range(n):
        p.send(
            Message("F", b"%d" % i, tags="even" if i % 2 == 0 else "odd", properties={"n": str(i)}),
            selector=lambda queues, msg, arg: queues[0],
        )


def test_pull_with_a_predicate_skips_what_it_rejects(store_dir, broker_name, config):
    with (
        shmq.Broker(store_dir, broker_name, config),
        Producer("pg", broker=broker_name) as p,
        PullConsumer("cg", broker=broker_name) as c,
    ):
        _send(p, 30)
        mq = c.fetch_queues("F")[0]
        r = c.pull(mq, lambda m: int(m.properties["n"]) % 3 == 0, offset=0, max_nums=20)
        assert r.status is PullStatus.FOUND and r.next_begin_offset == 20
        assert [m.body for m in r.messages] == [b"%d" % i for i in range(0, 20, 3)]
        assert len(r.batch) == len(r.messages)  # the columns are cut alike
        assert [int(o) for o in r.batch.queue_offset] == list(range(0, 20, 3))
        none = c.pull(mq, lambda m: False, offset=20, max_nums=20)
        assert none.status is PullStatus.NO_MATCHED_MSG and none.next_begin_offset == 30 and none.messages == []


def test_push_with_a_predicate_commits_past_rejected_messages(store_dir, broker_name, config):
    got: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs, ctx):
        with lock:
            got.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        _send(p, 40)
        c = PushConsumer(
            "cg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET, persist_consumer_offset_interval=0.05
        )
        c.subscribe("F", lambda m: m.tags == "even" and m.body != b"10")
        c.register_listener(listener)
        with c:
            assert wait_for(lambda: len(got) == 19, 10), got
            admin = Admin(broker=broker_name)
            # the group's offset moves past every message, matched or not: nothing is delivered again
            assert wait_for(
                lambda: (
                    c._conn.admin("query_offset", {"group": "cg", "topic": "F", "queue_id": 0}, 3.0)["offset"] == 40
                ),
                10,
            )
            groups = admin._call("list_groups", {})["groups"]
            [subs] = groups["cg"]["subscriptions"].values()
            assert subs["F"] == "*"  # the broker sees "*" (besides the group's own retry topic)
        assert sorted(got, key=int) == [b"%d" % i for i in range(0, 40, 2) if i != 10]


def test_a_predicate_that_raises_is_no_match_and_counted(store_dir, broker_name, config, caplog):
    def predicate(m):
        if m.body == b"3":
            raise KeyError("boom")
        return True

    with (
        shmq.Broker(store_dir, broker_name, config),
        Producer("pg", broker=broker_name) as p,
        PullConsumer("cg", broker=broker_name) as c,
    ):
        _send(p, 6)
        f = FunctionFilter(predicate)
        with caplog.at_level(logging.ERROR, logger="shmq.filter.function"):
            r = c.pull(c.fetch_queues("F")[0], f, offset=0, max_nums=10)
        assert [m.body for m in r.messages] == [b"0", b"1", b"2", b"4", b"5"] and r.next_begin_offset == 6
        assert f.errors == 1
        assert "treated as no match" in caplog.text and "KeyError" in caplog.text
