"""Send and consume hooks: called with the right contexts, on success and failure; a raising hook is harmless."""

from __future__ import annotations

import threading

import pytest

import shmq
from shmq import Admin, ConsumeFrom, ConsumeResult, Message, MessageBatch, Producer, PushConsumer, SendStatus
from shmq.client.hooks import ASYNC, ONEWAY, SYNC, ConsumeMessageContext, SendMessageContext
from shmq.errors import BrokerError
from tests.waiting import wait_for


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.lock = threading.Lock()

    def _add(self, kind: str, ctx: object) -> None:
        with self.lock:
            self.events.append((kind, ctx))

    def send_message_before(self, ctx: SendMessageContext) -> None:
        assert ctx.result is None and ctx.exception is None
        self._add("before", ctx)

    def send_message_after(self, ctx: SendMessageContext) -> None:
        self._add("after", ctx)

    def consume_message_before(self, ctx: ConsumeMessageContext) -> None:
        assert ctx.status is None
        self._add("before", ctx)

    def consume_message_after(self, ctx: ConsumeMessageContext) -> None:
        self._add("after", ctx)

    def afters(self) -> list:
        with self.lock:
            return [c for k, c in self.events if k == "after"]


class Broken:
    def send_message_before(self, ctx):
        raise RuntimeError("hook bug")

    send_message_after = consume_message_before = consume_message_after = send_message_before


def test_send_hooks_see_every_kind_of_send(store_dir, broker_name, config):
    rec = Recorder()
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        p.register_send_hook(Broken())  # raises in before and after: logged, never breaks a send
        p.register_send_hook(rec)
        r = p.send(Message("H", b"sync", tags="A"))
        ra = p.send_async(Message("H", b"async")).result(5)
        p.send_oneway(Message("H", b"oneway"))
        rb = p.send_batch([Message("H", b"b1"), Message("H", b"b2")])
        rc = p.send_batch_async(MessageBatch("H", [b"c1", b"c2", b"c3"])).result(5)
        assert wait_for(lambda: len(rec.afters()) == 5, 30)
        kinds = [k for k, _ in rec.events]
        assert kinds.count("before") == 5
        by_body = {}
        for c in rec.afters():
            m = c.message
            by_body[m.body if isinstance(m, Message) else len(m)] = c
        sync = by_body[b"sync"]
        assert (sync.group, sync.mode, sync.result, sync.queue, sync.success) == ("pg", SYNC, r, r.queue, True)
        assert sync.result.status is SendStatus.SEND_OK and sync.cost_ms > 0
        assert sync.end_timestamp >= sync.begin_timestamp > 0
        assert (by_body[b"async"].mode, by_body[b"async"].result) == (ASYNC, ra)
        assert (by_body[b"oneway"].mode, by_body[b"oneway"].result, by_body[b"oneway"].success) == (ONEWAY, None, True)
        assert (by_body[2].mode, by_body[2].result) == (SYNC, rb)
        assert (by_body[3].mode, by_body[3].result, by_body[3].result.count) == (ASYNC, rc, 3)


def test_a_failed_send_reaches_after_with_its_exception(store_dir, broker_name, config):
    rec = Recorder()
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        Admin(broker=broker_name).create_topic("ReadOnly", queues=1, perm=4)
        p.register_send_hook(rec)
        with pytest.raises(BrokerError) as sync_error:
            p.send(Message("ReadOnly", b"x"))
        fut = p.send_async(Message("ReadOnly", b"y"))
        with pytest.raises(BrokerError):
            fut.result(5)
        assert wait_for(lambda: len(rec.afters()) == 2, 30)
        first, second = rec.afters()
        assert first.exception is sync_error.value and not first.success and first.result is None
        assert isinstance(second.exception, BrokerError) and second.mode == ASYNC and not second.success


def test_consume_hooks_around_each_listener_call(store_dir, broker_name, config):
    rec = Recorder()
    calls = []

    def listener(msgs, ctx):
        calls.append(msgs[0].body)
        if msgs[0].body == b"fail" and calls.count(b"fail") == 1:
            raise ValueError("listener bug")
        return ConsumeResult.SUCCESS

    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        p.send(Message("C", b"ok"), selector=lambda q, m, a: q[0])
        p.send(Message("C", b"fail"), selector=lambda q, m, a: q[0])
        c = PushConsumer("cg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET)
        c.subscribe("C", "*")
        c.register_listener(listener)
        c.register_consume_hook(Broken())
        c.register_consume_hook(rec)
        with c:
            with pytest.raises(shmq.ShmqError):
                c.register_consume_hook(Recorder())  # hooks are set before start
            assert wait_for(lambda: len(rec.afters()) == 3, 10), rec.events
        afters = rec.afters()
        ok = next(a for a in afters if a.messages[0].body == b"ok")
        fails = [a for a in afters if a.messages[0].body == b"fail"]
        assert (ok.group, ok.queue.topic, ok.queue.queue_id, ok.status, ok.success) == (
            "cg",
            "C",
            0,
            ConsumeResult.SUCCESS,
            True,
        )
        assert ok.cost_ms >= 0 and ok.end_timestamp >= ok.begin_timestamp
        assert fails[0].status is ConsumeResult.RECONSUME_LATER and isinstance(fails[0].exception, ValueError)
        assert not fails[0].success and fails[1].success
        assert [k for k, _ in rec.events].count("before") == 3
