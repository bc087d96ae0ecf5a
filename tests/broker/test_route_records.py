"""``Routes.route_records`` (a SEND_MULTI's records routed with numpy, each topic resolved once)
against ``Routes.route`` record by record: same statuses, queues, first reason, the same topics
auto-created in the same order and the same round-robin queues taken."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq.broker.routes import Routes, topic_resolver
from shmq.broker.topics import PERM_RW, TopicConfig

NAMES = ["A", "B", "RO", "%RETRY%g", "bad name", "New1", "New2", "x" * 200]


def _resolver(auto_create: bool, created: list[str]):
    table = {
        "A": TopicConfig("A", 4, 4, PERM_RW),
        "B": TopicConfig("B", 8, 2, PERM_RW),
        "RO": TopicConfig("RO", 4, 4, 4),
    }  # perm 4: readable only

    def create(name: str) -> TopicConfig:
        created.append(name)
        tc = table[name] = TopicConfig(name, 3, 3, PERM_RW)
        return tc

    return topic_resolver(table.get, create, auto_create), table


def _per_record(routes: Routes, topics, tix, qids) -> tuple:
    statuses, out, message = [], [], ""
    for k, q in zip(tix, qids):
        got, code, why = routes.route(topics[k], q)
        statuses.append(-code)
        out.append(got)
        message = message or why
    return statuses, out, message


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True), st.data(), st.booleans(), st.integers(1, 3)
)
def test_route_records_matches_route_per_record(topics, data, auto_create, frames) -> None:
    created_a: list[str] = []
    created_b: list[str] = []
    resolve_a, table_a = _resolver(auto_create, created_a)
    resolve_b, table_b = _resolver(auto_create, created_b)
    for _ in range(frames):  # later frames: resolved topics come from the resolver's memory
        n = data.draw(st.integers(1, 12))
        tix = data.draw(st.lists(st.integers(0, len(topics) - 1), min_size=n, max_size=n))
        qids = data.draw(st.lists(st.sampled_from([-1, -1, 0, 1, 2, 3, 7, 0xFFFF]), min_size=n, max_size=n))
        status, out, message = Routes(resolve_a).route_records(
            topics, np.array(tix, np.int64), np.array(qids, np.int64)
        )
        assert (status.tolist(), out.tolist(), message) == _per_record(Routes(resolve_b), topics, tix, qids)
        assert status.dtype == np.int64 and out.dtype == np.int64
    assert created_a == created_b
    assert {n: tc._next_queue for n, tc in table_a.items()} == {n: tc._next_queue for n, tc in table_b.items()}


def test_a_changed_topic_is_resolved_again() -> None:
    resolve, table = _resolver(False, [])
    assert resolve("A")[1] == 0
    table["A"] = TopicConfig("A", 4, 4, 4)  # made read-only: a new TopicConfig
    assert resolve("A")[0] is None
    del table["B"]
    assert resolve("B")[0] is None
