"""Producer(namesrv=) over real brokers and a real name server: spread, failover, ordered sends,
fault tolerance, transactions, aio, MessageHandler, trace, and the errors a user sees."""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
import threading
import time

import pytest

import shmq
from shmq import Admin, Message, Producer, TransactionProducer, TransactionStatus
from shmq.client.producer.cluster import ClusterProducer
from shmq.errors import BrokerGoneError, ConfigError, NameServerNotFoundError, SendTimeoutError
from tests.process.broker.conftest import SMALL, open_store
from tests.pulling import read_topic as read_all
from tests.waiting import wait_for

from .conftest import restart


def _create(cluster: shmq.Cluster, topic: str, queues: int = 4) -> None:
    """``topic`` on every broker, and in the routes."""
    for name in cluster.broker_names:
        Admin(name).create_topic(topic, queues)
    reader = shmq.namesrv.segment.RouteReader(cluster.namesrv.name)
    try:
        assert wait_for(lambda: len(reader.read().topic_route(topic).brokers) == len(cluster.broker_names), 30)
    finally:
        reader.close()


def test_sends_go_round_robin_over_every_broker(make_cluster, namesrv):
    c = make_cluster(3)
    _create(c, "Spread")
    # without fault tolerance: on a loaded machine one answer over 550 ms would skip its broker for 30 s
    with Producer("spread", namesrv=namesrv, send_latency_fault_enable=False) as p:
        assert isinstance(p, ClusterProducer)
        sync = collections.Counter(p.send(Message("Spread", b"s")).queue.broker_name for _ in range(300))
        futs = []
        for _ in range(30):  # auto-batched: a batch goes to one broker, the next batch to the next
            futs += [p.send_async(Message("Spread", b"a")) for _ in range(10)]
            assert p.flush(30) and p.pending_count == 0
        async_ = collections.Counter(f.result().queue.broker_name for f in futs)
        batches = collections.Counter(p.send_batch([Message("Spread", b"b")] * 3).queue.broker_name for _ in range(30))
        queues = p.fetch_publish_queues("Spread")
    print("per broker: sync", dict(sync), "async", dict(async_), "batch", dict(batches))
    for counts, total in ((sync, 300), (async_, 300), (batches, 30)):
        assert set(counts) == set(c.broker_names)
        assert all(abs(n - total // 3) <= 1 for n in counts.values()), counts
    assert [(q.broker_name, q.queue_id) for q in queues] == [(b, i) for b in sorted(c.broker_names) for i in range(4)]
    stored = {b: len(read_all(b, "Spread")) for b in c.broker_names}
    assert sum(stored.values()) == 300 + 300 + 90
    assert stored == {b: sync[b] + async_[b] + 3 * batches[b] for b in c.broker_names}


def test_a_topic_auto_created_by_a_send_is_created_on_every_master(make_cluster, namesrv):
    c = make_cluster(2)
    with Producer("auto", namesrv=namesrv) as p:
        r = p.send(Message("AutoTopic", b"one"))
    assert r.queue.broker_name in c.broker_names
    assert wait_for(lambda: all("AutoTopic" in Admin(b).topics() for b in c.broker_names), 30)


def test_broker_sigkilled_under_sync_sends_loses_nothing_acknowledged(make_cluster, namesrv):
    c = make_cluster(2)
    _create(c, "Kill")
    acked: list = []
    errors: list = []
    stop = threading.Event()

    def send(t: int) -> None:
        with Producer(f"kill{t}", namesrv=namesrv) as p:
            n = 0
            while not stop.is_set():
                body = b"%d-%d" % (t, n)
                try:
                    r = p.send(Message("Kill", body))
                    acked.append((r.queue.broker_name, r.queue.queue_id, r.queue_offset, body))
                except shmq.ShmqError as e:
                    errors.append(e)
                n += 1

    threads = [threading.Thread(target=send, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    assert wait_for(lambda: len({a[0] for a in acked}) == 2 and len(acked) > 200, 30)
    killed = c.brokers[1]
    at = len(acked)
    killed.kill()
    assert wait_for(lambda: len(acked) > at + 200, 30)  # the other broker takes every send
    restart(c, 1)
    assert wait_for(lambda: sum(a[0] == killed.name for a in acked[at:]) > 20, 30)  # back in the rotation
    stop.set()
    for t in threads:
        t.join(30)
    assert not errors, errors[:3]
    c.stop()
    found = 0
    for b in c.brokers:
        store = open_store(b.store_dir, SMALL)
        try:
            for name, qid, offset, body in acked:
                if name == b.name:
                    got = store.get_message("Kill", qid, offset, 1).messages
                    assert got and got[0].body == body, (name, qid, offset)
                    found += 1
        finally:
            store.shutdown()
    assert found == len(acked)


def test_ordered_send_keeps_its_queue_and_fails_clearly_while_its_broker_is_down(make_cluster, namesrv):
    c = make_cluster(2)
    _create(c, "Orders")
    with Producer("orders", namesrv=namesrv) as p:
        where = {k: p.send(Message("Orders", b"x"), sharding_key=k).queue for k in (f"order-{i}" for i in range(40))}
        on_b1 = [k for k, q in where.items() if q.broker_name == c.broker_names[1]]
        on_b0 = [k for k, q in where.items() if q.broker_name == c.broker_names[0]]
        assert on_b0 and on_b1
        c.brokers[1].kill()
        assert wait_for(lambda: c.broker_names[1] not in {q.broker_name for q in p.fetch_publish_queues("Orders")}
                        or _fails(p, on_b1[0]), 30)  # fmt: skip
        with pytest.raises(BrokerGoneError) as e:
            p.send(Message("Orders", b"y"), sharding_key=on_b1[0])
        assert c.broker_names[1] in str(e.value) and "\n" not in str(e.value)
        for k in on_b0:  # the other broker's keys go on, to their queues
            assert p.send(Message("Orders", b"y"), sharding_key=k).queue == where[k]
        restart(c, 1)
        assert wait_for(lambda: not _fails(p, on_b1[0]), 30)
        assert p.send(Message("Orders", b"z"), sharding_key=on_b1[0]).queue == where[on_b1[0]]


def _fails(p: Producer, key: str) -> bool:
    try:
        p.send(Message("Orders", b"probe"), sharding_key=key)
    except BrokerGoneError:
        return True
    return False


def test_latency_fault_tolerance_skips_a_broker_that_does_not_answer(make_cluster, namesrv):
    c = make_cluster(2)
    _create(c, "Slow")
    stopped = c.brokers[1]
    with Producer("slow", namesrv=namesrv, send_msg_timeout=1.0) as p:
        os.kill(stopped.pid, signal.SIGSTOP)  # alive (routed) but silent
        try:
            results, timeouts = [], 0
            for _ in range(40):
                try:
                    results.append(p.send(Message("Slow", b"s")).queue.broker_name)
                except SendTimeoutError:
                    timeouts += 1
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        assert timeouts <= 1  # the one send it had, then it is skipped
        assert len(results) >= 39 and set(results) == {c.broker_names[0]}
        assert not p.faults.is_available(stopped.name)


def test_transactions_are_checked_by_the_broker_holding_the_half(make_cluster, namesrv):
    c = make_cluster(2, transactionTimeOut=150, transactionCheckInterval=50, transactionCheckMax=5)
    _create(c, "Tx")
    checked: dict[str, str] = {}

    def check(m):
        checked[m.keys] = m.properties.get("checked-on", "")
        return TransactionStatus.COMMIT

    with TransactionProducer("txg", namesrv=namesrv, check=check) as tp:
        halves = {}
        for i in range(10):
            r = tp.send_in_transaction(Message("Tx", b"t%d" % i, keys=f"k{i}"), lambda m, a: TransactionStatus.UNKNOWN)
            halves[f"k{i}"] = r.queue.broker_name
        assert set(halves.values()) == set(c.broker_names)
        assert wait_for(lambda: len(checked) == 10, 30)
    stored = {m.keys: b for b in c.broker_names for m in read_all(b, "Tx")}
    assert stored == halves  # committed on the broker that held the half (and checked it)


def test_aio_producer_with_namesrv(make_cluster, namesrv):
    c = make_cluster(2)
    _create(c, "Aio")

    async def main() -> list:
        out: list = []
        async with shmq.aio.Producer("aio", namesrv=namesrv) as p:
            for wave in range(10):  # the sends of one loop iteration go as one batch, to one broker
                out += await asyncio.gather(*(p.send(Message("Aio", b"%d-%d" % (wave, i))) for i in range(20)))
        return out

    results = asyncio.run(main())
    assert {r.queue.broker_name for r in results} == set(c.broker_names)
    assert sum(len(read_all(b, "Aio")) for b in c.broker_names) == 200


def test_message_handler_with_namesrv(make_cluster, namesrv):
    c = make_cluster(2)
    _create(c, "Logs")
    log = logging.getLogger(f"app.cluster{os.getpid()}")
    log.propagate = False
    h = shmq.MessageHandler("Logs", namesrv=namesrv, level=logging.INFO)
    log.addHandler(h)
    try:
        for i in range(300):
            log.warning("line %d", i)
        assert h.flush(30) and h.sent == 300
    finally:
        log.removeHandler(h)
        h.close()
    got = {b: len(read_all(b, "Logs")) for b in c.broker_names}
    assert sum(got.values()) == 300 and all(got.values()), got


def test_trace_goes_through_the_cluster(make_cluster, namesrv):
    c = make_cluster(2)
    _create(c, "Traced")
    with Producer("traced", namesrv=namesrv, trace=True) as p:
        for _ in range(20):
            p.send(Message("Traced", b"t"))
        assert p.tracer is not None and p.tracer.flush(10)
    assert wait_for(lambda: sum(len(read_all(b, "RMQ_SYS_TRACE_TOPIC")) for b in c.broker_names) > 0, 30)


def test_env_namesrv_makes_a_cluster_producer_and_broker_wins(make_cluster, namesrv, monkeypatch):
    c = make_cluster(1)
    monkeypatch.setenv("SHMQ_NAMESRV", namesrv)
    with Producer("env") as p:
        assert isinstance(p, ClusterProducer) and p.namesrv == namesrv
        assert p.send(Message("Env", b"e")).queue.broker_name == c.broker_names[0]
    with Producer("env", broker=c.broker_names[0]) as p:
        assert type(p) is Producer


def test_user_errors_are_one_line(namesrv):
    with pytest.raises(ConfigError) as bad:
        Producer("g", namesrv="no such/name")
    with pytest.raises(ConfigError) as both:
        Producer("g", broker="b", namesrv=namesrv)
    with pytest.raises(ConfigError):
        TransactionProducer("g", broker="b", namesrv=namesrv, check=lambda m: TransactionStatus.COMMIT)
    with pytest.raises(NameServerNotFoundError) as absent:
        Producer("g", namesrv=namesrv, start_timeout=0.2).start()
    for e in (bad, both, absent):
        assert "\n" not in str(e.value)
    assert "start one with `shmq namesrv --name" in str(absent.value)


def test_reattach_timeout_zero_fails_a_send_to_a_dead_broker_at_once(make_cluster):
    c = make_cluster(1)
    with Producer("re", broker=c.broker_names[0], send_msg_timeout=60.0, reattach_timeout=0.0) as p:
        p.send(Message("Re", b"before"))
        c.brokers[0].kill()
        start = time.monotonic()
        with pytest.raises(BrokerGoneError) as e:
            while True:  # the first send after the kill may still be written before it is seen
                p.send(Message("Re", b"after"))
        assert time.monotonic() - start < 30  # not the 60 s send timeout
        assert c.broker_names[0] in str(e.value) and "\n" not in str(e.value)


def test_async_sends_to_a_sigkilled_broker_are_retried_on_another(make_cluster, namesrv):
    c = make_cluster(2)
    _create(c, "AsyncKill")
    futures = []
    with Producer("akill", namesrv=namesrv) as p:
        for i in range(3000):
            futures.append(p.send_async(Message("AsyncKill", b"%d" % i)))
            if i == 1000:
                c.brokers[1].kill()
            if i % 100 == 0:
                time.sleep(0.005)  # some batches go out before the kill, some after
        assert p.flush(30)
    failed = [f.exception() for f in futures if f.exception() is not None]
    assert not failed, failed[:3]
    where = collections.Counter(f.result().queue.broker_name for f in futures)
    assert where[c.broker_names[1]] > 0 and where[c.broker_names[0]] > 1500
    stored = {m.body for m in read_all(c.broker_names[0], "AsyncKill")}
    assert all(b"%d" % i in stored for i, f in enumerate(futures) if f.result().queue.broker_name == c.broker_names[0])


def test_oneway_batch_async_and_hooks_over_the_cluster(make_cluster, namesrv):
    c = make_cluster(2)
    _create(c, "Misc")
    seen: list[str] = []

    class Hook:
        def send_message_before(self, ctx) -> None:
            pass

        def send_message_after(self, ctx) -> None:
            seen.append(ctx.group)

    with Producer("misc", namesrv=namesrv, send_latency_fault_enable=False) as p:
        p.register_send_hook(Hook())
        for i in range(20):
            p.send_oneway(Message("Misc", b"o%d" % i))
        futs = [p.send_batch_async([Message("Misc", b"b%d-%d" % (i, j)) for j in range(5)]) for i in range(10)]
        assert p.flush(30)
        where = collections.Counter(f.result().queue.broker_name for f in futs)
    assert where == dict.fromkeys(c.broker_names, 5)
    assert len(seen) == 20 + 10 and set(seen) == {"misc"}
    assert wait_for(lambda: sum(len(read_all(b, "Misc")) for b in c.broker_names) == 20 + 50, 30)
