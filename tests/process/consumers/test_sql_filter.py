"""SQL92 filters end to end with a real broker: push and pull consumers get exactly the matching
messages, with the filter bitmap off and on (and across a broker restart); bad SQL from a
client is refused without harm."""

from __future__ import annotations

import threading

import pytest

import shmq
from shmq import ConsumeFrom, ConsumeResult, Message, Producer, PullConsumer, PullStatus, PushConsumer
from shmq.errors import BrokerError, ShmqError
from shmq.store.read.filter_bitmap import FilterBitmapReader
from tests.waiting import wait_for

EXPR = "a BETWEEN 2 AND 3 AND region = 'eu'"


def _send(p: Producer, topic: str, n: int, start: int = 0) -> set[bytes]:
    """n messages; returns the bodies EXPR matches."""
    want = set()
    for i in range(start, start + n):
        props = {"a": str(i % 10), "region": "eu" if i % 3 else "us"}
        if i % 7 == 0:
            del props["a"]  # missing: never matches
        p.send(Message(topic, b"%d" % i, properties=props))
        if "a" in props and 2 <= int(props["a"]) <= 3 and props["region"] == "eu":
            want.add(b"%d" % i)
    return want


def _push(broker: str, group: str, got: list[bytes], lock: threading.Lock) -> PushConsumer:
    c = PushConsumer(group, broker=broker, consume_from=ConsumeFrom.FIRST_OFFSET)
    c.subscribe("S", shmq.sql(EXPR))

    def listener(msgs, ctx):
        with lock:
            got.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    c.register_listener(listener)
    return c


def _pull_all(broker: str, group: str, topic: str) -> list[bytes]:
    out: list[bytes] = []
    with PullConsumer(group, broker=broker) as pc:
        for mq in pc.fetch_queues(topic):
            offset = 0
            while True:
                r = pc.pull(mq, shmq.sql(EXPR), offset=offset, max_nums=16, timeout=0)
                if r.status is PullStatus.NO_NEW_MSG:
                    break
                out += [m.body for m in r.messages]
                offset = r.next_begin_offset
    return out


def _skipped(store_dir: str, group: str, topic: str, queues: int) -> int:
    """Entries the filter bitmap lets a consumer of ``group`` skip unread."""
    from shmq.store.read.reader import StoreReader

    n = 0
    with StoreReader(store_dir) as reader:
        bm = FilterBitmapReader(reader.store_dir)
        for q in range(queues):
            cq = reader.consume_queue(topic, q)
            rng = cq.entries(0, 1 << 20, 1 << 40)
            skip = bm.skippable(topic, q, group, shmq.sql(EXPR), rng.start, rng.entries)
            n += 0 if skip is None else int(skip.sum())
        bm.close()
    return n


@pytest.mark.parametrize("bitmap", [False, True])
def test_push_and_pull_get_exactly_the_matching_messages(store_dir, broker_name, config, bitmap):
    config = dict(config, enableCalcFilterBitMap=bitmap)
    got: list[bytes] = []
    lock = threading.Lock()
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        p.send(Message("S", b"first"))  # the topic exists before the group joins
        c = _push(broker_name, "sg", got, lock)
        with c:
            want = _send(p, "S", 300)
            assert wait_for(lambda: len(got) >= len(want), 15)
            assert wait_for(lambda: _skipped(store_dir, "sg", "S", 4) > 0, 2) is bitmap
        assert sorted(got) == sorted(want) and len(got) == len(want)
        # a pull consumer of the same group reads through the bitmap when there is one
        assert sorted(_pull_all(broker_name, "sg", "S")) == sorted(want)
        assert sorted(_pull_all(broker_name, "other", "S")) == sorted(want)  # no bitmap for it: exact
        skipped = _skipped(store_dir, "sg", "S", 4)
        assert (skipped >= 300 - len(want) - 4) if bitmap else skipped == 0
    # after a restart: old entries keep their generation, new ones get bits once the group is back
    got.clear()
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        c = _push(broker_name, "sg", got, lock)
        with c:
            assert wait_for(lambda: c._session is not None, 30)
            more = _send(p, "S", 200, start=300)
            assert wait_for(lambda: len(got) >= len(more), 15)
        assert sorted(got) == sorted(more)
        assert sorted(_pull_all(broker_name, "sg", "S")) == sorted(want | more)
        if bitmap:
            assert _skipped(store_dir, "sg", "S", 4) >= 500 - len(want) - len(more) - 4


def test_bad_sql_is_refused_at_join_and_the_broker_serves_on(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, dict(config, enableCalcFilterBitMap=True)):
        pc = PullConsumer("hg", broker=broker_name).start()
        try:
            for bad in (
                {"type": "SQL92", "expression": "a >"},
                {"type": "SQL92", "expression": "(" * 5000},
                {"type": "SQL92", "expression": 7},
                {"type": "XYZ", "expression": "a"},
                ["x"],
            ):
                with pytest.raises(BrokerError) as e:
                    pc._conn.admin("join_group", {"group": "hg", "subscriptions": {"S": bad}}, 3)
                assert "column" in str(e.value) or "subscription" in str(e.value)
            ok = pc._conn.admin(
                "join_group", {"group": "hg", "subscriptions": {"S": {"type": "SQL92", "expression": "a > 1"}}}, 3
            )
            assert ok["members"]
            groups = pc._conn.admin("list_groups", {}, 3)["groups"]
            assert list(groups["hg"]["subscriptions"].values()) == [{"S": {"type": "SQL92", "expression": "a > 1"}}]
        finally:
            pc.shutdown()


def test_property_filter_off_refuses_sql_groups(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, dict(config, enablePropertyFilter=False)):
        c = PushConsumer("og", broker=broker_name, start_timeout=2)
        c.subscribe("S", shmq.sql("a > 1"))
        c.register_listener(lambda msgs, ctx: ConsumeResult.SUCCESS)
        with pytest.raises(ShmqError, match="enablePropertyFilter"):
            c.start()
        c.shutdown()
