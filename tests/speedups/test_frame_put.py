"""The SEND_BATCH lane (``SendProcessor.send_batch`` through ``MessageStore.put_frame``, compiled
``put_frame``) against the reference (the frame decoded, then ``MessageStore.put``): two brokers
take the same frames, one with the lane and one without, and must end with the same commitlog,
consume-queue and index bytes, the same answers (SEND_RESULT, ERROR) and the same frame errors.
The frames are drawn to reach every way out of the lane: damaged records and frames (key
record numbers, record starts, lengths), missing body CRCs, transactional records, other
topics, queues picked by the broker, rolls of every file, new queues, oneway sends, batches
over maxMessageSize."""

from __future__ import annotations

import struct
import tempfile
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from shmq.broker.answers import Answers, EncodedResult, Peer
from shmq.broker.core import BrokerCore
from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.config import BrokerConfig
from shmq.errors import CorruptFrameError
from shmq.store.message_store import MessageStore
from shmq.store.write import plain_put
from tests.broker.conftest import answers
from tests.speedups.conftest import compiled_or_skip
from tests.speedups.test_plain_put import _CONFIG, _files, _request, _state, put

frame = st.fixed_dictionaries(
    {
        "put": put,
        "queue": st.sampled_from([0, 0, 0, 1, -1, -1, 9]),  # 9: past the topic's 4 write queues
        "oneway": st.sampled_from([False] * 5 + [True]),
        "frame_damage": st.sampled_from([None] * 10 + ["key_record", "starts", "length", "topic"]),
    }
)


@pytest.fixture(autouse=True)
def _built() -> None:
    compiled_or_skip("_store", "put_frame")


def test_header_size_matches_the_codec() -> None:
    import shmq._speedups._store as c

    assert {"_BATCH.size": P._BATCH.size} == c.FRAME_LAYOUT


def _payload(f: dict, req_id: int) -> bytearray:
    req = _request(f["put"])
    b = req.batch
    flags = P.FLAG_ONEWAY if f["oneway"] else 0
    data = bytearray(P.encode_send_batch(req_id, time.monotonic_ns(), f["queue"], flags, "T1", b))
    t = P._BATCH.size + 8  # "T1" padded to 8
    count, nkeys = len(b), len(b.key_hashes)
    damage = f["frame_damage"]
    if damage == "key_record" and nkeys:
        struct.pack_into("<q", data, t + 16 * count + 8 * nkeys, count)
    elif damage == "starts" and count > 1:
        struct.pack_into("<q", data, t + 8, 0)
    elif damage == "length":
        data += b"\0"
    elif damage == "topic":
        data[P._BATCH.size] = 0xFF
    return data


def _serve(core: BrokerCore, peer: Peer, payload: bytearray, ts: int) -> list:
    core.store.commitlog.next_store_timestamp = lambda: ts  # type: ignore[method-assign]
    try:
        core.handle(peer, [(P.SEND_BATCH, memoryview(payload))], time.monotonic_ns())
    except CorruptFrameError as e:
        return ["corrupt", str(e)]
    core.end_pass()
    return answers(peer)


def _run(frames: list[dict], lane: bool, monkeypatch: pytest.MonkeyPatch) -> tuple:
    monkeypatch.setattr(plain_put, "FRAME_ENABLED", lane)
    compiled = compiled_or_skip("_store", "put_frame")
    taken = [0]

    def counting(*args):
        out = compiled(*args)
        taken[0] += out >= 0
        return out

    monkeypatch.setattr(plain_put, "put_frame", counting)
    with tempfile.TemporaryDirectory() as root:
        store = MessageStore(root, _CONFIG).start()
        core = BrokerCore(store, BrokerConfig.load(_CONFIG))
        peer = Peer(1)
        out = []
        try:
            for k, f in enumerate(frames):
                got = _serve(core, peer, _payload(f, k + 1), 1_700_000_000_000 + 1500 * k)
                out.append((got, _state(store)))
        finally:
            store.shutdown()
        return out, _files(root), taken[0]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(frame, min_size=1, max_size=12))
def test_same_store_bytes_and_answers(monkeypatch: pytest.MonkeyPatch, frames: list[dict]) -> None:
    ref, ref_files, none = _run(frames, False, monkeypatch)
    new, new_files, taken = _run(frames, True, monkeypatch)
    assert none == 0
    event(f"the lane took {min(taken, 3)}{'+' if taken >= 3 else ''} of {len(frames)} frames")
    assert new == ref
    assert new_files.keys() == ref_files.keys()
    for name in ref_files:
        assert new_files[name] == ref_files[name], name


