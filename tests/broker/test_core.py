"""The broker core without a process: sends, errors, topics, long polling, offsets, group commit."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from shmq.broker.answers import Peer
from shmq.broker.core import BrokerCore
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.config import BrokerConfig
from shmq.errors import CorruptFrameError
from shmq.model.perm import PERM_READ
from shmq.store.message_store import MessageStore
from shmq.store.write.hooks import PutRequest

from .conftest import answers, serve


def send(
    req_id: int,
    topic: str,
    body: bytes,
    queue_id: int = -1,
    flags: int = 0,
    record: bytes | None = None,
    tags: str | None = None,
) -> tuple[int, bytes]:
    rec = (
        record if record is not None else fmt.encode_message(topic, body, properties=fmt.message_properties(tags=tags))
    )
    return P.SEND, P.encode_send(req_id, time.monotonic_ns(), queue_id, flags, fmt.tags_code(tags), topic, [], rec)


def bodies(core: BrokerCore, topic: str, qid: int) -> list[bytes]:
    return [bytes(m.body) for m in core.store.get_message(topic, qid, 0, 1000).messages]


def topics_on_disk(core: BrokerCore) -> dict:
    try:
        with open(os.path.join(core.store.store_dir, "config", "topics.json")) as f:
            return json.load(f)["topicConfigTable"]
    except FileNotFoundError:
        return {}


def test_a_pass_of_sends_is_stored_and_answered_in_order(core):
    peer = Peer(1)
    got = serve(core, peer, *[send(i, "T", b"m%d" % i, queue_id=i % 2) for i in range(10)])  # 10: packed answers
    assert [(k, r.req_id, r.status, r.queue_id, r.queue_offset) for k, r in got] == [
        (P.SEND_RESULT, i, P.SEND_OK, i % 2, i // 2) for i in range(10)
    ]
    assert bodies(core, "T", 0) == [b"m%d" % i for i in range(0, 10, 2)]
    got = serve(core, peer, send(20, "T", b"one", queue_id=1))  # a single send: a plain SEND_RESULT
    assert got[0][1].queue_offset == 5 and bodies(core, "T", 1)[-1] == b"one"
    assert serve(core, peer, send(21, "T", b"quiet", queue_id=0, flags=P.FLAG_ONEWAY)) == []
    assert bodies(core, "T", 0)[-1] == b"quiet"


def test_a_refused_send_fails_alone(core):
    core.update_topic("ReadOnly", perm=PERM_READ)
    bad = bytearray(fmt.encode_message("T", b"bad"))
    bad[fmt.OFF_MAGIC] ^= 0xFF
    got = serve(
        core,
        Peer(1),
        send(1, "T", b"a", 0),
        send(2, "T", b"", 0, record=bytes(bad)),
        send(3, "T", b"c", 0),
        send(4, "ReadOnly", b"d"),
        send(5, "T", b"e", 9),
        send(6, "bad name", b"", record=fmt.encode_message("T", b"f")),
    )
    by_id = {r.req_id: (k, r) for k, r in got}
    assert {i for i, (k, _) in by_id.items() if k == P.SEND_RESULT} == {1, 3}
    assert by_id[2][1].code == P.MESSAGE_ILLEGAL and "magic" in by_id[2][1].message
    assert by_id[4][1].code == P.NO_PERMISSION
    assert by_id[5][1].code == P.SYSTEM_ERROR and "queue id 9 is illegal" in by_id[5][1].message
    assert by_id[6][1].code == P.MESSAGE_ILLEGAL
    assert bodies(core, "T", 0) == [b"a", b"c"]


def test_a_send_alone_in_its_pass_gets_the_same_answers(core):
    """A single SEND (the sync send) takes a shorter way through the core: same routing, put
    hooks, errors and auto-create as a run of them."""
    core.update_topic("ReadOnly", perm=PERM_READ)
    bad = bytearray(fmt.encode_message("T", b"bad"))
    bad[fmt.OFF_MAGIC] ^= 0xFF
    peer = Peer(1)
    cases = [
        send(1, "T", b"a", 0),
        send(2, "T", b"", 0, record=bytes(bad)),
        send(3, "ReadOnly", b"d"),
        send(4, "T", b"e", 9),
        send(5, "bad name", b"", record=fmt.encode_message("T", b"f")),
        send(6, "T", b"b", 0, flags=P.FLAG_ONEWAY),
        send(7, "Fresh", b"c"),
    ]
    got = [serve(core, peer, frame) for frame in cases]
    assert [len(g) for g in got] == [1, 1, 1, 1, 1, 0, 1]
    by_id = {r.req_id: (k, r) for k, r in (g[0] for g in got if g)}
    assert by_id[1][0] == P.SEND_RESULT and by_id[1][1].queue_offset == 0
    assert by_id[2][1].code == P.MESSAGE_ILLEGAL and "magic" in by_id[2][1].message
    assert by_id[3][1].code == P.NO_PERMISSION
    assert by_id[4][1].code == P.SYSTEM_ERROR and "queue id 9 is illegal" in by_id[4][1].message
    assert by_id[5][1].code == P.MESSAGE_ILLEGAL
    assert by_id[7][0] == P.SEND_RESULT and "Fresh" in topics_on_disk(core)
    assert bodies(core, "T", 0) == [b"a", b"b"]
    busy = send(8, "T", b"late", 0)
    core.handle(peer, [(busy[0], memoryview(busy[1]))], time.monotonic_ns() + 10**12)
    core.end_pass()
    assert [r.code for _, r in answers(peer)] == [P.SYSTEM_BUSY]


def test_auto_created_topics_are_durable_when_the_pass_ends(core):
    """The loop writes a pass's answers only after ``end_pass``: by then topics created in the
    pass are in topics.json (one write for all of them)."""
    peer = Peer(1)
    core.handle(
        peer, [(k, memoryview(p)) for k, p in (send(1, "New1", b"x"), send(2, "New2", b"y"))], time.monotonic_ns()
    )
    assert core.topics.dirty and "New1" not in topics_on_disk(core)
    core.end_pass()
    assert not core.topics.dirty and {"New1", "New2"} <= set(topics_on_disk(core))
    assert [r.status for _, r in answers(peer)] == [P.SEND_OK, P.SEND_OK]


def test_topics_with_queues_but_no_config_are_rebuilt(tmp_path, config):
    """Regression (issue 9 A1): a broker killed before writing topics.json left consume queues
    that no topic config named; the next broker must list those topics."""
    d = str(tmp_path / "s")
    with MessageStore(d, config) as store:
        for topic, qid in (("Lost", 5), ("Lost", 0), ("Small", 1)):
            store.put(PutRequest.of_records(topic, qid, [fmt.encode_message(topic, b"x")]))
    store = MessageStore(d, config).start()
    try:
        core = BrokerCore(store, BrokerConfig.load(config))
        assert core.topics.get("Lost").write_queue_nums == 6  # the highest queue id found, + 1
        assert core.topics.get("Small").read_queue_nums == 4  # what auto-creation gives
        assert topics_on_disk(core)["Lost"]["readQueueNums"] == 6
    finally:
        store.shutdown()


def test_send_batch_is_all_or_nothing(core):
    batch = fmt.encode_batch("B", [b"a", b"b", b"c"])
    peer = Peer(1)
    got = serve(core, peer, (P.SEND_BATCH, P.encode_send_batch(1, time.monotonic_ns(), 2, 0, "B", batch)))
    assert got[0][0] == P.SEND_RESULT and got[0][1].count == 3 and got[0][1].queue_id == 2
    garbled = bytearray(batch.buf)
    garbled[batch.starts[2] + fmt.OFF_MAGIC] ^= 0xFF
    bad = fmt.EncodedBatch(bytes(garbled), batch.starts, batch.tags_codes, batch.key_hashes, batch.key_records)
    got = serve(core, peer, (P.SEND_BATCH, P.encode_send_batch(2, time.monotonic_ns(), 2, 0, "B", bad)))
    assert got[0][0] == P.ERROR and got[0][1].code == P.MESSAGE_ILLEGAL
    assert bodies(core, "B", 2) == [b"a", b"b", b"c"]


def test_send_multi_answers_each_record(core):
    batch = fmt.concat_batches(
        [fmt.encode_batch("A", [b"a"]), fmt.encode_batch("B", [b"b"]), fmt.encode_batch("A", [b"a2"])]
    )
    frame = P.encode_send_multi(1, time.monotonic_ns(), 0, ["A", "B"], np.array([0, 1, 0]), np.array([1, 7, 1]), batch)
    ((kind, r),) = serve(core, Peer(1), (P.SEND_MULTI, frame))
    assert kind == P.SEND_MULTI_RESULT and r.statuses.tolist() == [P.SEND_OK, -P.SYSTEM_ERROR, P.SEND_OK]
    assert r.queue_offsets.tolist() == [0, -1, 1] and bodies(core, "A", 1) == [b"a", b"a2"]


def test_long_poll_woken_by_a_put_or_timed_out(core):
    waiter, producer = Peer(1), Peer(2)
    serve(core, producer, send(1, "W", b"first", 0))
    assert serve(core, waiter, (P.PULL_WAIT, P.encode_pull_wait(7, "W", 0, 1, 5000))) == []
    serve(core, producer, send(2, "W", b"second", 0))
    assert answers(waiter) == [(P.WAKE, P.Wake(7, 2, False))]
    assert serve(core, waiter, (P.PULL_WAIT, P.encode_pull_wait(8, "W", 0, 2, 1))) == []
    core.tick(time.monotonic_ns() + 5_000_000)
    assert answers(waiter) == [(P.WAKE, P.Wake(8, 2, True))]


def test_commit_offset_and_heartbeat(core):
    assert (
        serve(
            core,
            Peer(1),
            (P.COMMIT_OFFSET, P.encode_commit_offset(1, "cg", "T", 3, 42)),
            (P.HEARTBEAT, P.encode_heartbeat(2)),
        )
        == []
    )
    assert core.offsets.query("cg", "T", 3) == 42 and core.offsets.dirty


def test_unknown_frame_kind_is_corrupt(core):
    with pytest.raises(CorruptFrameError):
        core.handle(Peer(1), [(P.WAKE, memoryview(P.encode_wake(1, 0, False)))], time.monotonic_ns())


def test_sync_flush_answers_wait_for_one_group_commit(tmp_path, config):
    config["flushDiskType"] = "SYNC_FLUSH"
    store = MessageStore(str(tmp_path / "s"), config).start()
    try:
        core = BrokerCore(store, BrokerConfig.load(config))
        peer = Peer(1)
        frames = [send(i, "S", b"d%d" % i, 0) for i in range(3)]
        core.handle(peer, [(k, memoryview(p)) for k, p in frames], time.monotonic_ns())
        assert not peer.out and core.answers.pending  # nothing is answered before the flush
        assert core.end_pass() == 3
        assert [r.status for _, r in answers(peer)] == [P.SEND_OK] * 3
        assert core.stats["group_commits"] == 1 and store.commitlog.queue.flushed_offset >= store.commitlog.max_offset
    finally:
        store.shutdown()
