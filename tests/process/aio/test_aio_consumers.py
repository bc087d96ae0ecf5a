"""shmq.aio consumers against a real broker: ``async for`` over a PushConsumer gets every message
and commits what it consumed; LitePullConsumer's ``await poll`` and ``async for``, and a cancelled
poll losing nothing."""

from __future__ import annotations

import asyncio

import shmq
from shmq import ConsumeFrom, Message


def _send(broker: str, topic: str, count: int) -> None:
    with shmq.Producer("aio-feed", broker=broker) as p:
        p.send_batch([Message(topic, b"%d" % i) for i in range(count)])


def test_push_async_for_receives_every_message_and_commits_them(store_dir, broker_name, config):
    async def consume(want: int) -> list[int]:
        got: list[int] = []
        c = shmq.aio.PushConsumer(
            "aio-cg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET, consume_message_batch_max_size=8
        )
        async with c:

            async def loop() -> None:
                async for m in c.messages("T"):
                    got.append(int(m.body))
                    if len(got) == want:
                        break

            await asyncio.wait_for(loop(), 20)
        return got

    async def nothing_left() -> list:
        got: list = []
        c = shmq.aio.PushConsumer("aio-cg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET)
        c.subscribe("T")
        async with await c.start():

            async def loop() -> None:
                async for m in c:
                    got.append(m)  # noqa: PERF401 - kept as they come: the loop only ends by its timeout

            try:
                await asyncio.wait_for(loop(), 1.0)
            except TimeoutError:
                pass
        return got

    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, "T", 300)
        got = asyncio.run(consume(300))
        assert sorted(got) == list(range(300))
        # everything was committed (the batch the break left went to the retry topic, 10 s later)
        again = asyncio.run(nothing_left())
    assert again == [], [m.body for m in again]


def test_push_shutdown_ends_the_iteration(store_dir, broker_name, config):
    async def main() -> int:
        c = shmq.aio.PushConsumer("aio-cg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET)
        seen = 0

        async def loop() -> None:
            nonlocal seen
            async for _ in c.messages("T"):
                seen += 1

        task = asyncio.create_task(loop())
        await asyncio.sleep(0.5)
        await asyncio.wait_for(c.shutdown(), 5)
        await asyncio.wait_for(task, 5)  # ends by itself: no cancel needed
        return seen

    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, "T", 20)
        assert asyncio.run(main()) == 20


def test_lite_pull_poll_and_async_for(store_dir, broker_name, config):
    async def main() -> tuple[list[int], list]:
        async with shmq.aio.LitePullConsumer(
            "aio-lg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET, pull_batch_size=16
        ) as c:
            c.subscribe("T")
            got: list[int] = []
            first = await c.poll(5)
            got.extend(int(m.body) for m in first)
            assert 0 < len(first) <= 16
            async for m in c:
                got.append(int(m.body))
                if len(got) == 200:
                    break
            return got, await c.poll(0.2)

    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, "T", 200)
        got, rest = asyncio.run(main())
    assert sorted(got) == list(range(200))
    assert rest == []


def test_lite_pull_cancelled_poll_loses_nothing(store_dir, broker_name, config):
    async def main() -> list[int]:
        async with shmq.aio.LitePullConsumer("aio-lg", broker=broker_name, consume_from=ConsumeFrom.FIRST_OFFSET) as c:
            c.subscribe("T")
            waiting = asyncio.create_task(c.poll(5))
            await asyncio.sleep(0.05)  # the poll thread waits for messages
            waiting.cancel()
            await asyncio.to_thread(_send, broker_name, "T", 10)  # the cancelled poll's thread takes some
            got: list[int] = []
            while len(got) < 10:
                msgs = await c.poll(5)
                assert msgs, got
                got.extend(int(m.body) for m in msgs)
            return got

    with shmq.Broker(store_dir, broker_name, config):
        assert sorted(asyncio.run(main())) == list(range(10))


def test_a_cancel_during_start_then_shutdown_leaves_nothing_attached(store_dir, broker_name, config):
    async def main() -> bool:
        c = shmq.aio.PushConsumer("aio-cg", broker=broker_name)

        async def loop() -> None:
            async for _ in c.messages("T"):
                pass

        task = asyncio.create_task(loop())
        await asyncio.sleep(0)  # the start runs in its thread now
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.wait_for(c.shutdown(), 10)
        return c.sync._running

    with shmq.Broker(store_dir, broker_name, config):
        assert asyncio.run(main()) is False  # stopped once its start finished; the IPC tracker checks the rest


def test_lite_pull_controls_have_async_forwards(store_dir, broker_name, config):
    async def main() -> tuple[list[int], int, int, set]:
        async with shmq.aio.LitePullConsumer("aio-ctl", broker=broker_name, auto_commit=False) as c:
            q0 = (await c.fetch_message_queues("T"))[0]
            await c.assign([q0])
            await c.seek_to_begin(q0)
            c.pause([q0])
            paused = c.paused()
            assert await c.poll(0.3) == []  # paused: nothing
            c.resume([q0])
            got: list[int] = []
            while len(got) < 3:
                got.extend(m.queue_offset for m in await c.poll(5.0))
            await c.commit_sync()
            return got, await c.committed(q0), await c.offset_for_timestamp(q0, 0), paused

    with shmq.Broker(store_dir, broker_name, config):
        with shmq.Producer("aio-feed", broker=broker_name) as p:
            for i in range(3):
                p.send(Message("T", b"%d" % i), selector=lambda queues, msg, arg: queues[0])
        got, committed, first, paused = asyncio.run(main())
    assert (got, committed, first) == ([0, 1, 2], 3, 0)
    assert [mq.queue_id for mq in paused] == [0]


def test_push_suspend_and_resume_forward(store_dir, broker_name, config):
    async def main() -> tuple[bool, bool]:
        c = shmq.aio.PushConsumer("aio-sus", broker=broker_name)
        c.subscribe("T")
        async with await c.start():
            c.suspend()
            suspended = c.sync.suspended
            c.resume()
            return suspended, c.sync.suspended

    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, "T", 1)
        assert asyncio.run(main()) == (True, False)
