"""The route table alone: routes across brokers, the codec's checks, the namesrv= rule."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from shmq.errors import ConfigError, RouteTableError
from shmq.model.perm import PERM_READ, PERM_RW, PERM_WRITE
from shmq.namesrv.routes import (
    MAX_BROKERS,
    BrokerData,
    RouteTable,
    TopicData,
    decode_table,
    encode_table,
    namesrv_or_env,
)


def broker(name: str, broker_id: int = 0, *topics: TopicData, cluster: str = "c") -> BrokerData:
    role = "ASYNC_MASTER" if broker_id == 0 else "SLAVE"
    attach = name if broker_id == 0 else f"{name}-r{broker_id}"
    return BrokerData(name, attach, cluster, broker_id, role, 100 + broker_id, 7, "/s", 1, tuple(topics))


TABLE = RouteTable(
    "ns",
    5,
    9,
    (
        broker("a", 0, TopicData("T", 2, 3)),
        broker("a", 1, TopicData("T", 2, 2)),
        broker("b", 0, TopicData("T", 1, 1, PERM_READ), cluster="d"),
        broker("c", 1, TopicData("T", 4, 4)),  # a replica whose master is not registered
    ),
)


def test_namesrv_or_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHMQ_NAMESRV", raising=False)
    assert namesrv_or_env(None) is None
    assert namesrv_or_env("ns1") == "ns1"
    monkeypatch.setenv("SHMQ_NAMESRV", "envns")
    assert namesrv_or_env(None) == "envns"
    assert namesrv_or_env(None, broker="b") is None  # an explicit broker= wins over the variable
    with pytest.raises(ConfigError, match="not both"):
        namesrv_or_env("ns1", broker="b")
    with pytest.raises(ConfigError, match="bad name server name"):
        namesrv_or_env("a/b")


def test_write_queues_are_the_writable_masters_sorted() -> None:
    route = TABLE.topic_route("T")
    assert [(q.broker_name, q.queue_id) for q in route.write_queues()] == [("a", 0), ("a", 1), ("a", 2)]


def test_read_queues_take_the_master_else_a_replica() -> None:
    route = TABLE.topic_route("T")
    got = [(q.broker_name, q.queue_id) for q in route.read_queues()]
    assert got == [("a", 0), ("a", 1), ("b", 0), ("c", 0), ("c", 1), ("c", 2), ("c", 3)]
    assert route.read_from("a").broker_id == 0  # type: ignore[union-attr]
    assert route.read_from("c").broker_id == 1  # type: ignore[union-attr]
    assert route.master("c") is None and route.read_from("x") is None


def test_a_topic_nobody_holds_has_an_empty_route() -> None:
    route = TABLE.topic_route("none")
    assert not route.exists and route.write_queues() == [] and route.read_queues() == []


def test_cluster_views() -> None:
    assert TABLE.clusters() == {"c": ["a", "c"], "d": ["b"]}
    assert [b.broker_name for b in TABLE.masters()] == ["a", "b"]
    assert [b.broker_name for b in TABLE.masters("d")] == ["b"]
    assert [b.broker_id for b in TABLE.replicas("a")] == [1]
    assert TABLE.broker("a", 1) is TABLE.brokers[1] and TABLE.broker("a", 2) is None


def test_without_dead_keeps_the_same_table_when_all_live() -> None:
    assert TABLE.without_dead(lambda b: True) is TABLE
    assert [b.broker_name for b in TABLE.without_dead(lambda b: b.broker_name != "a").brokers] == ["b", "c"]


def test_with_and_without_broker_raise_the_version() -> None:
    t = TABLE.with_broker(broker("aa", 0))
    assert t.version == TABLE.version + 1 and [b.broker_name for b in t.brokers][:3] == ["a", "a", "aa"]
    assert TABLE.without_broker("zz", 0) is TABLE
    assert TABLE.without_broker("a", 1).version == TABLE.version + 1


def test_the_codec_round_trips() -> None:
    assert decode_table(encode_table(TABLE)) == TABLE


def _doc() -> dict[str, object]:
    doc: dict[str, object] = json.loads(encode_table(TABLE))
    return doc


def _bad(mutate: object) -> bytes:
    doc = _doc()
    mutate(doc)  # type: ignore[operator]
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"[1]", "not a JSON object"),
        (_bad(lambda d: d.update(format=2)), "format"),
        (_bad(lambda d: d.update(brokers={})), "brokers must be a list"),
        (_bad(lambda d: d.update(brokers=[{}] * (MAX_BROKERS + 1))), "at most"),
        (_bad(lambda d: d["brokers"].append(d["brokers"][0])), "twice"),
        (_bad(lambda d: d["brokers"][0].update(role="KING")), "role"),
        (_bad(lambda d: d["brokers"][0].update(pid=True)), "pid"),
        (_bad(lambda d: d["brokers"][0].update(pid=0)), "pid"),
        (_bad(lambda d: d["brokers"][0].update(alive_key=-1)), "alive_key"),
        (_bad(lambda d: d["brokers"][0].update(broker_name="a b")), "broker_name"),
        (_bad(lambda d: d["brokers"][0].update(store_dir=3)), "store_dir"),
        (_bad(lambda d: d["brokers"][0].update(topics=[["T", 1, 1]])), "topic entry"),
        (_bad(lambda d: d["brokers"][0].update(topics=[["", 1, 1, 6]])), "topic name"),
        (_bad(lambda d: d["brokers"][0].update(topics=[["T", 70000, 1, 6]])), "read queues"),
        (_bad(lambda d: d["brokers"][0].update(topics=[["T", 1, 1, 64]])), "perm"),
        (_bad(lambda d: d.update(version=-1)), "version"),
        (_bad(lambda d: d.update(namesrv=None)), "namesrv"),
        (_bad(lambda d: d.update(brokers=[5])), "not an object"),
    ],
)
def test_decode_refuses_bad_payloads_in_one_line(data: bytes, says: str) -> None:
    with pytest.raises(RouteTableError, match=says) as e:
        decode_table(data)
    assert "\n" not in str(e.value)


def test_topic_perm_flags() -> None:
    assert TopicData("T", 1, 1, PERM_RW).writable and TopicData("T", 1, 1, PERM_RW).readable
    assert not TopicData("T", 1, 1, PERM_READ).writable and not TopicData("T", 1, 1, PERM_WRITE).readable
    assert replace(TABLE.brokers[0], broker_id=0).is_master
