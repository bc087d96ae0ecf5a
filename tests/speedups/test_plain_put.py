"""The fused plain put (``shmq.store.write.plain_put``, compiled ``put_plain``) against today's put path:
two stores take the same puts, one with the plain put and one without, and must end with the
same commitlog, consume-queue and index bytes, the same results and refusals, and the same
errors. The puts are drawn to reach every way out of the plain put: damaged records, missing
body CRCs, hidden transaction records, other topics, segment, queue-file and index-file rolls,
new queues, user batches over maxMessageSize, a hook that acts."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from shmq.codec import record as fmt
from shmq.store.mapped_file import NEVER
from shmq.store.message_store import MessageStore
from shmq.store.write import plain_put
from shmq.store.write.hooks import PutRequest
from tests.speedups.conftest import compiled_or_skip

_CONFIG = {
    "mappedFileSizeCommitLog": 16384,
    "mappedFileSizeConsumeQueue": 20 * 64,
    "maxHashSlotNum": 31,
    "maxIndexNum": 90,
    "maxMessageSize": 3000,
    "warmMappedFileEnable": False,
    "flushDiskType": "ASYNC_FLUSH",
}


@pytest.fixture(autouse=True)
def _built() -> None:
    compiled_or_skip("_store", "put_plain")


def test_layout_constants_match_the_reference() -> None:
    import shmq._speedups._store as c
    from shmq.store import index_file

    expect = {
        "MIN_BLANK": fmt.MIN_BLANK,
        "CQ_ENTRY_SIZE": fmt.CQ_ENTRY_SIZE,
        "TRANSACTION_MASK": fmt.TRANSACTION_MASK,
        "HIDDEN_TX": 0x4,
        "_H_BEGIN_TS": index_file._H_BEGIN_TS,
        "_H_END_TS": index_file._H_END_TS,
        "_H_BEGIN_PHYS": index_file._H_BEGIN_PHYS,
        "_H_END_PHYS": index_file._H_END_PHYS,
        "_H_SLOTS_USED": index_file._H_SLOTS_USED,
    }
    assert expect == c.PUT_LAYOUT
    from shmq.store.write import log_writer

    assert c.PUT_LAYOUT["HIDDEN_TX"] == log_writer.HIDDEN_TX_BIT


record = st.fixed_dictionaries(
    {
        "body": st.binary(max_size=200),
        "keys": st.sampled_from([None, "k1", "k1 k2", "a b c"]),
        "tags": st.sampled_from([None, "TagA", "TagB"]),
        "sysflag": st.sampled_from([0, 0, 0, 0x4, 0x8, 0x1]),
        "crc0": st.sampled_from([False] * 6 + [True]),
        "topic": st.sampled_from(["T1"] * 8 + ["T2"]),
    }
)
put = st.fixed_dictionaries(
    {
        "records": st.lists(record, min_size=1, max_size=12),
        "queue": st.sampled_from([0, 0, 0, 0, 0, 1, 2]),
        "user_batch": st.booleans(),
        "damage": st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=2),
        "damage_often": st.sampled_from([False, False, True]),
        "starts": st.sampled_from([None] * 8 + ["swap", "shift"]),
        "clean": st.sampled_from([True, True, False]),  # every record valid: the plain put's case
    }
)


def _request(p: dict, topic: str = "T1") -> PutRequest:
    recs = []
    clean = p.get("clean", False)
    for r in p["records"]:
        if clean:
            r = {**r, "sysflag": 0, "crc0": False, "topic": "T1"}
        props = {fmt.PROPERTY_UNIQ_KEY: "u" + str(len(recs))}
        if r["keys"]:
            props[fmt.PROPERTY_KEYS] = r["keys"]
        if r["tags"]:
            props[fmt.PROPERTY_TAGS] = r["tags"]
        recs.append(
            fmt.encode_message(
                r["topic"],
                r["body"],
                properties=props,
                sysflag=r["sysflag"],
                born_timestamp=1,
                crc=0 if r["crc0"] else None,
            )
        )
    req = PutRequest.of_records(topic, p["queue"], recs)
    b = req.batch
    buf = bytearray(b.buf)
    if p["damage_often"] and not clean:
        for at, v in p["damage"]:
            buf[at % len(buf)] = v
    starts = b.starts.copy()
    if clean:
        pass
    elif p["starts"] == "swap" and len(starts) > 2:
        starts[1], starts[2] = starts[2], starts[1]
    elif p["starts"] == "shift" and len(starts) > 1:
        starts[-1] += 3
    req.batch = dataclasses.replace(b, buf=bytes(buf), starts=starts)
    req.user_batch = p["user_batch"]
    return req


def _outcome(store: MessageStore, req: PutRequest) -> tuple:
    try:
        r = store.put(req, wait_flush=False)
    except Exception as e:  # noqa: BLE001 - type and message compared
        return type(e).__name__, str(e)
    return (
        r.status,
        r.wrote_offset,
        r.wrote_bytes,
        r.queue_offset,
        r.msg_num,
        r.store_timestamp,
        r.phys_offsets.tolist(),
        r.queue_offsets.tolist(),
        None if r.refused is None else r.refused.tolist(),
        list(r.refusals),
    )


def _state(store: MessageStore) -> tuple:
    queues = sorted(
        (k, cq.max_offset, cq.max_phys_end, cq.min_offset, [f.wrote_position for f in cq.queue.files])
        for k, cq in store.queues.items()
    )
    assert store.index is not None
    index = [
        (f.index_count, f.begin_timestamp, f.end_timestamp, f.begin_phys_offset, f.end_phys_offset, f._slots_used)
        for f in store.index.files
    ]
    return (
        queues,
        index,
        store.commitlog.confirmed,
        store.commitlog.max_offset,
        store.writer.dispatched_ts,
        [f.wrote_position for f in store.commitlog.queue.files],
    )


def _files(root: str) -> dict[str, bytes]:
    """The store's data files by name; index files (named by the wall clock) by their order."""
    out = {}
    for sub in ("commitlog", "consumequeue", "index"):
        for d, _, names in os.walk(os.path.join(root, sub)):
            for k, n in enumerate(sorted(names)):
                with open(os.path.join(d, n), "rb") as f:
                    out[f"index/{k}" if sub == "index" else os.path.relpath(os.path.join(d, n), root)] = f.read()
    return out


