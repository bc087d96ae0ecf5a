"""PushConsumer against a real broker: groups across processes, member death, broadcasting, orderly,
redelivery, where a new group starts."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter, defaultdict

import shmq
from shmq import ConsumeFrom, ConsumeResult, Message, Producer, PushConsumer
from shmq.client.consumer import pull_wrapper
from tests.waiting import wait_for

from .procs import bodies, expect_line, received, spawn, stop


def _consumer(broker: str, group: str, listener, **kw) -> PushConsumer:
    c = PushConsumer(group, broker=broker, **kw)
    c.subscribe(kw.pop("topic", "T"), "*")
    c.register_listener(listener)
    return c


def test_clustering_group_of_two_processes_gets_each_message_once(store_dir, broker_name, config, tmp_path):
    a_out, b_out = str(tmp_path / "a"), str(tmp_path / "b")
    a = spawn("consume", broker_name, "cg", a_out)
    b = None
    with shmq.Broker(store_dir, broker_name, config):
        try:
            expect_line(a, "ready")
            first = spawn("produce", broker_name, "T", 300)
            expect_line(first, "sent")
            stop(first)
            b = spawn("consume", broker_name, "cg", b_out)  # joins mid-stream: a rebalance hands queues over
            expect_line(b, "ready")
            second = spawn("produce", broker_name, "T", 300, opts={"start": 300})
            expect_line(second, "sent")
            stop(second)
            assert wait_for(lambda: len(bodies(a_out, b_out)) == 600, 20), len(bodies(a_out, b_out))
        finally:
            assert stop(a) == 0 and (b is None or stop(b) == 0)
    got = bodies(a_out, b_out)
    assert set(got) == {str(i) for i in range(600)}
    assert max(got.values()) == 1, [k for k, v in got.items() if v > 1][:10]
    assert {q for _, q, _ in received(a_out)[-50:]}.isdisjoint({q for _, q, _ in received(b_out)[-50:]})


def test_member_killed_mid_stream_survivors_get_everything(store_dir, broker_name, config, tmp_path):
    outs = [str(tmp_path / f"c{i}") for i in range(3)]
    with shmq.Broker(store_dir, broker_name, config):
        members = [spawn("consume", broker_name, "cg", out, opts={"delay": 0.002}) for out in outs]
        try:
            for m in members:
                expect_line(m, "ready")
            producer = spawn("produce", broker_name, "T", 1500, opts={"pause": 0.0005})
            assert wait_for(lambda: len(received(outs[0])) > 20, 20)
            members[0].send_signal(signal.SIGKILL)
            expect_line(producer, "sent")
            stop(producer)
            assert wait_for(lambda: len(bodies(*outs)) == 1500, 30), 1500 - len(bodies(*outs))
        finally:
            for m in members:
                stop(m)
    assert set(bodies(*outs)) == {str(i) for i in range(1500)}


def test_broadcasting_each_member_gets_everything(store_dir, broker_name, config, tmp_path):
    outs = [str(tmp_path / f"c{i}") for i in range(2)]
    with shmq.Broker(store_dir, broker_name, config):
        members = [
            spawn(
                "consume",
                broker_name,
                "bg",
                out,
                opts={"model": "BROADCASTING", "instance": f"i{i}", "offset_dir": str(tmp_path / "offsets")},
            )
            for i, out in enumerate(outs)
        ]
        try:
            for m in members:
                expect_line(m, "ready")
            producer = spawn("produce", broker_name, "T", 400)
            expect_line(producer, "sent")
            stop(producer)
            assert wait_for(lambda: all(len(bodies(o)) == 400 for o in outs), 20)
        finally:
            for m in members:
                stop(m)
    for o in outs:
        got = bodies(o)
        assert set(got) == {str(i) for i in range(400)} and max(got.values()) == 1
    assert (tmp_path / "offsets" / "i0" / "bg.json").exists()


def test_orderly_listener_keeps_per_order_id_order(store_dir, broker_name, config, tmp_path):
    out = str(tmp_path / "orderly")
    with shmq.Broker(store_dir, broker_name, config):
        c = spawn("consume", broker_name, "og", out, opts={"orderly": True, "topic": "Ord"})
        try:
            expect_line(c, "ready")
            producers = [
                spawn("produce", broker_name, "Ord", 200, opts={"order_ids": 16, "start": k * 200}) for k in range(2)
            ]
            for p in producers:
                expect_line(p, "sent")
                stop(p)
            assert wait_for(lambda: len(received(out)) >= 400, 20)
        finally:
            stop(c)
    seqs: dict[str, list[int]] = defaultdict(list)
    for body, _, _ in received(out):
        oid, n = body.split(":")
        seqs[oid].append(int(n))
    for oid, ns in seqs.items():
        per_producer = [[n for n in ns if n // 200 == k] for k in range(2)]
        assert all(p == sorted(p) for p in per_producer), oid
    assert sum(len(v) for v in seqs.values()) == 400


def test_orderly_suspend_retries_the_same_messages(store_dir, broker_name, config):
    seen: list[tuple[bytes, int]] = []
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:

        def listener(msgs, ctx):
            m = msgs[0]
            seen.append((m.body, m.reconsume_times))
            if m.body == b"1" and m.reconsume_times < 2:
                ctx.suspend_current_queue_time = 0.05
                return ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
            return ConsumeResult.SUCCESS

        c = PushConsumer("og", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET)
        c.subscribe("Sus")
        c.register_listener(listener, orderly=True)
        for i in range(4):
            p.send(Message("Sus", b"%d" % i), selector=lambda qs, m, a: qs[0])
        with c:
            assert wait_for(lambda: len(seen) >= 6, 10)
    assert seen == [(b"0", 0), (b"1", 0), (b"1", 1), (b"1", 2), (b"2", 0), (b"3", 0)]


def test_reconsume_later_redelivers_and_nothing_is_lost(store_dir, broker_name, config, monkeypatch):
    # a long poll (15 s) stretched to 120 s: a redelivery that only a long poll's timeout
    # brings back (a lost wake-up) then fails the wait below instead of passing on an idle
    # machine and failing on a loaded one
    monkeypatch.setattr(pull_wrapper, "LONG_POLL_S", 120.0)
    config["messageDelayLevel"] = " ".join(f"{10 * (k + 1)}ms" for k in range(18))  # retries come back fast
    seen = Counter()
    deliveries: dict[bytes, set[int]] = defaultdict(set)
    lock = threading.Lock()

    def listener(msgs, ctx):
        with lock:
            for m in msgs:
                deliveries[m.body].add(m.reconsume_times)
            for m in msgs:
                if int(m.body) % 5 == 0 and m.reconsume_times < 2:
                    return ConsumeResult.RECONSUME_LATER
                if int(m.body) == 7 and m.reconsume_times == 0:
                    raise RuntimeError("a listener that throws is retried too")
            seen.update(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        c = _consumer(
            broker_name, "rg", listener, consume_from=ConsumeFrom.FIRST_OFFSET, consume_message_batch_max_size=4
        )
        for i in range(100):
            p.send_oneway(Message("T", b"%d" % i))
        with c:
            assert wait_for(lambda: len(seen) == 100, 60), 100 - len(seen)
        pc = shmq.PullConsumer("rg", broker=broker_name).start()
        committed = sum(pc.fetch_consume_offset(q, from_store=True) for q in pc.fetch_queues("T"))
        pc.shutdown()
    assert all(deliveries[b"%d" % i] >= {0, 1, 2} for i in range(0, 100, 5))  # redelivered, counting up
    assert deliveries[b"7"] >= {0, 1}
    assert committed == 100  # shutdown committed everything, nothing past a message still in redelivery


def test_consume_from_for_new_groups(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        for i in range(20):
            p.send(Message("T", b"old%d" % i))
        time.sleep(0.05)
        middle = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(10):
            p.send(Message("T", b"mid%d" % i))
        got: dict[str, list[bytes]] = defaultdict(list)
        consumers = []
        for name, kw in (
            ("first", {"consume_from": ConsumeFrom.FIRST_OFFSET}),
            ("last", {"consume_from": ConsumeFrom.LAST_OFFSET}),
            ("stamp", {"consume_from": ConsumeFrom.TIMESTAMP, "consume_timestamp": middle}),
        ):
            c = _consumer(
                broker_name,
                name,
                lambda msgs, ctx, name=name: got[name].extend(m.body for m in msgs) or ConsumeResult.SUCCESS,
                **kw,
            )
            consumers.append(c.start())
        admin = shmq.Admin(broker=broker_name)

        def started(group: str) -> bool:  # a new group's start offsets are committed as it takes its queues
            return sum(q.committed >= 0 for q in admin.consumer_progress(group).queues if q.topic == "T") == 4

        assert wait_for(lambda: all(started(g) for g in ("first", "last", "stamp")), 30)
        for i in range(5):
            p.send(Message("T", b"new%d" % i))
        assert wait_for(lambda: len(got["first"]) == 35 and len(got["last"]) == 5 and len(got["stamp"]) == 15, 30), {
            k: len(v) for k, v in got.items()
        }
        for c in consumers:
            c.shutdown()
    assert sorted(got["last"]) == [b"new%d" % i for i in range(5)]
    assert sorted(got["stamp"]) == sorted([b"mid%d" % i for i in range(10)] + [b"new%d" % i for i in range(5)])


def test_queues_whose_long_polls_the_broker_refused_are_still_pulled(store_dir, broker_name, config):
    """After a WAKE the puller pulls only the queues without an unanswered PULL_WAIT; a wait the
    broker refused (SYSTEM_BUSY) is never answered, so the periodic full pass must find those."""
    config["maxPullWaitersPerClient"] = 1
    got: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs, _ctx):
        with lock:
            got.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        p.send(Message("Busy", b"make"))  # the topic (4 queues) exists before the consumer joins
        c = PushConsumer("bg", broker=broker_name)
        c.subscribe("Busy")
        c.register_listener(listener)
        with c:
            time.sleep(0.2)  # idle: one wait is held, the others were refused
            for round_ in range(3):
                for q in range(4):
                    p.send(Message("Busy", b"%d-%d" % (round_, q)), selector=lambda qs, m, a, q=q: qs[q])
                time.sleep(0.05)
            assert wait_for(lambda: len(got) == 12, 10), sorted(got)
    assert sorted(got) == sorted(b"%d-%d" % (r, q) for r in range(3) for q in range(4))


def test_the_parked_puller_reads_its_wakes_and_the_listeners_answers(store_dir, broker_name, config):
    """A parked puller reads the response ring itself (the reader thread stands down): WAKEs are
    handled in the puller's thread, and the send-back answers the listener's worker threads wait
    for still arrive while it sleeps (it reads them too); all messages come, retries included."""
    config["messageDelayLevel"] = " ".join(f"{10 * (k + 1)}ms" for k in range(18))
    seen: set[bytes] = set()
    readers: Counter = Counter()
    lock = threading.Lock()

    def listener(msgs, _ctx):
        with lock:
            for m in msgs:
                if int(m.body) % 3 == 0 and m.reconsume_times == 0:
                    return ConsumeResult.RECONSUME_LATER  # a send-back: its answer comes on the ring
            seen.update(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        p.send(Message("T", b"-1"))
        c = _consumer(broker_name, "dg", listener)
        wrapper = c._wrapper
        original = wrapper.on_response

        def on_response(kind, view):
            readers[threading.current_thread().name] += 1
            original(kind, view)

        wrapper.on_response = on_response  # type: ignore[method-assign]
        with c:
            time.sleep(0.3)
            for i in range(30):
                p.send(Message("T", b"%d" % i))
                time.sleep(0.01)  # the puller parks between messages
            assert wait_for(lambda: len(seen) >= 30, 15), sorted(seen)
            assert c._conn._deputy is not None  # the reader thread stood down
    assert readers[c._thread.name] >= 20, readers  # the WAKEs (and answers) were read by the puller itself


def test_the_puller_calls_the_listener_and_a_held_call_stops_no_pull(store_dir, broker_name, config):
    """A message found by a parked puller goes to the listener on that puller's thread (no hand-off
    to a pool thread); the other puller thread pulls meanwhile, so while that call holds, a
    message of another queue still reaches the listener (a second call: consume_thread_max=2)."""
    gate = threading.Event()
    calls: list[tuple[bytes, str]] = []
    lock = threading.Lock()

    def listener(msgs, _ctx):
        with lock:
            calls.extend((m.body, threading.current_thread().name) for m in msgs)
        if any(m.body == b"hold" for m in msgs):
            gate.wait(30)
        return ConsumeResult.SUCCESS

    def bodies_seen() -> list[bytes]:
        with lock:
            return [b for b, _ in calls]

    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        p.send(Message("H", b"make"))  # the topic (4 queues) exists before the consumer joins
        c = PushConsumer("hg", broker=broker_name, consume_thread_max=2, consume_from=ConsumeFrom.FIRST_OFFSET)
        c.subscribe("H")
        c.register_listener(listener)
        with c:
            assert wait_for(lambda: b"make" in bodies_seen(), 30)
            time.sleep(0.2)  # the pullers park
            p.send(Message("H", b"hold"), selector=lambda qs, m, a: qs[0])
            assert wait_for(lambda: b"hold" in bodies_seen(), 30)
            p.send(Message("H", b"other"), selector=lambda qs, m, a: qs[1])
            try:
                assert wait_for(lambda: b"other" in bodies_seen(), 30), bodies_seen()  # while "hold" holds
            finally:
                gate.set()
            held_by = dict(calls)[b"hold"]
            assert held_by == f"shmq-pull-{c.group}", calls
