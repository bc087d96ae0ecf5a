"""asyncio twin of the SimpleConsumer: ``msgs = await sc.receive(32, 15.0)``, ``await sc.ack(m)``.

A receive runs the sync consumer's ``receive`` in a worker thread of this consumer (it
long-polls up to ``await_duration``); acks and invisible-time changes await the sync
consumer's futures, so a loop that acks many messages without awaiting each (``ack_async``
gathered) has them written in one frame. A receive whose task is cancelled keeps what its
thread got: the next receive returns it first, so the messages are not left to time out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from shmq.client.consumer.simple import SimpleConsumer as SyncSimpleConsumer
from shmq.client.consumer.simple import check_receive
from shmq.errors import ShmqError
from shmq.filter.tags import Expression
from shmq.model.message_ext import MessageExt


class SimpleConsumer:
    """Asyncio twin of ``shmq.SimpleConsumer``; the arguments are the sync consumer's
    (``namesrv=`` too: the cluster's consumer)."""

    def __init__(self, group: str, broker: str | None = None, **kwargs: Any) -> None:
        self.sync = SyncSimpleConsumer(group, broker, **kwargs)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"shmq-aio-receive-{group}")
        self._kept: list[MessageExt] = []  # what a cancelled receive got
        self._orphan: asyncio.Future[list[MessageExt]] | None = None  # a cancelled receive still running
        self._closed = False

    @property
    def group(self) -> str:
        return str(self.sync.group)

    def subscribe(self, topic: str, expression: str | Expression = "*") -> None:
        self.sync.subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        self.sync.unsubscribe(topic)

    async def start(self) -> SimpleConsumer:
        """Attach and join the group (in a thread: attaching may wait)."""
        await asyncio.to_thread(self.sync.start)
        return self

    async def shutdown(self) -> None:
        """As the sync ``shutdown`` (queued acks are written first); a running receive returns first."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self.sync.shutdown)
        await asyncio.to_thread(self._executor.shutdown)

    async def __aenter__(self) -> SimpleConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def receive(self, max_message_num: int, invisible_duration: float) -> list[MessageExt]:
        """As ``shmq.SimpleConsumer.receive``, without blocking the loop."""
        check_receive(max_message_num, invisible_duration)
        if self._closed:
            raise ShmqError("the SimpleConsumer was shut down")
        if self._orphan is not None:  # a cancelled receive still runs: what it gets comes first
            await asyncio.wait({self._orphan})
        if self._kept:
            kept, self._kept = self._kept[:max_message_num], self._kept[max_message_num:]
            return kept
        running = asyncio.get_running_loop().run_in_executor(
            self._executor, self.sync.receive, max_message_num, invisible_duration
        )
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            self._orphan = running
            running.add_done_callback(self._keep)
            raise

    def _keep(self, running: asyncio.Future[list[MessageExt]]) -> None:
        self._orphan = None
        if not running.cancelled() and running.exception() is None:
            self._kept += running.result()

    async def messages(self, max_message_num: int = 32, invisible_duration: float = 30.0) -> AsyncIterator[MessageExt]:
        """Every message received, one at a time, until the consumer is shut down; ack each."""
        while not self._closed:
            for msg in await self.receive(max_message_num, invisible_duration):
                yield msg

    async def ack(self, msg: MessageExt) -> None:
        """As ``shmq.SimpleConsumer.ack``; ``ReceiptError`` for a stale or unknown receipt."""
        await asyncio.wrap_future(self.sync.ack_async(msg))

    async def change_invisible_duration(self, msg: MessageExt, invisible_duration: float) -> None:
        """As ``shmq.SimpleConsumer.change_invisible_duration`` (``msg`` gets the new receipt)."""
        await asyncio.wrap_future(self.sync.change_invisible_duration_async(msg, invisible_duration))
