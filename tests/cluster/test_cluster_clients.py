"""The other consumers given ``namesrv=`` (lite pull, the asyncio twins, $SHMQ_NAMESRV), over real brokers."""

from __future__ import annotations

import asyncio

import pytest

import shmq
import shmq.aio
from shmq import ConsumeFrom, LitePullConsumer, Message, PullConsumer, PushConsumer
from shmq.client.consumer.cluster_lite import ClusterLitePullConsumer
from shmq.client.consumer.cluster_pull import ClusterPullConsumer
from shmq.client.consumer.cluster_push import ClusterPushConsumer
from shmq.errors import ConfigError
from tests.waiting import wait_for

from .conftest import Brokers, Routes


def _two_brokers(brokers: Brokers, routes: Routes) -> list[shmq.Broker]:
    bs = [brokers.start(), brokers.start()]
    for b in bs:
        shmq.Admin(b.name).create_topic("T", 2)
    routes.publish(*((b, b.name, 0) for b in bs))
    with shmq.Producer("pg", broker=bs[0].name) as p0, shmq.Producer("pg", broker=bs[1].name) as p1:
        for i in range(40):
            (p0 if i % 2 else p1).send(Message("T", str(i).encode()))
    return bs


def test_lite_pull_group_of_two_over_two_brokers_polls_every_message_once(brokers, routes):
    _two_brokers(brokers, routes)
    members = []
    for _ in range(2):
        c = LitePullConsumer("lg", namesrv=routes.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
        c.subscribe("T")
        members.append(c.start())
    try:
        assert wait_for(lambda: [len(m.assignment()) for m in members] == [2, 2], 30)  # polled only then
        got: list[str] = []
        assert wait_for(
            lambda: got.extend(m.body.decode() for c in members for m in c.poll(0.05)) or len(got) >= 40, 30
        )
        assert sorted(got, key=int) == [str(i) for i in range(40)]
    finally:
        for m in members:
            m.shutdown()


def test_the_asyncio_twins_take_namesrv(brokers, routes):
    _two_brokers(brokers, routes)

    async def main() -> tuple[list[str], list[str]]:
        pushed: list[str] = []
        async for m in shmq.aio.PushConsumer(
            "ag", namesrv=routes.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET
        ).messages("T"):
            pushed.append(m.body.decode())
            if len(pushed) == 40:
                break
        polled: list[str] = []
        async with shmq.aio.LitePullConsumer("al", namesrv=routes.namesrv, consume_from=ConsumeFrom.FIRST_OFFSET) as lc:
            lc.subscribe("T")
            while len(polled) < 40:
                polled.extend(m.body.decode() for m in await lc.poll(1.0))
        return pushed, polled

    pushed, polled = asyncio.run(main())
    assert sorted(pushed, key=int) == sorted(polled, key=int) == [str(i) for i in range(40)]


def test_shmq_namesrv_in_the_environment_makes_cluster_clients_unless_a_broker_is_given(monkeypatch):
    monkeypatch.setenv("SHMQ_NAMESRV", "ns-env")
    assert isinstance(PushConsumer("g"), ClusterPushConsumer)
    assert isinstance(LitePullConsumer("g"), ClusterLitePullConsumer)
    assert isinstance(PullConsumer("g"), ClusterPullConsumer)
    assert isinstance(PushConsumer("g", broker="b1"), PushConsumer)  # an explicit broker wins
    assert isinstance(PullConsumer("g", "b1"), PullConsumer)
    with pytest.raises(ConfigError, match="not both"):
        PushConsumer("g", broker="b1", namesrv="ns1")
    with pytest.raises(shmq.errors.NameServerNotFoundError, match="shmq namesrv --name ns-env"):
        PullConsumer("g", start_timeout=0.1).start()
