"""Issue 10, A2-A6 and D14: hostile or careless control-queue clients cannot crash, wedge or
spoof the broker. The helpers speak the control queue directly (any process on the machine can)."""

from __future__ import annotations

import itertools
import json
import logging
import multiprocessing as mp
import os
import threading
import time

import sysv_ipc

import shmq
from shmq import ConsumeFrom, Message, Producer, PushConsumer
from shmq.errors import ControlTimeoutError
from shmq.model.system_topics import is_system_topic
from shmq.ring.channel import Channel, broker_bell_name, channel_name
from shmq.ring.control import Admin, Attach, ControlQueue, Detach, Reply, new_client_id
from shmq.ring.doorbell import Doorbell, wake
from shmq.ring.framing import CONSUMER
from shmq.ring.liveness import Liveness
from shmq.ring.state import StateReader
from tests.waiting import wait_for

ctx = mp.get_context("fork")
_req_ids = itertools.count(1)


def control_queue(broker: str) -> ControlQueue:
    state = StateReader.open(broker)
    try:
        return ControlQueue.open(int(state.view.header[0]["control_key"]))
    finally:
        state.close()


def ring_bell(broker: str) -> None:
    bell = Doorbell.open(broker_bell_name(broker))
    bell.ring()
    bell.close()


def send(broker: str, req: Admin | Attach | Detach, timeout: float = 3.0) -> None:
    control_queue(broker).send_request(req, timeout)
    ring_bell(broker)


def call(broker: str, req: Admin | Attach | Detach, timeout: float = 3.0) -> Reply:
    send(broker, req, timeout)
    return control_queue(broker).recv_reply(req.client_id, req.req_id, timeout)


def admin(broker: str, command: str, **args: object) -> Reply:
    return call(broker, Admin(new_client_id(), next(_req_ids), command, args))


def client_ids(broker: str) -> set[int]:
    state = StateReader.open(broker)
    try:
        v = state.snapshot()
        return {int(c["client_id"]) for c in v.clients if c["used"]}
    finally:
        state.close()


# ---------------------------------------------------------------------------------------- A2


