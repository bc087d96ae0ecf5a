"""A cluster group reads a dead master's queues from the replica registered under its name."""

from __future__ import annotations

import threading
import time

from shmq import ConsumeFrom, ConsumeResult, PushConsumer
from shmq.launcher import Broker
from tests.ha.conftest import Pair, pair  # noqa: F401 (fixture)
from tests.ha.test_replica_read import _mirrored
from tests.waiting import wait_for

from .conftest import Routes


def test_a_dead_masters_queues_are_read_from_its_registered_replica(pair: Pair, routes: Routes) -> None:  # noqa: F811
    sent = _mirrored(pair, "rg", 10)  # 3 queues of "Orders"; the group committed 10 on queue 0
    replica: Broker = pair.replicas[0]
    routes.publish((pair.master, pair.master_name, 0), (replica, pair.master_name, 1))
    pair.master.stop()
    got: dict[tuple[str, int], list[bytes]] = {}
    lock = threading.Lock()

    def listener(msgs, ctx):
        with lock:
            got.setdefault((ctx.message_queue.broker_name, ctx.message_queue.queue_id), []).extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    c = PushConsumer("rg", namesrv=routes.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
    c.subscribe("Orders")
    c.register_listener(listener, orderly=True)
    with c:
        want = {(pair.master_name, 0): sent[0][10:], (pair.master_name, 1): sent[1], (pair.master_name, 2): sent[2]}
        assert wait_for(lambda: sum(map(len, got.values())) >= sum(map(len, want.values())), 30), got
        time.sleep(0.2)
        assert got == want
