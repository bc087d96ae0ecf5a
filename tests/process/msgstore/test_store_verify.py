"""`shmq admin store verify | dump` on a store a real broker wrote and was stopped."""

from __future__ import annotations

import base64
import json
import os

import pytest

import shmq
from shmq import Message, Producer
from shmq.cli.main import main
from shmq.codec import record as fmt

N = 60


@pytest.fixture
def stopped_store(broker_name: str, store_dir: str, config: dict) -> tuple[str, list[shmq.SendResult]]:
    with shmq.Broker(store_dir, name=broker_name, config=config):
        shmq.Admin(broker=broker_name).create_topic("T", queues=2)
        p = Producer("pg", broker=broker_name).start()
        try:
            sent = [p.send(Message("T", f"body-{i}".encode(), tags=f"t{i % 3}", keys=f"k{i}")) for i in range(N)]
            sent.append(p.send(Message("U", b"other", keys="u")))
        finally:
            p.shutdown()
    return store_dir, sent


def _verify(capsys: pytest.CaptureFixture[str], store: str) -> tuple[int, dict]:
    status = main(["admin", "store", "verify", store, "--json"])
    return status, json.loads(capsys.readouterr().out)


def _flip(path: str, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x40]))


def test_clean_store_verifies(stopped_store, capsys: pytest.CaptureFixture[str]) -> None:
    store, _ = stopped_store
    status, report = _verify(capsys, store)
    assert status == 0 and report["ok"] and report["problems"] == []
    c = report["counts"]
    assert c["records"] == N + 1 and c["cq_entries"] == N + 1 and c["consume_queues"] == 3
    assert c["index_entries"] == 2 * (N + 1)  # UNIQ_KEY and one key each
    assert main(["admin", "store", "verify", store]) == 0
    assert "OK: no problems found" in capsys.readouterr().out


def test_flipped_body_byte_is_found_with_its_offset(stopped_store, capsys: pytest.CaptureFixture[str]) -> None:
    store, sent = stopped_store
    phys = int(sent[7].offset_msg_id[16:], 16)
    _flip(os.path.join(store, "commitlog", fmt.offset_file_name(0)), phys + fmt.OFF_BODY + 2)
    status, report = _verify(capsys, store)
    assert status == 1 and report["problem_count"] == 1
    p = report["problems"][0]
    assert p["file"] == os.path.join("commitlog", fmt.offset_file_name(0)) and p["position"] == phys
    assert "CRC" in p["problem"]


def test_flipped_consume_queue_byte_is_found(stopped_store, capsys: pytest.CaptureFixture[str]) -> None:
    store, sent = stopped_store
    r = sent[10]
    cq = os.path.join("consumequeue", "T", str(r.queue.queue_id), fmt.offset_file_name(0))
    _flip(os.path.join(store, cq), r.queue_offset * fmt.CQ_ENTRY_SIZE + 11)  # low byte of the size
    status, report = _verify(capsys, store)
    assert status == 1 and report["problem_count"] == 1
    p = report["problems"][0]
    assert (p["file"], p["position"]) == (cq, r.queue_offset * fmt.CQ_ENTRY_SIZE)
    assert f"queue offset {r.queue_offset}" in p["problem"] and "size" in p["problem"]


def test_verify_refuses_a_store_in_use(
    broker_name: str, store_dir: str, config: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    with shmq.Broker(store_dir, name=broker_name, config=config):
        assert main(["admin", "store", "verify", store_dir]) == 1
    assert "is open by a broker" in capsys.readouterr().err


def test_dump_round_trips_counts_and_bodies(stopped_store, capsys: pytest.CaptureFixture[str]) -> None:
    store, sent = stopped_store
    assert main(["admin", "store", "dump", store]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == N + 1
    assert [base64.b64decode(r["body"]) for r in rows[:N]] == [f"body-{i}".encode() for i in range(N)]
    assert [r["msg_id"] for r in rows] == [s.msg_id for s in sent]
    assert rows[3]["tags"] == "t0" and rows[3]["keys"] == "k3" and rows[N]["topic"] == "U"

    start = rows[20]["commitlog_offset"]
    assert main(["admin", "store", "dump", store, "--topic", "T", "--from", str(start), "--max", "5"]) == 0
    part = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["commitlog_offset"] for r in part] == [r["commitlog_offset"] for r in rows[20:25]]
