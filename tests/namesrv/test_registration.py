"""What a broker registers as, and when it sends its registration again (pure decisions)."""

from __future__ import annotations

import pytest

from shmq.config import BrokerConfig
from shmq.errors import ConfigError
from shmq.namesrv.registration import REFUSED_RETRY_NS, RETRY_NS, Schedule, registered, registration_for
from shmq.namesrv.routes import BrokerData, RouteTable


def config(**kw: object) -> BrokerConfig:
    return BrokerConfig.from_mapping({"namesrvAddr": "ns", "haMasterAddress": "127.0.0.1:1", **kw})


def test_a_master_registers_under_its_own_name_as_id_0() -> None:
    r = registration_for(config(brokerClusterName="c1", brokerId=3), "b0", 10, 11, "/s")
    assert (r.broker_name, r.attach_name, r.broker_id, r.role, r.cluster) == ("b0", "b0", 0, "ASYNC_MASTER", "c1")
    assert (r.pid, r.alive_key, r.store_dir) == (10, 11, "/s")


def test_a_replica_registers_under_its_masters_name() -> None:
    r = registration_for(config(brokerRole="SLAVE", masterBrokerName="b0", brokerId=2), "r0", 10, 11, "/s")
    assert (r.broker_name, r.attach_name, r.broker_id, r.role) == ("b0", "r0", 2, "SLAVE")
    assert registration_for(config(brokerRole="SLAVE", masterBrokerName="b0"), "r0", 10, 11, "/s").broker_id == 1


def test_a_promoted_replica_takes_over_its_masters_name() -> None:
    r = registration_for(config(masterBrokerName="b0", brokerId=1), "r0", 10, 11, "/s")
    assert (r.broker_name, r.attach_name, r.broker_id, r.role) == ("b0", "r0", 0, "ASYNC_MASTER")


def test_a_replica_in_a_cluster_needs_its_masters_name() -> None:
    c = config(brokerRole="SLAVE")
    with pytest.raises(ConfigError, match="masterBrokerName"):
        c.check_role()
    with pytest.raises(ConfigError, match="masterBrokerName"):
        registration_for(c, "r0", 10, 11, "/s")
    config(brokerRole="SLAVE", namesrvAddr="").check_role()  # standalone: nothing to register under


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("namesrvAddr", "a b", "namesrvAddr"),
        ("brokerClusterName", "", "brokerClusterName"),
        ("brokerClusterName", "a.b", "brokerClusterName"),
        ("brokerId", -1, "brokerId"),
        ("brokerId", 1025, "brokerId"),
        ("masterBrokerName", "x/y", "masterBrokerName"),
    ],
)
def test_bad_cluster_keys_are_refused(key: str, value: object, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        BrokerConfig.from_mapping({key: value})


def test_the_defaults_are_standalone() -> None:
    c = BrokerConfig()
    assert (c.namesrv_addr, c.broker_cluster_name, c.broker_id, c.master_broker_name) == ("", "DefaultCluster", 0, None)


def _table(*brokers: BrokerData) -> RouteTable:
    return RouteTable("ns", 1, 1, brokers)


def _entry(pid: int, attach: str = "b0") -> BrokerData:
    return BrokerData("b0", attach, "DefaultCluster", 0, "ASYNC_MASTER", pid, 11, "/s", 0)


def test_registered_means_this_process_under_this_name() -> None:
    r = registration_for(config(), "b0", 10, 11, "/s")
    assert registered(_table(_entry(10)), r)
    assert not registered(_table(), r)
    assert not registered(_table(_entry(99)), r)
    assert not registered(_table(_entry(10, attach="other")), r)


def test_schedule_registers_when_a_live_server_lacks_us() -> None:
    r = registration_for(config(), "b0", 10, 11, "/s")
    s = Schedule()
    assert not s.due(None, False, r, 0)  # no server: nothing to send to
    assert s.due(None, True, r, 0)  # a server whose table we never read
    assert s.due(_table(), True, r, 0)  # a new incarnation's empty table
    assert not s.due(_table(_entry(10)), True, r, 0)
    s.sent("failed", 0)
    assert not s.due(_table(), True, r, RETRY_NS - 1)
    assert s.due(_table(), True, r, RETRY_NS)
    s.sent("refused", 0)
    assert not s.due(_table(), True, r, REFUSED_RETRY_NS - 1)
    assert s.due(_table(), True, r, REFUSED_RETRY_NS)