def test_bad_admin_fields_get_error_replies_and_never_persist(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        assert admin(broker_name, "create_topic", topic="T", read_queue_nums=2, write_queue_nums=2).ok
        for args in (
            {"offset": 2**70},
            {"offset": -1},
            {"offset": True},
            {"offset": "5"},
            {"queue_id": 2},
            {"queue_id": -1},
            {"group": "bad group"},
            {"group": 7},
            {"topic": "no/topic"},
            {"extra": 1},
        ):
            reply = admin(
                broker_name, "commit_offset", **{"group": "cg", "topic": "T", "queue_id": 1, "offset": 5, **args}
            )
            assert not reply.ok and "error" in reply.body, args
        for command, args in (
            ("create_topic", {"topic": "U", "perm": "6"}),
            ("join_group", {"group": "cg"}),
            ("search_offset", {"topic": "T", "queue_id": 0, "timestamp": 2**64}),
            ("queue_offsets", {"topic": "T", "queue_id": 9}),
        ):
            assert not admin(broker_name, command, **args).ok, command
        assert admin(broker_name, "commit_offset", group="cg", topic="T", queue_id=1, offset=2**63 - 1).ok
        assert admin(broker_name, "list_topics").ok  # the broker lives
    with open(os.path.join(store_dir, "config", "consumerOffset.json")) as f:
        assert json.load(f)["offsetTable"] == {"T@cg": {"1": 2**63 - 1}}
    with shmq.Broker(store_dir, broker_name, config):  # restart works
        assert admin(broker_name, "query_offset", group="cg", topic="T", queue_id=1).body["offset"] == 2**63 - 1


# ---------------------------------------------------------------------------------------- A3


def _leave_without_reading(broker: str, n: int) -> None:
    """Send ``n`` requests under fresh ids, read no reply, exit."""
    q = control_queue(broker)
    try:
        for _ in range(n):
            q.send_request(Admin(new_client_id(), 1, "list_topics", {}), timeout=0.3)
            ring_bell(broker)
    except ControlTimeoutError:
        pass
    os._exit(0)


def test_replies_nobody_reads_do_not_wedge_the_control_plane(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        for i in range(60):  # ~4 KiB per list_topics reply: the 16 KiB queue holds 3
            assert admin(broker_name, "create_topic", topic=f"Topic{i:03}", read_queue_nums=1, write_queue_nums=1).ok
        procs = [ctx.Process(target=_leave_without_reading, args=(broker_name, 60)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
        t0 = time.monotonic()
        assert len([t for t in shmq.Admin(broker_name, timeout=60).topics() if not is_system_topic(t)]) == 60
        with Producer("pg", broker=broker_name, start_timeout=60) as producer:
            assert producer.send(Message("Topic000", b"x")).status is shmq.SendStatus.SEND_OK
        assert time.monotonic() - t0 < 30  # served, not stuck behind the clients that left until a timeout


# ---------------------------------------------------------------------------------------- A4


def _spoof(broker: str, victims: list[int], out) -> None:
    refused = []
    for cid in victims:
        refused.append(not call(broker, Detach(cid, next(_req_ids))).ok)
        refused.append(not call(broker, Admin(cid, next(_req_ids), "join_group", {"group": "evil"})).ok)
    out.put(refused)


def test_spoofed_detach_is_refused(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config) as broker, Producer("pg", broker=broker_name) as producer:
        assert producer.send(Message("T", b"before")).status is shmq.SendStatus.SEND_OK
        victim = producer._conn.session.client_id
        out = ctx.Queue()
        p = ctx.Process(target=_spoof, args=(broker_name, [victim], out))
        p.start()
        refused = out.get(timeout=20)
        p.join(10)
        assert refused == [True, True]
        assert victim in client_ids(broker_name)
        assert producer.send(Message("T", b"after")).status is shmq.SendStatus.SEND_OK
        assert producer._conn.session.client_id == victim  # the same channel: it never left
        assert "refused DETACH for client" in broker.log() and "wrong channel secret" in broker.log()


def test_dropped_clients_attach_again_by_themselves(store_dir, broker_name, config, caplog):
    got: list[bytes] = []
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as producer:
        producer.send(Message("T", b"0"))
        consumer = PushConsumer("cg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET)
        consumer.subscribe("T", "*")
        consumer.register_listener(lambda msgs, _ctx: got.extend(m.body for m in msgs) or shmq.ConsumeResult.SUCCESS)
        with consumer:
            assert wait_for(lambda: got == [b"0"], 10), got
            for conn in (producer._conn, consumer._conn):  # the broker drops both for a malformed frame
                ch = conn.session.channel
                assert ch.requests.try_write(0xEE, b"junk")
                wake(ch.requests, CONSUMER, ch.broker_bell)
            old = {producer._conn.session.client_id, consumer._conn.session.client_id}
            assert wait_for(lambda: not old & client_ids(broker_name), 30)
            # a send racing the drop fails like one racing a broker restart; the client sees the flag within 50 ms
            assert wait_for(lambda: producer._conn.session is None or producer._conn.session.client_id not in old, 30)
            for i in range(1, 6):
                assert producer.send(Message("T", str(i).encode()), timeout=5).status is shmq.SendStatus.SEND_OK
            assert wait_for(lambda: sorted(got[1:]) == [b"1", b"2", b"3", b"4", b"5"], 10), got
            assert producer._conn.session.client_id not in old
    # a drop is not a fault of the client: nothing logged as an error (a puller that was reading
    # the closed session's state segment used to log "puller failed" with a traceback)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


# ---------------------------------------------------------------------------------------- A5


def _attach(
    broker: str, ring_bytes: int = 65536, pid: int | None = None, cid: int | None = None
) -> tuple[Reply, Liveness, int]:
    liveness = Liveness.hold()
    cid = new_client_id() if cid is None else cid
    req = Attach(
        cid, next(_req_ids), os.getpid() if pid is None else pid, liveness.key, ring_bytes, {"role": "producer"}
    )
    return call(broker, req), liveness, cid


def _attach_in_child(broker: str, out) -> None:
    reply, liveness, cid = _attach(broker)
    out.put((reply.ok, reply.body.get("error", "")))
    if reply.ok:
        call(broker, Detach(cid, next(_req_ids), Channel.open(broker, cid).secret))
    liveness.release()


def test_attach_limits_per_process(store_dir, broker_name, config):
    held: list[tuple[Liveness, int]] = []
    try:
        with shmq.Broker(store_dir, broker_name, {**config, "maxClientsPerProcess": 2}):
            for _ in range(2):
                reply, liveness, cid = _attach(broker_name)
                held.append((liveness, cid))
                assert reply.ok, reply.body
            reply, liveness, _ = _attach(broker_name)
            liveness.release()
            assert not reply.ok and "maxClientsPerProcess=2" in reply.body["error"]
            reply, liveness, _ = _attach(broker_name, pid=1)  # its own semaphore, another pid's name
            liveness.release()
            assert not reply.ok and "not held by pid 1" in reply.body["error"]
            out = ctx.Queue()
            p = ctx.Process(target=_attach_in_child, args=(broker_name, out))
            p.start()
            assert out.get(timeout=20) == (True, "")  # another process still gets its channel
            p.join(10)
            for _, cid in held:
                call(broker_name, Detach(cid, next(_req_ids), Channel.open(broker_name, cid).secret))
    finally:
        for liveness, _ in held:
            liveness.release()


def test_attach_limits_total_and_ring_bytes(store_dir, broker_name, config):
    cfg = {**config, "maxChannels": 2, "maxRingBytesTotal": 3 * (64 + 2 * (65536 + 4096))}
    out = ctx.Queue()
    with shmq.Broker(store_dir, broker_name, cfg):
        first, l1, c1 = _attach(broker_name)
        assert first.ok
        big, l2, _ = _attach(broker_name, ring_bytes=1 << 20)
        l2.release()
        assert not big.ok and "maxRingBytesTotal" in big.body["error"]
        second, l3, c3 = _attach(broker_name)
        assert second.ok
        p = ctx.Process(target=_attach_in_child, args=(broker_name, out))
        p.start()
        ok, error = out.get(timeout=20)
        p.join(10)
        assert not ok and "maxChannels=2" in error
        for liveness, cid in ((l1, c1), (l3, c3)):
            call(broker_name, Detach(cid, next(_req_ids), Channel.open(broker_name, cid).secret))
            liveness.release()


# ---------------------------------------------------------------------------------------- A6


def test_list_topics_of_any_size(store_dir, broker_name, config):
    os.makedirs(os.path.join(store_dir, "config"), exist_ok=True)
    table = {
        f"Topic{i:05}": {"topicName": f"Topic{i:05}", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}
        for i in range(2000)
    }
    with open(os.path.join(store_dir, "config", "topics.json"), "w") as f:
        json.dump({"topicConfigTable": table}, f)
    with shmq.Broker(store_dir, broker_name, config):
        t0 = time.monotonic()
        topics = shmq.Admin(broker_name, timeout=60).topics()
        assert sorted(n for n, t in topics.items() if not t.system) == sorted(table) and time.monotonic() - t0 < 30
        threads = [threading.Thread(target=lambda: shmq.Admin(broker_name).topics()) for _ in range(3)]
        for t in threads:  # several long replies at once share the queue
            t.start()
        for t in threads:
            t.join(10)
        assert admin(broker_name, "list_topics").ok


# ---------------------------------------------------------------------------------------- D14


def _garbage_then_exit(broker: str, out) -> None:
    liveness = Liveness.hold()
    cid = new_client_id()
    reply = call(broker, Attach(cid, next(_req_ids), os.getpid(), liveness.key, 65536, {"role": "producer"}))
    assert reply.ok, reply.body
    ch = Channel.open(broker, cid)
    ch.requests.try_write(0xEE, b"junk")
    wake(ch.requests, CONSUMER, ch.broker_bell)
    wait_for(lambda: not os.path.exists("/dev/shm" + channel_name(broker, cid)), 5)
    out.put(liveness.key)
    out.close()
    out.join_thread()
    os._exit(0)  # dies without cleaning up: only the broker can remove its semaphore now


def test_semaphore_of_a_client_dropped_for_garbage_is_removed_when_it_exits(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        out = ctx.Queue()
        p = ctx.Process(target=_garbage_then_exit, args=(broker_name, out))
        p.start()
        key = out.get(timeout=20)
        p.join(10)
        assert wait_for(lambda: not _exists(key), 30)


def _exists(key: int) -> bool:
    try:
        sysv_ipc.Semaphore(key)
    except sysv_ipc.ExistentialError:
        return False
    return True


def test_attach_past_the_state_table_is_refused(store_dir, broker_name, config):
    capacity = 1024  # the state segment's client table (StateLayout.clients)
    held: list[Liveness] = []
    try:
        with shmq.Broker(store_dir, broker_name, {**config, "maxClientsPerProcess": 5000, "maxChannels": 5000}):
            q = control_queue(broker_name)
            for first in range(0, capacity, 50):  # requests in batches: one round trip per batch
                reqs = []
                for cid in range(2**30 + first, 2**30 + min(capacity, first + 50)):  # more ids than one pid has
                    held.append(Liveness.hold())
                    reqs.append(Attach(cid, 1, os.getpid(), held[-1].key, 4096, {"role": "producer"}))
                    send(broker_name, reqs[-1])
                for req in reqs:
                    assert q.recv_reply(req.client_id, 1, 5.0).ok
            reply, liveness, _ = _attach(broker_name, ring_bytes=4096)
            liveness.release()
            assert not reply.ok and "state table 1024" in reply.body["error"]
            assert len(client_ids(broker_name)) == capacity
            for liveness in held:  # as if they all died: the broker drops them
                liveness.release()
            assert wait_for(lambda: not client_ids(broker_name), 10)
    finally:
        for liveness in held:
            liveness.release()


def test_group_joins_cannot_fill_the_group_table(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config):
        reply, liveness, cid = _attach(broker_name)
        assert reply.ok
        ch = Channel.open(broker_name, cid)
        secret = ch.secret
        ch.close()

        def batch(*args: tuple[str, str]) -> list[Reply]:
            # one request in flight per client id, as a client does: sending drops that id's unread replies
            return [
                call(broker_name, Admin(cid, next(_req_ids), command, {"group": group}, secret), 5.0)
                for command, group in args
            ]

        try:
            replies = batch(*(("join_group", f"g{i}") for i in range(17)))
            assert all(r.ok for r in replies[:16]) and "groups, the most" in replies[16].body["error"]
            for n in range(1, 21):  # 336 group names in all: more than the table's 256 rows
                replies = batch(
                    *(("leave_group", f"g{(n - 1) * 16 + i}") for i in range(16)),
                    *(("join_group", f"g{n * 16 + i}") for i in range(16)),
                )
                assert all(r.ok for r in replies), [r.body for r in replies if not r.ok][:1]
        finally:
            liveness.release()  # it dies: leaving its groups must not take the broker down
        assert wait_for(lambda: cid not in client_ids(broker_name), 30)
        assert admin(broker_name, "list_groups").ok