def test_the_usual_batch_takes_the_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    clean = {"body": b"x" * 40, "keys": "k", "tags": "TagA", "sysflag": 0, "crc0": False, "topic": "T1"}
    p = {"records": [clean] * 5, "queue": 0, "user_batch": True, "damage": [], "damage_often": False, "starts": None}
    frames = [{"put": p, "queue": q, "oneway": False, "frame_damage": None} for q in (0, -1, 0, 1)] * 8
    ref, ref_files, _ = _run(frames, False, monkeypatch)
    new, new_files, taken = _run(frames, True, monkeypatch)
    assert new == ref and new_files == ref_files
    assert taken >= 20  # all but each queue's first frame and those that roll or reserve
    assert all(kind == P.SEND_RESULT for got, _ in new for kind, _ in got)


def test_records_that_fail_in_the_log_are_zeroed_again() -> None:
    """The records are checked after their one copy into the commitlog (the ring may change
    under the broker): a batch that fails there leaves the log's bytes as they were."""
    fn = compiled_or_skip("_store", "put_frame")
    rec = fmt.encode_message("T1", b"abc", properties={fmt.PROPERTY_UNIQ_KEY: "u"})
    starts = np.array([0, len(rec)], np.int64)
    batch = fmt.EncodedBatch(rec * 2, starts, np.zeros(2, np.int64), *(np.empty(0, np.int64),) * 2)
    arrays = np.concatenate([starts, np.zeros(2, np.int64)])

    def call(payload: bytes, cl: bytearray, cq: bytearray, **change: object) -> int:
        a: dict[str, object] = {"arrays": arrays, "topic": b"T1", "max_body": 4096, "cl_pos": 0}
        a.update(cl_limit=4000, cq_limit=400)
        a.update(change)
        room = (cl, a["cl_pos"], 0, a["cl_limit"], 0, 0, 1, 2, cq, 0, a["cq_limit"], None, 0, 0, 0, 0, 0, 0, -1)
        return fn(memoryview(payload), a["arrays"], a["topic"], a["max_body"], -1, *room, np.empty(2, np.int64))

    good = P.encode_send_batch(1, 0, 0, 0, "T1", batch)
    cl, cq = bytearray(4096), bytearray(400)
    assert call(good, cl, cq) == 0 and cl[: 2 * len(rec)] != rec * 2  # stored, owned fields patched
    assert cq[8:12] == struct.pack(">i", len(rec))
    bad_record = bytearray(good)
    bad_record[-len(rec) + 4] ^= 0xFF  # the second record's magic
    for payload, change, expect in [
        (bytes(bad_record), {}, -1),  # fails in the log: copied, then zeroed
        (good, {"topic": b"T2"}, -1),  # (also copied, then zeroed)
        (good, {"arrays": np.array([0, len(rec), 0, 0, 5, 7], np.int64)}, -1),  # a key of record 7
        (good, {"arrays": arrays[:3]}, -1),
        (good, {"max_body": len(rec)}, -1),
        (good, {"cl_limit": len(rec)}, -2),
        (good, {"cl_pos": -1}, -2),
        (good, {"cq_limit": 20}, -2),
    ]:
        cl, cq = bytearray(4096), bytearray(400)
        assert call(payload, cl, cq, **change) == expect, change
        assert not any(cl) and not any(cq), change


@pytest.mark.parametrize("flushed", [True, False])
def test_held_lane_answers_wait_for_the_group_commit(flushed: bool) -> None:
    """A lane answer (encoded already) held for a group commit (SYNC_FLUSH; SYNC_MASTER holds
    the same way) is answered after the flush, FLUSH_DISK_TIMEOUT if the flush failed."""
    stats = {"group_commits": 0, "group_commit_ns": 0, "flushed_answers": 0}
    flushes: list[int] = []
    held = Answers(True, lambda end: flushes.append(end) or flushed, stats)
    buf, phys = P.batch_result_buffer(3)
    phys[:] = [100, 140, 180]
    P.fill_batch_result(buf, 7, 2, 30, 100, 1_700_000_000_000, 5, 3)
    peer = Peer(1)
    held.add(peer, 220, EncodedResult(buf))
    assert not peer.out
    assert held.group_commit() == 1 and flushes == [220] and stats["flushed_answers"] == 1
    ((kind, r),) = answers(peer)
    status = P.SEND_OK if flushed else P.FLUSH_DISK_TIMEOUT
    assert kind == P.SEND_RESULT
    assert r == P.SendResultFrame(7, status, 2, 30, 100, 1_700_000_000_000, 5, 3, [100, 140, 180])
