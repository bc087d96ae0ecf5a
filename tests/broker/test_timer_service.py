"""The timer and delay-level services in the broker core, across restarts: due messages reach
their topics, a restart after any tick neither loses nor re-delivers beyond the tick in flight,
and damaged progress files, changed levels and rebuilt queues are survived."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator

import pytest

from shmq.broker.answers import Peer
from shmq.broker.core import BrokerCore
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.config import BrokerConfig
from shmq.model import system_topics as st
from shmq.store.message_store import MessageStore

from .conftest import serve
from .test_delivery_rules import send, stored, tick_until


@pytest.fixture
def config(config: dict) -> dict:
    return dict(config, messageDelayLevel="50ms 100ms 150ms", timerMaxDelaySec=60)


class Cores:
    """Cores over one store directory, opened again as a restarted broker would."""

    def __init__(self, path: str, config: dict) -> None:
        self.path, self.config = path, config
        self.core = self.open(config)

    def open(self, config: dict) -> BrokerCore:
        self.config = config
        return BrokerCore(MessageStore(self.path, config).start(), BrokerConfig.load(config))

    def restart(self, config: dict | None = None, clean: bool = True) -> BrokerCore:
        """``clean`` False: as after a SIGKILL (no final persist; the store shut as the OS would leave it)."""
        if clean:
            self.core.persist()
        self.core.store.shutdown()
        self.core = self.open(config or self.config)
        return self.core


@pytest.fixture
def cores(tmp_path, config) -> Iterator[Cores]:
    c = Cores(str(tmp_path / "store"), config)
    yield c
    c.core.store.shutdown()


def bodies(core: BrokerCore, topic: str, qid: int = 0) -> list[bytes]:
    return [bytes(m.body) for m in stored(core, topic, qid)]


def at(i: int, ms: int) -> tuple[int, bytes]:
    return send(i, "T", b"m%d" % i, {fmt.PROPERTY_TIMER_DELIVER_MS: str(ms)})


def test_timer_messages_arrive_in_due_order_when_due(cores):
    core = cores.core
    now = int(time.time() * 1000)
    dues = [now + 300, now + 100, now + 200, now + 100]
    serve(core, Peer(1), *[at(i, d) for i, d in enumerate(dues)])
    assert core.timer.pending() == 4
    core.tick(time.monotonic_ns())
    assert bodies(core, "T") == []
    seen: dict[bytes, int] = {}
    deadline = time.monotonic() + 3
    while len(seen) < 4 and time.monotonic() < deadline:
        core.tick(time.monotonic_ns())
        for b in bodies(core, "T"):
            seen.setdefault(b, int(time.time() * 1000))
        time.sleep(0.002)
    assert bodies(core, "T") == [b"m1", b"m3", b"m2", b"m0"]  # (due, offset) order
    for i, d in enumerate(dues):
        assert 0 <= seen[b"m%d" % i] - d <= 200  # a few ticks (a loaded machine: the benchmark has the figures)
    [m] = [m for m in stored(core, "T", 0) if m.body == b"m0"]
    assert m.properties[fmt.PROPERTY_TIMER_DELIVER_MS] == str(dues[0])
    assert not {fmt.PROPERTY_REAL_TOPIC, fmt.PROPERTY_TIMER_OUT_MS} & set(m.properties)
    assert core.timer.pending() == 0


def test_a_restart_keeps_pending_timers_and_never_redelivers_after_a_persisted_tick(cores):
    now = int(time.time() * 1000)
    serve(cores.core, Peer(1), *[at(i, now + (50 if i % 2 else 5000)) for i in range(10)])
    tick_until(cores.core, lambda: len(bodies(cores.core, "T")) == 5)
    core = cores.restart(clean=False)  # the tick's checkpoint was written without fsync: still there
    assert core.timer.pending() == 5 and len(core.timer.pending_keys) == 5
    for _ in range(5):
        core.tick(time.monotonic_ns())
    assert sorted(bodies(core, "T")) == [b"m%d" % i for i in (1, 3, 5, 7, 9)]


def test_a_kill_between_the_put_and_the_checkpoint_redelivers_that_tick_only(cores, monkeypatch):
    now = int(time.time() * 1000) + 5000  # ticks are driven with explicit times below
    serve(cores.core, Peer(1), *[at(i, now + 40 * (i // 3)) for i in range(9)])
    assert cores.core.timer.tick(now) == 3  # checkpointed
    monkeypatch.setattr(cores.core.timer, "persist", lambda durable=True: None)  # killed before the write
    assert cores.core.timer.tick(now + 40) == 3
    core = cores.restart(clean=False)
    assert core.timer.pending() == 6
    assert core.timer.tick(now + 1000) == 6
    got = bodies(core, "T")
    assert sorted(got) == sorted([b"m%d" % i for i in range(9)] + [b"m3", b"m4", b"m5"])  # the tick in flight


def test_a_rebuilt_timer_queue_gets_its_due_times_back_from_the_records(cores):
    now = int(time.time() * 1000)
    serve(cores.core, Peer(1), at(1, now + 60_000 - 1000), send(2, "T", b"d", {fmt.PROPERTY_DELAY: "3"}))
    want = [
        int(cores.core.store.find_consume_queue(t, q).get_range(0, 1)["tags_code"][0])
        for t, q in ((st.TIMER_TOPIC, 0), (st.SCHEDULE_TOPIC, 2))
    ]
    cores.core.store.shutdown()
    shutil.rmtree(os.path.join(cores.path, "consumequeue"))  # rebuilt from the commitlog at start
    cores.core = cores.open(cores.config)
    got = [
        int(cores.core.store.find_consume_queue(t, q).get_range(0, 1)["tags_code"][0])
        for t, q in ((st.TIMER_TOPIC, 0), (st.SCHEDULE_TOPIC, 2))
    ]
    assert got == want and cores.core.timer.pending() == 1


def test_a_damaged_timer_checkpoint_uses_its_backup_else_redelivers_loudly(cores, caplog):
    now = int(time.time() * 1000)
    serve(cores.core, Peer(1), at(1, now + 20), at(2, now + 40))
    tick_until(cores.core, lambda: len(bodies(cores.core, "T")) == 1)
    tick_until(cores.core, lambda: len(bodies(cores.core, "T")) == 2)  # two writes: a .bak exists
    cores.core.persist()
    path = os.path.join(cores.path, "config", "timerCheckpoint.json")
    with open(path, "w") as f:
        f.write("{garbage")
    core = cores.restart(clean=False)
    assert "timer checkpoint damaged" in caplog.text
    assert core.timer.pending() <= 1  # the backup is one tick behind at most
    for name in (path, path + ".bak"):
        with open(name, "w") as f:
            f.write("[]")
    core = cores.restart(clean=False)
    assert core.timer.pending() == 2 and os.path.exists(path + ".damaged")
    tick_until(core, lambda: len(bodies(core, "T")) == 4)
    assert sorted(bodies(core, "T")) == [b"m1", b"m1", b"m2", b"m2"]


def test_delay_levels_survive_a_changed_level_list_and_a_progress_past_the_queue_end(cores, config, caplog):
    serve(
        cores.core,
        Peer(1),
        send(1, "T", b"L3", {fmt.PROPERTY_DELAY: "3"}),
        send(2, "T", b"L1", {fmt.PROPERTY_DELAY: "1"}),
    )
    core = cores.restart(dict(config, messageDelayLevel="50ms"))  # level 3 no longer configured
    assert "no longer in messageDelayLevel" in caplog.text and core.delay.pending() == 2
    tick_until(core, lambda: len(bodies(core, "T")) == 2)
    assert sorted(bodies(core, "T")) == [b"L1", b"L3"]
    core.persist()
    path = os.path.join(cores.path, "config", "delayOffset.json")
    with open(path, "w") as f:
        json.dump({"offsetTable": {"1": 50, "3": 1}}, f)  # level 1's queue holds one entry only
    core = cores.restart(clean=False)
    assert "past its queue's end" in caplog.text and core.delay.offsets[1] == 1
    serve(core, Peer(1), send(3, "T", b"again", {fmt.PROPERTY_DELAY: "1"}))
    tick_until(core, lambda: len(bodies(core, "T")) == 3)
    assert bodies(core, "T")[-1] == b"again"


def test_a_level_that_fails_does_not_hold_up_the_others(cores, monkeypatch):
    core = cores.core
    serve(core, Peer(1), send(1, "A", b"a", {fmt.PROPERTY_DELAY: "1"}), send(2, "B", b"b", {fmt.PROPERTY_DELAY: "2"}))
    real = core.put_internal

    def put(items, inspect=False):
        if any(t == "A" for t, _, _ in items):
            raise OSError("no space for A")
        return real(items, inspect)

    monkeypatch.setattr(core.delay, "put_internal", put)
    tick_until(core, lambda: bodies(core, "B"))
    assert bodies(core, "B") == [b"b"] and bodies(core, "A") == [] and core.delay.pending() == 1
    monkeypatch.setattr(core.delay, "put_internal", real)
    tick_until(core, lambda: bodies(core, "A"))
    assert bodies(core, "A") == [b"a"] and core.delay.pending() == 0


def test_damaged_delay_offsets_without_backup_are_set_aside_and_parked_messages_redelivered(cores, caplog):
    serve(cores.core, Peer(1), send(1, "T", b"x", {fmt.PROPERTY_DELAY: "1"}))
    tick_until(cores.core, lambda: bodies(cores.core, "T"))
    cores.core.persist()
    path = os.path.join(cores.path, "config", "delayOffset.json")
    for name in (path, path + ".bak"):
        with open(name, "w") as f:
            f.write('{"offsetTable": {"1": -4}}')
    core = cores.restart(clean=False)
    assert "delay offsets damaged" in caplog.text and os.path.exists(path + ".damaged")
    tick_until(core, lambda: len(bodies(core, "T")) == 2)
    assert bodies(core, "T") == [b"x", b"x"]


def test_garbage_timer_properties_are_refused_with_the_property_named(cores):
    got = serve(
        cores.core,
        Peer(1),
        send(1, "T", b"a", {fmt.PROPERTY_TIMER_DELIVER_MS: "soon"}),
        send(2, "T", b"b", {fmt.PROPERTY_TIMER_DELAY_MS: "1_000"}),
        send(3, "T", b"c", {fmt.PROPERTY_TIMER_DELIVER_MS: "9" * 30}),
    )
    by_id = {r.req_id: (k, r) for k, r in got}
    assert [by_id[i][0] for i in (1, 2, 3)] == [P.ERROR] * 3
    assert "TIMER_DELIVER_MS" in by_id[1][1].message and "TIMER_DELAY_MS" in by_id[2][1].message
    assert "not an integer" in by_id[3][1].message
    assert bodies(cores.core, "T") == [] and cores.core.timer.pending() == 0


def test_parked_records_cleanup_removed_are_skipped_and_the_rest_delivered(cores, monkeypatch, caplog):
    core = cores.core
    now = int(time.time() * 1000)
    serve(
        core,
        Peer(1),
        send(1, "T", b"gone", {fmt.PROPERTY_DELAY: "1"}),
        send(2, "T", b"kept", {fmt.PROPERTY_DELAY: "1"}),
        at(3, now + 30),
        at(4, now + 30),
    )
    first = {
        int(core.store.find_consume_queue(t, 0).get_range(0, 1)["offset"][0])
        for t in (st.SCHEDULE_TOPIC, st.TIMER_TOPIC)
    }
    data = core.store.commitlog.data
    monkeypatch.setattr(core.store.commitlog, "data", lambda off, size: None if off in first else data(off, size))
    tick_until(core, lambda: len(bodies(core, "T")) == 2)
    assert sorted(bodies(core, "T")) == [b"kept", b"m4"]
    assert caplog.text.count("removed by cleanup before it was due") == 2
    assert core.delay.pending() == 0 and core.timer.pending() == 0
