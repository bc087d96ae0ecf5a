"""asyncio twins of the clients: ``async with shmq.aio.Producer("pg") as p: await p.send(msg)``,
``async for msg in shmq.aio.PushConsumer("cg").messages("Orders")``, ``await LitePullConsumer.poll()``,
``await SimpleConsumer.receive(32, 15.0)``.

Each wraps the sync client (its threads still do the work) and hands results to the event
loop without blocking it; see each module for when a message counts as consumed.
"""

from shmq.aio.consumer import LitePullConsumer, PushConsumer
from shmq.aio.producer import Producer
from shmq.aio.simple import SimpleConsumer

__all__ = ["LitePullConsumer", "Producer", "PushConsumer", "SimpleConsumer"]