def _count_plain_puts(monkeypatch: pytest.MonkeyPatch, plain: bool) -> list[int]:
    """Turn the plain put on or off and count (in the returned one-item list) the puts it took;
    the compiled twin is used also under SHMQ_NO_EXTENSIONS=1, as in every differential test."""
    monkeypatch.setattr(plain_put, "ENABLED", plain)
    calls = [0]
    compiled = compiled_or_skip("_store", "put_plain")

    def counting(*args):
        out = compiled(*args)
        calls[0] += out >= 0
        return out

    monkeypatch.setattr(plain_put, "put_plain", counting)
    return calls


def _run(puts: list[dict], plain: bool, monkeypatch: pytest.MonkeyPatch, extra_hook: bool) -> tuple:
    calls = _count_plain_puts(monkeypatch, plain)
    with tempfile.TemporaryDirectory() as root:
        store = MessageStore(root, _CONFIG).start()
        if extra_hook:
            store.put_hooks.append(_Acting())
        outcomes = []
        try:
            for k, p in enumerate(puts):
                ts = 1_700_000_000_000 + 1500 * k
                store.commitlog.next_store_timestamp = lambda ts=ts: ts  # type: ignore[method-assign]
                outcomes.append((_outcome(store, _request(p)), _state(store)))
        finally:
            store.shutdown()
        return outcomes, _files(root), calls[0]


class _Acting:
    """A hook that may act on any put: the plain put must leave such puts to the reference."""

    def plain_lane(self, req: PutRequest) -> bool:
        return False  # it may act on any put

    def before_put(self, req: PutRequest) -> None:
        if len(req) == 3:
            req.refuse(None, 16, "three is refused")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(put, min_size=1, max_size=14), st.booleans())
def test_same_store_bytes_results_and_errors(
    monkeypatch: pytest.MonkeyPatch, puts: list[dict], extra_hook: bool
) -> None:
    ref, ref_files, none = _run(puts, False, monkeypatch, extra_hook)
    new, new_files, taken = _run(puts, True, monkeypatch, extra_hook)
    assert none == 0
    event(f"plain put took {min(taken, 3)}{'+' if taken >= 3 else ''} of {len(puts)} puts")
    assert new == ref
    assert new_files.keys() == ref_files.keys()
    for name in ref_files:
        assert new_files[name] == ref_files[name], name
    if extra_hook:
        assert taken == 0


