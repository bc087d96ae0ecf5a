"""shmq.aio.SimpleConsumer against a real broker: ``await receive``, ``await ack`` (gathered acks
settle every message once), a stale receipt after ``change_invisible_duration``, ``async for``
over ``messages()``, and a cancelled receive losing nothing."""

from __future__ import annotations

import asyncio
import copy

import pytest

import shmq
from shmq import Message, ReceiptError


def _send(broker: str, count: int) -> None:
    with shmq.Producer("aio-feed", broker=broker) as p:
        p.send_batch([Message("Jobs", b"%d" % i) for i in range(count)])


def _consumer(broker: str) -> shmq.aio.SimpleConsumer:
    return shmq.aio.SimpleConsumer("aio-wg", broker=broker, subscriptions={"Jobs": "*"}, await_duration=0.5)


def test_receive_and_gathered_acks_settle_every_message_once(store_dir, broker_name, config):
    async def run() -> tuple[list[int], list]:
        async with _consumer(broker_name) as sc:
            got: list = []
            while len(got) < 40:
                got += await asyncio.wait_for(sc.receive(32, 30.0), 30)
            await asyncio.gather(*(sc.ack(m) for m in got[1:]))
            old = copy.copy(got[0])
            await sc.change_invisible_duration(got[0], 60.0)
            with pytest.raises(ReceiptError, match="stale"):
                await sc.ack(old)
            await sc.ack(got[0])
            return sorted(int(m.body) for m in got), await sc.receive(32, 30.0)

    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, 40)
        bodies, after = asyncio.run(run())
    assert bodies == list(range(40))
    assert after == []


def test_async_for_and_a_cancelled_receive_lose_nothing(store_dir, broker_name, config):
    async def run() -> list[int]:
        async with _consumer(broker_name) as sc:
            task = asyncio.create_task(sc.receive(32, 30.0))
            await asyncio.sleep(0)
            task.cancel()  # what its thread gets is kept for the next receive
            with pytest.raises(asyncio.CancelledError):
                await task
            _send(broker_name, 10)
            got: list[int] = []

            async def loop() -> None:
                async for m in sc.messages(8, 30.0):
                    got.append(int(m.body))
                    await sc.ack(m)
                    if len(got) == 10:
                        break

            await asyncio.wait_for(loop(), 30)
            return sorted(got)

    with shmq.Broker(store_dir, broker_name, config):
        assert asyncio.run(run()) == list(range(10))
