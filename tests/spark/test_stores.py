"""Which stores a read covers (a store, or a cluster's root of stores) and how filters on the
root's `broker` column prune them: plain files and pure functions, no Spark session."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.datasource import EqualTo, In, Not, StringStartsWith

from shmq.errors import NotAStoreError
from shmq.spark.pushdown import ScanBounds, push_filters
from shmq.spark.schema import ARROW_SCHEMA, ROOT_ARROW_SCHEMA, schema_ddl, with_broker
from shmq.spark.stores import StoreRef, open_stores, parse_broker_option, root_brokers, select_brokers


def _store(path: Path, first_message: bool = True) -> Path:
    """A directory as a broker leaves it: commitlog/ once a message was stored, else only its checkpoint."""
    path.mkdir(parents=True)
    if first_message:
        (path / "commitlog").mkdir()
    else:
        (path / "checkpoint").write_bytes(b"\0" * 16)
    return path


def test_a_store_a_root_and_neither(tmp_path: Path) -> None:
    one = _store(tmp_path / "one")
    assert open_stores(str(one)) == open_stores(str(one) + "/")
    assert not open_stores(str(one)).is_root
    assert open_stores(str(one)).stores() == [StoreRef(None, str(one))]

    root = tmp_path / "root"
    _store(root / "ns1-b1")
    _store(root / "ns1-b0", first_message=False)  # started, nothing stored yet: still a store
    (root / "lost+found").mkdir()  # not a store: left out
    (root / "notes.txt").write_text("not a directory")
    found = open_stores(str(root))
    assert found.is_root
    assert found.stores() == [StoreRef(b, str(root / b)) for b in ("ns1-b0", "ns1-b1")]
    assert found.stores(["ns1-b1", "ns1-b9"]) == [StoreRef("ns1-b1", str(root / "ns1-b1"))]
    _store(root / "ns1-b2")  # a broker started later: the next listing has it
    assert root_brokers(str(root)) == ["ns1-b0", "ns1-b1", "ns1-b2"]

    (tmp_path / "empty").mkdir()
    (tmp_path / "plain" / "sub").mkdir(parents=True)
    for path in ("empty", "plain"):
        with pytest.raises(NotAStoreError, match="nor subdirectories that are stores") as e:
            open_stores(str(tmp_path / path))
        assert "\n" not in str(e.value) and "shmq cluster --store-root DIR" in str(e.value)
    with pytest.raises(NotAStoreError, match="no such directory"):
        open_stores(str(tmp_path / "nowhere"))
    with pytest.raises(NotAStoreError, match="no such directory"):
        open_stores(str(tmp_path / "root" / "notes.txt"))


def test_a_store_inside_a_store_does_not_make_it_a_root(tmp_path: Path) -> None:
    outer = _store(tmp_path / "outer")
    _store(outer / "inner")
    assert not open_stores(str(outer)).is_root


def test_broker_selection_and_option() -> None:
    assert select_brokers(["b", "a", "c"], None) == ["a", "b", "c"]
    assert select_brokers(["b", "a", "c"], ["c", "a", "z"]) == ["a", "c"]
    assert select_brokers(["a"], []) == []
    assert parse_broker_option(None) is None
    assert parse_broker_option(" , ") is None
    assert parse_broker_option("b1, b2,,") == ["b1", "b2"]


def test_filters_on_broker_prune_stores_exactly() -> None:
    other = StringStartsWith(("broker",), "ns")
    bounds, rest = push_filters(ScanBounds(), [In(("broker",), ("a", "b", "c")), EqualTo(("topic",), "T"), other])
    assert rest == [other]  # a prefix is Spark's to check: the scan takes only what it applies exactly
    assert [b for b in "abcd" if bounds.wants_broker(b)] == ["a", "b", "c"]
    assert bounds.wants_broker(None)  # a single store has no broker to filter on
    assert bounds.topics == frozenset({"T"})
    bounds, rest = push_filters(bounds, [Not(EqualTo(("broker",), "b")), Not(In(("broker",), ("c",)))])
    assert rest == [] and [b for b in "abcd" if bounds.wants_broker(b)] == ["a"]
    assert not bounds.empty
    bounds, _ = push_filters(bounds, [Not(EqualTo(("broker",), "a"))])
    assert bounds.empty
    bounds, _ = push_filters(ScanBounds(), [EqualTo(("broker",), "a"), EqualTo(("broker",), "b")])
    assert bounds.empty
    not_topic = Not(EqualTo(("topic",), "T"))  # NOT on other columns stays Spark's
    assert push_filters(ScanBounds(), [not_topic, EqualTo(("broker",), 3)])[1] == [not_topic, EqualTo(("broker",), 3)]


def test_root_rows_carry_their_broker_as_the_last_column() -> None:
    assert schema_ddl(False).split(", ")[-1] == "body binary"
    assert schema_ddl(True) == schema_ddl(False) + ", broker string"
    assert ROOT_ARROW_SCHEMA.names == [*ARROW_SCHEMA.names, "broker"]
    empty = pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)
    assert with_broker(empty, "b").num_rows == 0
    row = dict.fromkeys(ARROW_SCHEMA.names) | {"topic": "T", "queue_id": 1}
    batch = with_broker(pa.RecordBatch.from_pylist([row, row], schema=ARROW_SCHEMA), "ns1-b0")
    assert batch.schema == ROOT_ARROW_SCHEMA
    assert batch.column("broker").to_pylist() == ["ns1-b0", "ns1-b0"]
    assert batch.column("queue_id").to_pylist() == [1, 1]


def test_root_listing_ignores_a_vanished_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _store(root / "b0")
    found = open_stores(str(root))
    os.rename(root, tmp_path / "moved")
    assert found.stores() == []
