"""The pure checks of `store verify` and the row of `store dump`."""

from __future__ import annotations

import base64
import zlib

from shmq.codec import record as fmt
from shmq.store.dump import record_row
from shmq.store.verify import MAX_PROBLEMS, RecordInfo, Report, cq_entry_problem, index_entry_problem

# DESIGN.md section 5's Spark columns (shmq.spark.schema needs the spark extra)
COLUMNS = (
    "topic",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "size",
    "tags",
    "keys",
    "msg_id",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
    "sys_flag",
    "properties",
    "body",
)
REC = RecordInfo("T", 1, 5, 120, fmt.tags_code("A"), frozenset({11, 22}), True)


def test_cq_entry_matching_its_record_is_fine() -> None:
    assert cq_entry_problem("T", 1, 5, 120, fmt.tags_code("A"), REC) is None


def test_cq_entry_problems_each_named() -> None:
    code = fmt.tags_code("A")
    assert cq_entry_problem("T", 1, 5, 120, code, None) == "points at no record"
    assert "T/1" in (cq_entry_problem("U", 1, 5, 120, code, REC) or "")
    assert "T/1" in (cq_entry_problem("T", 2, 5, 120, code, REC) or "")
    assert "queue offset is 5" in (cq_entry_problem("T", 1, 6, 120, code, REC) or "")
    assert "size 121" in (cq_entry_problem("T", 1, 5, 121, code, REC) or "")
    assert "tag code" in (cq_entry_problem("T", 1, 5, 120, code + 1, REC) or "")
    assert "enters no consume queue" in (cq_entry_problem("T", 1, 5, 120, code, REC._replace(in_queue=False)) or "")


def test_index_entry_problems() -> None:
    assert index_entry_problem(11, 3, 4, REC) is None
    assert index_entry_problem(33, 3, 4, REC) == "key hash 33 is none of the record's keys"
    assert index_entry_problem(11, 4, 4, REC) == "prev link 4 does not point back"
    assert index_entry_problem(11, 0, 1, None) == "points at no record"


def test_report_counts_all_but_keeps_the_first() -> None:
    r = Report("/s")
    for i in range(MAX_PROBLEMS + 5):
        r.add("commitlog/0", i, "x")
    assert not r.ok and r.problem_count == MAX_PROBLEMS + 5 and len(r.problems) == MAX_PROBLEMS
    assert r.to_json()["problems"][0] == {"file": "commitlog/0", "position": 0, "problem": "x"}


def test_dump_row_has_the_spark_columns_and_decompresses() -> None:
    body = zlib.compress(b"hello" * 100)
    props = fmt.message_properties(tags="A", keys="k1 k2", uniq_key="ID1")
    raw = fmt.encode_message("T", body, properties=props, queue_id=2, sysflag=fmt.FLAG_COMPRESSED, born_timestamp=4)
    row = record_row(fmt.decode_record(raw))
    assert tuple(row) == COLUMNS
    assert base64.b64decode(row["body"]) == b"hello" * 100
    assert (row["tags"], row["keys"], row["msg_id"], row["queue_id"]) == ("A", "k1 k2", "ID1", 2)
