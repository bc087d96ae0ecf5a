"""What the demo serves from: one broker (``--brokers 1``, the default) or a cluster of a name
server and N brokers, and the summary rows that show how a cluster split the throughput phase.

The demo's phases get the client keyword to attach with (``{"broker": name}`` or
``{"namesrv": name}``) and never ask which it is. On a cluster the demo's topics are made on
every broker, and the demo waits until the name server routes all of them, before any client
starts: an ordered producer that saw one broker's queues first and every broker's later would
move an order to another queue mid-way, and that is not what the demo shows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import shmq
from shmq.errors import ShmqError
from shmq.namesrv.segment import RouteReader

ROUTE_WAIT_S = 30.0
# the keyword a client attaches with: {"broker": name} or {"namesrv": name} (values Any: it is
# spread into clients whose other keywords have other types)
Target = dict[str, Any]


@contextmanager
def serving(store: str, name: str, config: Mapping[str, Any], brokers: int, topics: Sequence[str]) -> Iterator[Target]:
    """One broker named ``name`` on ``store``, or a name server ``name`` with ``brokers``
    brokers under ``store``; yields the keyword the clients attach with, stops it all after."""
    if brokers == 1:
        with shmq.Broker(store, name=name, config=config):
            yield {"broker": name}
        return
    # no HA sender per broker (the demo has no replica): ports haListenPort + i may be taken
    cluster = shmq.Cluster(store, brokers=brokers, namesrv=name, config={**config, "haListenPort": 0})
    try:
        names = [b.name for b in cluster.brokers]
        for b in names:
            admin = shmq.Admin(broker=b)
            for topic in topics:
                admin.create_topic(topic)
        wait_routed(name, topics, set(names))
        yield {"namesrv": name}
    finally:
        cluster.stop()


def wait_routed(namesrv: str, topics: Sequence[str], brokers: set[str], exact: bool = False) -> None:
    """Until the name server routes every topic to every one of ``brokers`` (to those alone
    when ``exact``): the brokers re-register when their topics change. Also what the cluster
    benchmark waits for before it sends to a topic."""
    reader = RouteReader(namesrv)
    try:
        deadline = time.monotonic() + ROUTE_WAIT_S
        while time.monotonic() < deadline:
            table = reader.read()
            routed = [{mq.broker_name for mq in table.topic_route(t).read_queues()} for t in topics]
            if all(r == brokers if exact else r >= brokers for r in routed):
                return
            time.sleep(0.05)
    finally:
        reader.close()
    raise ShmqError(
        f"name server {namesrv}: topics {', '.join(topics)} not routed to {', '.join(sorted(brokers))} "
        f"after {ROUTE_WAIT_S:.0f} s; see each broker's broker.log in its store"
    )


def describe(target: Target, brokers: int) -> str:
    """The line under the demo's title: what it serves from."""
    if "broker" in target:
        return f"broker name: {target['broker']}"
    ns = target["namesrv"]
    return f"name server: {ns}   brokers: {', '.join(f'{ns}-b{i}' for i in range(brokers))}"


def split_rows(per_broker: Mapping[str, int], queues: Mapping[int, Sequence[tuple[str, int]]]) -> list[tuple[str, str]]:
    """The summary's rows of a cluster: messages consumed from each broker in the throughput
    phase, and which queues (of which broker) each pull consumer read."""
    total = sum(per_broker.values()) or 1
    rows = [
        (
            "cluster: messages per broker",
            ", ".join(f"{b} {n:,} ({n / total:.0%})" for b, n in sorted(per_broker.items())),
        )
    ]
    for member, mqs in sorted(queues.items()):
        by_broker: dict[str, list[int]] = {}
        for b, q in mqs:
            by_broker.setdefault(b, []).append(q)
        rows.append(
            (
                f"cluster: pull consumer {member}'s queues",
                "; ".join(f"{b} {' '.join(f'q{q}' for q in sorted(qs))}" for b, qs in sorted(by_broker.items())),
            )
        )
    return rows
