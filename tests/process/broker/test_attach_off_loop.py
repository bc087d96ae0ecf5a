"""Issue 10, A5 and B8: a client's channel is made (backed with posix_fallocate: ~0.3 ms per
MiB) and removed off the broker loop, so one client attaching big rings cannot stall the
others; the limits stay exact with attaches in flight, and a client that dies or gives up while
its channel is made, or a broker stopped meanwhile, leaves nothing behind."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time

import pytest

import shmq
from shmq import Message, Producer
from shmq.ring.channel import Channel, channel_name, client_bell_name
from shmq.ring.control import Attach, Detach, new_client_id
from shmq.ring.liveness import Liveness
from tests.process.broker.test_control_hostile import (
    _attach,
    _exists,
    _req_ids,
    call,
    client_ids,
    control_queue,
    send,
    wait_for,
)

ctx = mp.get_context("fork")
BIG = 64 << 20  # a 64 MiB ring: ~130 MiB of shared memory to back, ~40 ms
SLOW_MS = 25.0
PRODUCER = {"role": "producer"}


def _shm_exists(name: str) -> bool:
    return os.path.exists("/dev/shm" + name)


def _sem_exists(name: str) -> bool:
    return os.path.exists("/dev/shm/sem." + name.lstrip("/"))


def _attach_big_rings(broker: str, n: int, out) -> None:
    """Attach ``n`` big-ring channels one after the other, each detached again (its pages then
    freed by the broker's channel worker); report each attach's round trip in ms."""
    rtts = []
    for _ in range(n):
        t0 = time.perf_counter()
        reply, liveness, cid = _attach(broker, ring_bytes=BIG)
        rtts.append((time.perf_counter() - t0) * 1000)
        assert reply.ok, reply.body
        ch = Channel.open(broker, cid)
        secret = ch.secret
        ch.close()  # the broker's unlink frees the pages, not this process's exit
        assert call(broker, Detach(cid, next(_req_ids), secret)).ok
        liveness.release()
    out.put(rtts)


def test_big_attaches_do_not_stall_other_clients(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as producer:
        producer.send(Message("T", b"warm"))
        out = ctx.Queue()
        p = ctx.Process(target=_attach_big_rings, args=(broker_name, 12, out))
        p.start()
        latencies = []
        try:
            while p.is_alive() or not latencies:
                t0 = time.perf_counter()
                producer.send(Message("T", b"steady"))
                latencies.append((time.perf_counter() - t0) * 1000)
                time.sleep(0.0005)
            rtts = out.get(timeout=30)
        finally:
            p.join(30)
        assert p.exitcode == 0
        assert sorted(rtts)[len(rtts) // 2] > SLOW_MS  # each attach really had tens of ms of backing to do
        slow = [round(ms, 1) for ms in latencies if ms > SLOW_MS]
        # the loop used to stall for every attach (~40 ms) and every detach (~20 ms): 12-24 slow sends
        assert len(slow) <= 2, f"{len(slow)} of {len(latencies)} sends took over {SLOW_MS} ms: {slow}"


@pytest.mark.parametrize("limit", ["maxRingBytesTotal", "maxClientsPerProcess", "maxChannels"])
def test_limits_count_attaches_in_flight(store_dir, broker_name, config, limit):
    ring = 16 << 20  # ~10 ms to back: the next requests arrive while it is made
    value = 2 * (64 + 2 * (ring + 4096)) if limit == "maxRingBytesTotal" else 2
    held = []
    try:
        with shmq.Broker(store_dir, broker_name, {**config, limit: value}):
            reqs = []
            for _ in range(4):  # all sent at once
                held.append(Liveness.hold())
                reqs.append(Attach(new_client_id(), next(_req_ids), os.getpid(), held[-1].key, ring, PRODUCER))
                send(broker_name, reqs[-1])
            q = control_queue(broker_name)
            replies = [q.recv_reply(r.client_id, r.req_id, 10.0) for r in reqs]
            assert [r.ok for r in replies] == [True, True, False, False], [r.body for r in replies]
            assert all(f"{limit}=" in r.body["error"] for r in replies[2:])
            assert client_ids(broker_name) == {reqs[0].client_id, reqs[1].client_id}
            dup = Attach(reqs[0].client_id, next(_req_ids), os.getpid(), held[0].key, 4096, PRODUCER)
            again = call(broker_name, dup)
            assert not again.ok and "already attached" in again.body["error"]
    finally:
        for liveness in held:
            liveness.release()


def _die_while_attaching(broker: str, give_up: bool, out) -> None:
    """Ask for two big channels, then die (or give up) while the first is backed: the second
    is surely made after that, the first most likely."""
    liveness = Liveness.hold()
    cids = [new_client_id(), new_client_id()]
    for cid in cids:
        send(broker, Attach(cid, next(_req_ids), os.getpid(), liveness.key, BIG, PRODUCER))
    wait_for(lambda: _shm_exists(channel_name(broker, cids[0])), 5)  # the broker is backing it now
    time.sleep(0.01)  # both requests were read and checked
    out.put((cids, liveness.key))
    out.close()
    out.join_thread()
    if give_up:
        liveness.release()
    os._exit(0)  # without giving the semaphore back (unless it gave up): only the broker can remove it


@pytest.mark.parametrize("give_up", [False, True], ids=["dies", "gives-up"])
def test_client_gone_mid_attach_leaves_nothing(store_dir, broker_name, config, give_up):
    with shmq.Broker(store_dir, broker_name, config) as broker:
        out = ctx.Queue()
        p = ctx.Process(target=_die_while_attaching, args=(broker_name, give_up, out))
        p.start()
        cids, key = out.get(timeout=20)
        p.join(10)
        assert wait_for(
            lambda: (
                not any(
                    _shm_exists(channel_name(broker_name, c)) or _sem_exists(client_bell_name(broker_name, c))
                    for c in cids
                )
                and not _exists(key)
            ),
            5,
        )
        assert not set(cids) & client_ids(broker_name)
        assert f"client {cids[1]} (pid {p.pid}) died or gave up while its channel was made" in broker.log()
        reply, liveness, _ = _attach(broker_name)
        liveness.release()
        assert reply.ok


def test_broker_stopped_mid_attach_leaves_nothing(store_dir, broker_name, config):
    held = [Liveness.hold() for _ in range(4)]
    reqs = [Attach(new_client_id(), next(_req_ids), os.getpid(), lv.key, BIG, PRODUCER) for lv in held]
    try:
        broker = shmq.Broker(store_dir, broker_name, config)
        with broker:
            for r in reqs:
                send(broker_name, r)
            assert wait_for(lambda: _shm_exists(channel_name(broker_name, reqs[0].client_id)), 30)
            stopper = threading.Thread(target=broker.stop)
            stopper.start()
            stopper.join(30)
            assert broker.process.returncode == 0  # it cleaned up itself, nothing was reclaimed for it
        for r in reqs:
            assert not _shm_exists(channel_name(broker_name, r.client_id))
            assert not _sem_exists(client_bell_name(broker_name, r.client_id))
    finally:
        for lv in held:
            lv.release()
