"""send(..., sharding_key=K): one queue per key (a stable hash), the key stored as __SHARDINGKEY."""

from __future__ import annotations

import zlib

import pytest

import shmq
from shmq import BadArgumentError, Message, Producer, SelectMessageQueueByHash

from .conftest import open_store


def test_a_key_always_lands_in_its_queue_and_is_stored(store_dir, broker_name, config):
    keys = ["order-1", "order-2", "order-3", "order-42"]
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        queues = len(p.fetch_publish_queues("Sharded"))
        results: dict[str, list] = {k: [] for k in keys}
        for i in range(60):
            k = keys[i % len(keys)]
            msg = Message("Sharded", b"%s:%d" % (k.encode(), i))
            if i % 3 == 0:
                results[k].append(p.send(msg, sharding_key=k))
            elif i % 3 == 1:
                results[k].append(p.send_async(msg, sharding_key=k).result(5))
            else:
                p.send_oneway(msg, sharding_key=k)
        assert p.flush(5)
        assert msg.properties is None  # the caller's message is left as it was
    for k, rs in results.items():
        # CRC32 of the key: the same queue in any process and any Python run (no salted hash())
        assert {r.queue.queue_id for r in rs} == {zlib.crc32(k.encode()) % queues}
        offsets = [r.queue_offset for r in rs]
        assert offsets == sorted(offsets)
    store = open_store(store_dir, config)
    try:
        rec = store.look_message_by_offset(results["order-42"][0].phys_offsets[0])
        assert rec.properties["__SHARDINGKEY"] == "order-42"
    finally:
        store.shutdown()


def test_sharding_key_and_selector_together_is_an_error(store_dir, broker_name, config):
    with shmq.Broker(store_dir, broker_name, config), Producer("pg", broker=broker_name) as p:
        with pytest.raises(BadArgumentError, match="sharding_key or selector"):
            p.send(Message("Sharded", b"x"), selector=SelectMessageQueueByHash(), arg=1, sharding_key="k")
        with pytest.raises(BadArgumentError, match="sharding_key or selector"):
            p.send_async(Message("Sharded", b"x"), selector=SelectMessageQueueByHash(), sharding_key="k")
        with pytest.raises(BadArgumentError, match="non-empty str"):
            p.send_oneway(Message("Sharded", b"x"), sharding_key="")
