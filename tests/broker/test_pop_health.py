"""The POP figures of the broker's health (state segment stats row): messages in flight and
messages revived, as `shmq top` and `shmq exporter` read them."""

from __future__ import annotations

import time

import pytest

from shmq.broker.answers import Peer
from shmq.broker.health import ReplicaHealth, gather, pop_inflight_by_group

from .pop_helpers import ack, join, open_core, pop, put, tick


@pytest.fixture
def core(tmp_path):
    with open_core(str(tmp_path / "store")) as c:
        c.update_topic("Jobs", 4, 4)
        yield c


def _pop_figures(core) -> tuple[int, int]:
    fields = gather(core, ReplicaHealth())
    return int(fields["pop_inflight"]), int(fields["pop_revived"])


def test_in_flight_falls_with_acks_and_revives_count_the_rest(core) -> None:
    w = Peer(1)
    join(core, w)
    put(core, "Jobs", [b"job %d" % i for i in range(5)])
    assert _pop_figures(core) == (0, 0)
    r = pop(core, w, invisible_ms=50)
    assert len(r.tokens) == 5
    assert _pop_figures(core) == (5, 0)
    ack(core, w, r, rows=[0, 1])
    assert _pop_figures(core) == (3, 0)
    assert pop_inflight_by_group(core) == {"wg": 3}
    time.sleep(0.06)
    tick(core)  # the three not acked within 50 ms go to %RETRY%wg
    assert _pop_figures(core) == (0, 3)
    assert pop_inflight_by_group(core) == {}
