"""The put over many queues through the queue table (``shmq.store.write.multi_put``, compiled
``_slots``) against the grouped put: two stores take the same puts of many topics and queues,
one through the table and one without, and must end with the same commitlog, consume-queue and
index bytes, the same results, and the same queue numbers. Small consume-queue files make
entries roll, reservations step and new queues appear; hidden transaction records enter no
queue; the plan and the entry writer are also checked alone against their Python twins."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from shmq import _speedups
from shmq.codec import record as fmt
from shmq.store.message_store import MessageStore
from shmq.store.queue_slots import QueueSlots
from shmq.store.write import multi_put
from shmq.store.write.hooks import PutRequest
from tests.speedups.conftest import compiled_or_skip

_CONFIG = {
    "mappedFileSizeCommitLog": 32768,
    "mappedFileSizeConsumeQueue": 20 * 16,
    "maxHashSlotNum": 31,
    "maxIndexNum": 200,
    "warmMappedFileEnable": False,
    "flushDiskType": "ASYNC_FLUSH",
}


@pytest.fixture(autouse=True)
def _built() -> None:
    compiled_or_skip("_slots", "write_entries")


def test_layout_constants_match_the_reference() -> None:
    import shmq._speedups._slots as c
    from shmq.store import queue_slots as q

    assert c.LAYOUT == {
        "WIDTH": q.WIDTH,
        "MAX_OFFSET": q.MAX_OFFSET,
        "MAX_PHYS_END": q.MAX_PHYS_END,
        "FILE_FROM": q.FILE_FROM,
        "FILE_LIMIT": q.FILE_LIMIT,
        "FILE_ADDR": q.FILE_ADDR,
        "PENDING": q.PENDING,
        "CQ_ENTRY_SIZE": fmt.CQ_ENTRY_SIZE,
    }


record = st.tuples(st.integers(0, 5), st.integers(0, 3), st.sampled_from([0, 0, 0, 0, 0x4]), st.binary(max_size=60))
puts = st.lists(st.lists(record, min_size=2, max_size=20), min_size=1, max_size=25)


def _request(records: list[tuple[int, int, int, bytes]]) -> PutRequest:
    topics = [f"T{t}" for t, _, _, _ in records]
    encoded = [
        fmt.encode_message(f"T{t}", body, properties={fmt.PROPERTY_UNIQ_KEY: f"u{i}"}, sysflag=sf, born_timestamp=1)
        for i, (t, _, sf, body) in enumerate(records)
    ]
    hashes = [fmt.record_key_hashes(topics[i], f"u{i}", None) for i in range(len(records))]
    sizes = np.fromiter(map(len, encoded), np.int64, len(encoded))
    starts = np.zeros(len(encoded), np.int64)
    starts[1:] = np.cumsum(sizes)[:-1]
    batch = fmt.EncodedBatch(
        b"".join(encoded),
        starts,
        np.zeros(len(encoded), np.int64),
        np.array([h for hs in hashes for h in hs], np.int64),
        np.array([i for i, hs in enumerate(hashes) for _ in hs], np.int64),
    )
    return PutRequest.of_routes(topics, [q for _, q, _, _ in records], batch)


def _files(root: str) -> dict[str, bytes]:
    out = {}
    for sub in ("commitlog", "consumequeue", "index"):
        for d, _, names in os.walk(os.path.join(root, sub)):
            for k, n in enumerate(sorted(names)):
                with open(os.path.join(d, n), "rb") as f:
                    out[f"index/{k}" if sub == "index" else os.path.relpath(os.path.join(d, n), root)] = f.read()
    return out


def _run(batches: list[list[tuple[int, int, int, bytes]]], table: bool, monkeypatch: pytest.MonkeyPatch) -> tuple:
    monkeypatch.setattr(multi_put, "ENABLED", table)
    taken = [0]
    real = multi_put.take

    def counting(*args):  # type: ignore[no-untyped-def]
        out = real(*args)
        taken[0] += out is not None
        return out

    monkeypatch.setattr(multi_put, "take", counting)
    outcomes = []
    with tempfile.TemporaryDirectory() as root:
        store = MessageStore(root, _CONFIG).start()
        try:
            for k, records in enumerate(batches):
                ts = 1_700_000_000_000 + 1500 * k
                store.commitlog.next_store_timestamp = lambda ts=ts: ts  # type: ignore[method-assign]
                r = store.put(_request(records), wait_flush=False)
                state = sorted(
                    (key, cq.max_offset, cq.max_phys_end, cq.min_offset, [f.wrote_position for f in cq.queue.files])
                    for key, cq in store.queues.items()
                )
                outcomes.append(
                    (
                        r.wrote_offset,
                        r.wrote_bytes,
                        r.queue_offset,
                        r.phys_offsets.tolist(),
                        r.queue_offsets.tolist(),
                        state,
                    )
                )
        finally:
            store.shutdown()
        return outcomes, _files(root), taken[0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(puts)
def test_same_store_bytes_and_results(monkeypatch: pytest.MonkeyPatch, batches: list) -> None:
    ref, ref_files, none = _run(batches, False, monkeypatch)
    new, new_files, taken = _run(batches, True, monkeypatch)
    assert none == 0
    event(f"the table took {min(taken, 3)}{'+' if taken >= 3 else ''} of {len(batches)} puts")
    assert new == ref
    assert new_files.keys() == ref_files.keys()
    for name in ref_files:
        assert new_files[name] == ref_files[name], name


def test_puts_over_known_queues_take_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    batches = [[(t, q, 0, b"x" * 10) for t in range(3) for q in range(2)]] * 12
    ref, ref_files, _ = _run(batches, False, monkeypatch)
    new, new_files, taken = _run(batches, True, monkeypatch)
    assert new == ref and new_files == ref_files
    assert taken >= 8  # all but the first (new queues) and those whose entries roll into a new file


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 4), st.booleans()), min_size=1, max_size=30),
    st.lists(st.tuples(st.integers(0, 50), st.integers(-1, 400), st.integers(0, 1000)), min_size=4, max_size=4),
    st.lists(st.one_of(st.none(), st.binary(max_size=16)), min_size=4, max_size=4),
)
def test_plan_matches_its_reference(records: list, rows: list, packed: list) -> None:
    compiled = compiled_or_skip("_slots", "plan")
    reference = _speedups.reference("_slots", "plan")
    n = len(records)
    tix = np.array([r[0] for r in records], np.int64)
    qid = np.array([r[1] for r in records], np.int64)
    enters = np.array([r[2] for r in records], np.uint8)
    table = np.zeros((4, 8), np.int64)
    for s, (mo, limit, frm) in enumerate(rows):
        table[s, 0], table[s, 3], table[s, 2], table[s, 4] = mo, limit, frm * 20, 4096 if limit >= 0 else 0
    tslots: list[bytes | None] = [None if p is None else p[: len(p) // 4 * 4] for p in packed]
    outs = []
    for fn in (reference, compiled):
        t = table.copy()
        out = [np.full(n, 7, np.int64) for _ in range(3)]
        kind = fn(tslots, tix, qid, enters, t, *out)
        outs.append((kind, t.tolist(), [o.tolist()[: kind[1]] if k == 2 else o.tolist() for k, o in enumerate(out)]))
    assert outs[0] == outs[1]


def test_write_entries_matches_its_reference_and_refuses_bad_rows() -> None:
    compiled = compiled_or_skip("_slots", "write_entries")

    class File:
        def __init__(self) -> None:
            self.mm = bytearray(200)
            self.view = memoryview(self.mm)
            self.wrote_position = 0
            self.size = 200
            self.reserved_position = 200
            self.file_from_offset = 0

    results = []
    for fn in (_speedups.reference("_slots", "write_entries"), compiled):
        slots = QueueSlots(4)
        files = [File(), File()]
        for f in files:
            s = slots.add(None)
            slots.attach(s, f)  # type: ignore[arg-type]
        rows = np.array([0, 1, -1, 0], np.int64)
        qoffs = np.array([0, 0, 0, 1], np.int64)
        args = (
            np.array([100, 200, 300, 400], np.int64),
            np.array([10, 20, 30, 40], np.int64),
            np.arange(4, dtype=np.int64),
        )
        with pytest.raises(ValueError):  # not the queue's next offset: nothing written
            fn(rows, np.array([0, 0, 0, 2], np.int64), *args, slots.table, slots.files)
        assert not any(files[0].mm) and slots.table[0, 0] == 0
        fn(rows, qoffs, *args, slots.table, slots.files)
        results.append(([bytes(f.mm) for f in files], [f.wrote_position for f in files], slots.table[:2, :2].tolist()))
        for s in range(2):
            slots.detach(s)
    assert results[0] == results[1]
    assert results[0][2] == [[2, 440], [1, 220]]