def test_the_usual_batch_takes_the_plain_put(monkeypatch: pytest.MonkeyPatch) -> None:
    clean = {"body": b"x" * 40, "keys": "k", "tags": "TagA", "sysflag": 0, "crc0": False, "topic": "T1"}
    puts = [
        {"records": [clean] * 5, "queue": 0, "user_batch": True, "damage": [], "damage_often": False, "starts": None}
    ] * 30
    ref, ref_files, _ = _run(puts, False, monkeypatch, False)
    new, new_files, taken = _run(puts, True, monkeypatch, False)
    assert new == ref and new_files == ref_files
    assert taken >= 20  # all but the queue's first put and those that roll or reserve


def test_put_plain_refuses_bad_arguments_without_writing() -> None:
    fn = compiled_or_skip("_store", "put_plain")
    rec = fmt.encode_message("T1", b"abc")
    buf = rec * 2
    starts = np.array([0, len(rec)], np.int64)
    z = np.zeros(2, np.int64)
    e = np.empty(0, np.int64)
    cl, cq = bytearray(4096), bytearray(400)
    args = [
        buf,
        starts,
        z,
        e,
        e,
        b"T1",
        100,
        -1,
        False,
        cl,
        0,
        0,
        4000,
        0,
        0,
        1,
        2,
        cq,
        0,
        400,
        None,
        0,
        0,
        0,
        0,
        0,
        0,
        -1,
        np.empty(2, np.int64),
    ]
    assert fn(*args) == 0 and cl[: len(buf)] != buf  # patched copy
    for k, bad in [
        (9, bytes(4096)),
        (10, 4000),
        (10, -1),
        (12, 10),
        (18, 390),
        (19, 500),
        (1, starts[::-1].copy()),
        (2, np.zeros(3, np.int64)),
        (28, np.empty(3, np.int64)),
        (3, np.zeros(1, np.int64)),
        (6, 2),
        (5, b"T2"),
    ]:
        cl2, cq2 = bytearray(4096), bytearray(400)
        a = list(args)
        a[9], a[17] = cl2, cq2
        a[k] = bad
        assert fn(*a) == (-2 if k in (10, 12, 18, 19) else -1), k  # -2: valid records, a file lacks the room
        assert not any(cl2) and not any(cq2), k


def test_reservations_ahead_keep_every_put_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long run of usual batches: the files' next reserve steps are made in the allocator's
    thread (keep_reserved) before the writer needs them, so no put after the queue's first
    falls back to the reference path to reserve; bytes and results stay the reference's."""
    config = {
        "mappedFileSizeCommitLog": 4 << 20,
        "maxHashSlotNum": 1000,
        "maxIndexNum": 100_000,
        "warmMappedFileEnable": False,
        "flushDiskType": "ASYNC_FLUSH",
    }
    recs = [{"body": b"y" * 60, "keys": "k", "tags": "TagA", "sysflag": 0, "crc0": False, "topic": "T1"}] * 50
    p = {"records": recs, "queue": 0, "user_batch": True, "damage": [], "damage_often": False, "starts": None}

    def run(plain: bool) -> tuple:
        calls = _count_plain_puts(monkeypatch, plain)
        with tempfile.TemporaryDirectory() as root:
            store = MessageStore(root, config).start()
            out, marks = [], 0
            clog = store.commitlog
            try:
                for k in range(400):
                    clog.next_store_timestamp = lambda k=k: 1_700_000_000_000 + k  # type: ignore[method-assign]
                    out.append(_outcome(store, _request(p)))
                    done = threading.Event()  # the allocator's jobs run in order: all before this one are done
                    store.allocator._submit(done.set)
                    assert done.wait(10)
                    cmf = store.queues["T1", 0].queue.files[-1]
                    marks += cmf.reserve_mark != NEVER and cmf.reserved_position < cmf.size
                out.append(_state(store))
            finally:
                store.shutdown()
            return out, _files(root), calls[0], marks

    ref, ref_files, _, _ = run(False)
    new, new_files, taken, marks = run(True)
    assert new == ref and new_files == ref_files
    assert taken == 399  # all but the queue's first put (which makes the queue and the index file)
    assert marks == 400  # a consume-queue reservation is always waiting for the writer to near it
