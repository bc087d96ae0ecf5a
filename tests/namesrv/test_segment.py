"""The route segment in one process: a writer publishes, readers read, validate, keep the last
good table and leave dead brokers out."""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Iterator

import pytest

from shmq.errors import NameServerNotFoundError, RouteTableError
from shmq.namesrv.routes import BrokerData, RouteTable, TopicData
from shmq.namesrv.segment import CHECK_S, HEADER_BYTES, RouteReader, RouteWriter, namesrv_key, routes_name
from shmq.ring.liveness import Liveness
from shmq.ring.shm import Segment

CAPACITY = 64 * 1024


@pytest.fixture
def writer(ns_name: str) -> Iterator[RouteWriter]:
    w = RouteWriter.create(ns_name, namesrv_key(ns_name, "control"), CAPACITY)
    yield w
    w.close()
    w.unlink()


@pytest.fixture
def me() -> Iterator[BrokerData]:
    """An entry for this live process (its own liveness semaphore)."""
    token = Liveness.hold()
    yield BrokerData("live", "live", "c", 0, "ASYNC_MASTER", os.getpid(), token.key, "/s", 1, (TopicData("T", 1, 1),))
    token.release()


def fresh() -> None:
    """Let a reader's cached table age past its re-check interval."""
    time.sleep(2 * CHECK_S)


def table(ns: str, w: RouteWriter, *brokers: BrokerData, version: int = 1) -> RouteTable:
    return RouteTable(ns, w.incarnation, version, tuple(sorted(brokers, key=lambda b: (b.broker_name, b.broker_id))))


def test_no_server_is_a_clear_error(ns_name: str, reader: RouteReader) -> None:
    with pytest.raises(NameServerNotFoundError, match=f"shmq namesrv --name {ns_name}"):
        reader.read()
    assert not reader.server_alive() and reader.control_key() is None


def test_a_published_table_is_read(ns_name: str, writer: RouteWriter, reader: RouteReader, me: BrokerData) -> None:
    assert reader.read().brokers == () and reader.read().incarnation == writer.incarnation
    assert reader.control_key() == namesrv_key(ns_name, "control") and reader.server_alive()
    t = table(ns_name, writer, me)
    writer.publish(t)
    fresh()
    assert reader.read() == t


def test_a_dead_brokers_entry_is_never_returned(
    ns_name: str, writer: RouteWriter, reader: RouteReader, me: BrokerData
) -> None:
    dead_key = Liveness.hold()
    dead = BrokerData("dead", "dead", "c", 0, "ASYNC_MASTER", os.getpid(), dead_key.key, "/s", 1)
    forged = BrokerData("forged", "forged", "c", 0, "ASYNC_MASTER", 1, me.alive_key, "/s", 1)  # wrong pid
    dead_key.release()
    writer.publish(table(ns_name, writer, me, dead, forged))
    assert [b.broker_name for b in reader.read().brokers] == ["live"]


def test_a_table_too_big_for_the_segment_is_refused(ns_name: str, writer: RouteWriter, me: BrokerData) -> None:
    topics = tuple(TopicData(f"topic-{i:06d}", 1, 1) for i in range(CAPACITY // 10))
    with pytest.raises(RouteTableError, match="does not fit"):
        writer.publish(table(ns_name, writer, BrokerData(**{**me.__dict__, "topics": topics})))


def test_a_second_live_writer_is_refused(ns_name: str, writer: RouteWriter) -> None:
    with pytest.raises(RouteTableError, match=f"a name server named {ns_name!r} already serves"):
        RouteWriter.create(ns_name, 1, CAPACITY)


def test_the_last_table_outlives_its_server_and_a_new_one_replaces_it(
    ns_name: str, writer: RouteWriter, reader: RouteReader, me: BrokerData
) -> None:
    t = table(ns_name, writer, me)
    writer.publish(t)
    assert reader.read() == t
    writer.close()  # the server "dies": its liveness goes, the segment stays
    fresh()
    assert reader.read() == t and not reader.server_alive()
    successor = RouteWriter.create(ns_name, 5, CAPACITY)
    try:
        fresh()
        assert reader.read().incarnation == successor.incarnation and reader.read().brokers == ()
    finally:
        successor.close()
        successor.unlink()


def _damage(ns: str, at: int, data: bytes) -> None:
    seg = Segment.open(routes_name(ns))
    try:
        (seq,) = struct.unpack_from("<Q", seg.buf, 16)
        seg.buf[at : at + len(data)] = data
        struct.pack_into("<Q", seg.buf, 16, seq + 2)
    finally:
        seg.close()


@pytest.mark.parametrize(
    ("at", "data", "says"),
    [
        (HEADER_BYTES, b"XX", "checksum does not match"),
        (48, struct.pack("<I", CAPACITY + 1), "exceeds capacity"),
    ],
)
def test_damage_is_ignored_with_one_warning(
    ns_name: str,
    writer: RouteWriter,
    reader: RouteReader,
    me: BrokerData,
    caplog: pytest.LogCaptureFixture,
    at: int,
    data: bytes,
    says: str,
) -> None:
    t = table(ns_name, writer, me)
    writer.publish(t)
    assert reader.read() == t
    _damage(ns_name, at, data)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            fresh()
            assert reader.read() == t
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and says in warnings[0].getMessage()
    writer.publish(table(ns_name, writer, me, version=2))  # the server's next table is good again
    fresh()
    assert reader.read().version == 2
