"""shmq.aio.Producer against a real broker: awaited sends, 256 at once, cancelled tasks, a broker gone.

Plain ``asyncio.run`` inside sync tests: no pytest plugin needed."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

import pytest

import shmq
from shmq import Message, MessageQueue, SendStatus


def _per_queue_offsets(results) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for r in results:
        out[r.queue.queue_id].append(r.queue_offset)
    return out


def test_awaited_sends_are_ok_with_distinct_ids_and_increasing_offsets(store_dir, broker_name, config):
    async def main() -> list:
        async with shmq.aio.Producer("aio-pg", broker=broker_name) as p:
            return [await p.send(Message("T", b"%d" % i)) for i in range(1000)]

    with shmq.Broker(store_dir, broker_name, config):
        results = asyncio.run(main())
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == 1000
    for offsets in _per_queue_offsets(results).values():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), offsets


def test_256_concurrent_sends_go_out_together_and_each_gets_its_own_result(store_dir, broker_name, config):
    async def main() -> tuple[list, list]:
        async with shmq.aio.Producer("aio-pg", broker=broker_name) as p:
            first = await asyncio.gather(*(p.send(Message("T", b"%d" % i)) for i in range(256)))
            # a second topic in the same iteration: batched apart, answered apart
            mixed = await asyncio.gather(*(p.send(Message("T" if i % 2 else "U", b"m%d" % i)) for i in range(256)))
            return first, mixed

    with shmq.Broker(store_dir, broker_name, config):
        first, mixed = asyncio.run(main())
    assert all(r.status is SendStatus.SEND_OK for r in first + mixed)
    assert len({r.msg_id for r in first + mixed}) == 512
    assert {r.queue.topic for r in mixed[1::2]} == {"T"} and {r.queue.topic for r in mixed[::2]} == {"U"}
    # one iteration's sends of a topic are one batch: consecutive offsets in one queue
    assert len({r.queue.queue_id for r in first}) == 1
    assert sorted(r.queue_offset for r in first) == list(range(first[0].queue_offset, first[0].queue_offset + 256))


def test_cancelled_tasks_do_not_break_the_producer(store_dir, broker_name, config):
    async def main() -> tuple[int, list, bool]:
        async with shmq.aio.Producer("aio-pg", broker=broker_name) as p:
            tasks = [asyncio.create_task(p.send(Message("T", b"c%d" % i))) for i in range(100)]
            await asyncio.sleep(0)  # every task has queued its message: the flush runs next
            for t in tasks[::2]:
                t.cancel()  # before the flush: these messages are never sent
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            late = asyncio.create_task(p.send(Message("T", b"late")))
            await asyncio.sleep(0.001)  # handed over by now: cancelling the task no longer stops it
            late.cancel()
            after = [await p.send(Message("T", b"after%d" % i)) for i in range(50)]
            flushed = await p.flush(5)
            cancelled = sum(isinstance(o, asyncio.CancelledError) for o in outcomes)
            assert all(not isinstance(o, BaseException) for o in outcomes[1::2]), outcomes
            return cancelled, after, flushed and p._unanswered == 0

    with shmq.Broker(store_dir, broker_name, config):
        cancelled, after, settled = asyncio.run(main())
    assert cancelled == 50
    assert all(r.status is SendStatus.SEND_OK for r in after)
    assert settled


def test_a_broker_gone_fails_the_send_with_a_clear_error(store_dir, broker_name, config):
    async def main(broker: shmq.Broker) -> None:
        async with shmq.aio.Producer("aio-pg", broker=broker_name, send_msg_timeout=1.0) as p:
            assert (await p.send(Message("T", b"up"))).status is SendStatus.SEND_OK
            await asyncio.to_thread(broker.kill)
            start = time.monotonic()
            with pytest.raises(shmq.ShmqError) as info:
                await asyncio.wait_for(p.send(Message("T", b"down")), 60)
            assert time.monotonic() - start < 30  # about its 1 s send timeout, not a hang
            assert broker_name in str(info.value)

    with shmq.Broker(store_dir, broker_name, config) as broker:
        asyncio.run(main(broker))


def test_send_batch_oneway_and_selector(store_dir, broker_name, config):
    async def main() -> tuple:
        async with shmq.aio.Producer("aio-pg", broker=broker_name) as p:
            batch = await p.send_batch([Message("T", b"b%d" % i) for i in range(10)])
            for i in range(20):
                await p.send_oneway(Message("T", b"o%d" % i))
            last = await p.send(Message("T", b"last"))
            picked = await p.send(Message("T", b"picked"), selector=lambda queues, msg, arg: queues[arg], arg=3)
            assert picked.queue.queue_id == 3
            return batch, last

    with shmq.Broker(store_dir, broker_name, config):
        batch, last = asyncio.run(main())
        with shmq.PullConsumer("aio-check", broker=broker_name) as pc:
            bodies = {
                m.body
                for q in range(4)
                for m in pc.pull(MessageQueue("T", broker_name, q), offset=0, max_nums=64).messages
            }
    assert batch.status is SendStatus.SEND_OK and batch.count == 10
    assert last.status is SendStatus.SEND_OK
    assert bodies == {b"b%d" % i for i in range(10)} | {b"o%d" % i for i in range(20)} | {b"last", b"picked"}


def test_a_bad_message_among_a_batch_fails_alone(store_dir, broker_name, config):
    async def main() -> list:
        async with shmq.aio.Producer("aio-pg", broker=broker_name, max_message_size=1024) as p:
            msgs = [Message("T", b"x" * (4096 if i == 5 else 10)) for i in range(20)]
            return await asyncio.gather(*(p.send(m) for m in msgs), return_exceptions=True)

    with shmq.Broker(store_dir, broker_name, config):
        outcomes = asyncio.run(main())
    assert isinstance(outcomes[5], shmq.MessageTooLargeError)
    assert all(r.status is SendStatus.SEND_OK for i, r in enumerate(outcomes) if i != 5), outcomes
