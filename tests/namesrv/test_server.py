"""The name server's core alone: registrations checked field by field, live claims refused,
dead brokers pruned, bounds kept."""

from __future__ import annotations

from typing import Any

import pytest

from shmq.errors import RegistrationError
from shmq.namesrv.routes import BrokerData, TopicData
from shmq.namesrv.server import NameServerCore, Registration, parse_registration, parse_unregistration

GOOD = {
    "broker_name": "b0",
    "attach_name": "b0",
    "cluster": "DefaultCluster",
    "broker_id": 0,
    "role": "ASYNC_MASTER",
    "pid": 100,
    "alive_key": 7,
    "store_dir": "/stores/b0",
}


def reg(**over: Any) -> Registration:
    return parse_registration({**GOOD, **over})


class Core:
    """A core whose brokers live while their pid is in ``alive``."""

    def __init__(self, max_brokers: int = 256) -> None:
        self.alive: set[int] = set()
        self.core = NameServerCore("ns", 1, lambda b: b.pid in self.alive, lambda: 42, max_brokers)

    def register(self, r: Registration, topics: tuple[TopicData, ...] = ()) -> BrokerData:
        self.alive.add(r.pid)
        return self.core.register(r, topics)


def test_a_good_registration_parses_back_to_its_args() -> None:
    assert reg().to_args() == GOOD


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("broker_name", "a.b", "broker_name"),
        ("broker_name", "", "broker_name"),
        ("attach_name", 5, "attach_name"),
        ("cluster", "x" * 65, "cluster"),
        ("broker_id", -1, "broker_id"),
        ("broker_id", 1.0, "broker_id"),
        ("broker_id", True, "broker_id"),
        ("role", "MASTER", "role"),
        ("pid", 0, "pid"),
        ("pid", 2**22 + 1, "pid"),
        ("alive_key", 0, "alive_key"),
        ("alive_key", 2**32, "alive_key"),
        ("store_dir", "", "store_dir"),
        ("store_dir", "a\0b", "store_dir"),
        ("store_dir", "/" * 5000, "store_dir"),
        ("extra", 1, "unknown field 'extra'"),
    ],
)
def test_each_bad_field_is_refused_with_its_name(field: str, value: object, says: str) -> None:
    with pytest.raises(RegistrationError, match=says) as e:
        parse_registration({**GOOD, field: value})
    assert "\n" not in str(e.value)


def test_a_missing_field_is_refused() -> None:
    args = dict(GOOD)
    del args["pid"]
    with pytest.raises(RegistrationError, match="pid"):
        parse_registration(args)


@pytest.mark.parametrize(("role", "broker_id"), [("SLAVE", 0), ("ASYNC_MASTER", 1), ("SYNC_MASTER", 2)])
def test_role_and_id_must_agree(role: str, broker_id: int) -> None:
    with pytest.raises(RegistrationError, match="replica has id >= 1"):
        parse_registration({**GOOD, "role": role, "broker_id": broker_id})


def test_unregistration_is_checked_too() -> None:
    assert parse_unregistration({"broker_name": "b0", "broker_id": 0, "pid": 5}) == ("b0", 0, 5)
    with pytest.raises(RegistrationError, match="pid"):
        parse_unregistration({"broker_name": "b0", "broker_id": 0, "pid": "5"})
    with pytest.raises(RegistrationError, match="must be an object"):
        parse_unregistration(["b0"])  # type: ignore[arg-type]


def test_registration_enters_the_table_with_its_topics_sorted() -> None:
    c = Core()
    topics = (TopicData("z", 4, 4), TopicData("a", 2, 2))
    entry = c.register(reg(), topics)
    assert c.core.table.broker("b0") == entry
    assert [t.name for t in entry.topics] == ["a", "z"]
    assert entry.registered_ms == 42 and c.core.table.version == 1


def test_a_live_process_holding_the_name_and_id_refuses_another() -> None:
    c = Core()
    c.register(reg())
    with pytest.raises(RegistrationError, match="already registered by live pid 100") as e:
        c.register(reg(pid=200, attach_name="other", alive_key=8))
    assert "\n" not in str(e.value)
    assert c.core.table.broker("b0").pid == 100  # type: ignore[union-attr]


def test_a_dead_holder_is_replaced() -> None:
    c = Core()
    c.register(reg())
    c.alive.discard(100)
    assert c.register(reg(pid=200, alive_key=8)).pid == 200
    assert len(c.core.table.brokers) == 1


def test_the_same_process_registering_again_replaces_its_entry() -> None:
    c = Core()
    c.register(reg())
    c.register(reg(), (TopicData("t", 1, 1),))
    assert len(c.core.table.brokers) == 1 and c.core.table.broker("b0").topics  # type: ignore[union-attr]
    c.register(reg(broker_name="renamed"))  # one process is one registration
    assert [b.broker_name for b in c.core.table.brokers] == ["renamed"]


def test_an_attach_name_is_one_live_registration() -> None:
    c = Core()
    c.register(reg())
    with pytest.raises(RegistrationError, match="attach name 'b0' is already registered"):
        c.register(reg(pid=200, broker_name="b1", alive_key=8))


def test_a_replica_registers_beside_its_master() -> None:
    c = Core()
    c.register(reg())
    c.register(reg(pid=200, attach_name="r0", broker_id=1, role="SLAVE", alive_key=8))
    assert [b.broker_id for b in c.core.table.replicas("b0")] == [1]
    assert c.core.table.masters() == [c.core.table.broker("b0")]


def test_unregister_takes_only_the_registering_pid() -> None:
    c = Core()
    c.register(reg())
    assert not c.core.unregister("b0", 0, 999)
    assert not c.core.unregister("b1", 0, 100)
    assert c.core.unregister("b0", 0, 100)
    assert c.core.table.brokers == ()


def test_prune_removes_the_dead_only() -> None:
    c = Core()
    c.register(reg())
    c.register(reg(broker_name="b1", attach_name="b1", pid=200, alive_key=8))
    version = c.core.table.version
    assert c.core.prune() == []
    assert c.core.table.version == version
    c.alive.discard(100)
    assert [b.pid for b in c.core.prune()] == [100]
    assert [b.pid for b in c.core.table.brokers] == [200]
    assert c.core.table.version == version + 1


def test_the_table_is_bounded_and_dead_entries_make_room() -> None:
    c = Core(max_brokers=2)
    c.register(reg())
    c.register(reg(broker_name="b1", attach_name="b1", pid=200, alive_key=8))
    third = reg(broker_name="b2", attach_name="b2", pid=300, alive_key=9)
    with pytest.raises(RegistrationError, match="maximum of 2 brokers"):
        c.register(third)
    c.alive.discard(100)
    c.register(third)
    assert [b.broker_name for b in c.core.table.brokers] == ["b1", "b2"]


def test_set_topics_changes_the_table_only_when_they_differ() -> None:
    c = Core()
    c.register(reg(), (TopicData("a", 1, 1),))
    version = c.core.table.version
    assert not c.core.set_topics("b0", 0, (TopicData("a", 1, 1),))
    assert c.core.set_topics("b0", 0, (TopicData("b", 2, 2), TopicData("a", 1, 1)))
    assert [t.name for t in c.core.table.broker("b0").topics] == ["a", "b"]  # type: ignore[union-attr]
    assert c.core.table.version == version + 1
    assert not c.core.set_topics("nobody", 0, ())
