"""Crash tests: a child process appends with SYNC_FLUSH and acks each record; we SIGKILL it,
damage the store in the ways a crash (or a bad disk) can, reopen it here and check that every
acknowledged record is present and byte-identical, nothing partial is visible, and appending
continues. The child and the checker are in tools/chaos/crash_child.py (shared with tools/chaos/store_crash.py).

Set SHMQ_CRASH_SEED to replay a run's random choices (kill timing is still the scheduler's).
"""

from __future__ import annotations

import os
import random
import shutil

import pytest

from shmq.codec import record as fmt
from tools.chaos.crash_child import CONFIG, CrashHarness, raw_scan, segment_path, seq_of

SEG = CONFIG["mappedFileSizeCommitLog"]
KILL_ROUNDS = 22


@pytest.fixture
def harness(tmp_path):
    seed = int(os.environ.get("SHMQ_CRASH_SEED", random.randrange(1 << 30)))
    print(f"SHMQ_CRASH_SEED={seed}")
    return CrashHarness(str(tmp_path / "store"), str(tmp_path), seed)


def warm_up(h: CrashHarness, rounds: int = 2) -> None:
    """A few kill rounds so the store has several segments, queues and index files."""
    for _ in range(rounds):
        h.reopen_and_verify(h.run_child(run_ms=h.rng.uniform(150, 300)))


def kill(h: CrashHarness, lo: float = 100, hi: float = 300):
    """A kill round that acked at least one record (retried until one does)."""
    for _ in range(5):
        info = h.run_child(run_ms=h.rng.uniform(lo, hi))
        if info.acks:
            return info
        h.reopen_and_verify(info)
    pytest.fail("the child acknowledged nothing in 5 rounds")


# --------------------------------------------------------------------------- SIGKILL rounds


def test_sigkill_rounds(harness):
    """>= 20 rounds of: run 50-400 ms (every ~5th killed right after spawn, maybe mid-recovery),
    SIGKILL, abnormal recovery, verify everything, append, shut down, continue on the same store."""
    h = harness
    for _ in range(KILL_ROUNDS):
        h.kill_round()
    st = h.stats
    assert st.rounds == KILL_ROUNDS
    assert st.acked_checked > 1000, st
    print(
        f"rounds={st.rounds} acked_checked={st.acked_checked} unacked_recovered={st.recovered_unacked} "
        f"records={st.records_in_store} max_recovery_ms={st.max_recovery_ms:.0f}"
    )


def test_sigkill_rounds_async_flush(harness, monkeypatch):
    """The same rounds with ASYNC_FLUSH: the child's single-queue batches take the fused compiled
    put (SYNC_FLUSH puts never do), and a SIGKILL keeps the page cache, so every record
    acknowledged before the kill must still be there, byte for byte."""
    monkeypatch.setenv("SHMQ_CHAOS_FLUSH", "ASYNC_FLUSH")
    h = harness
    for _ in range(KILL_ROUNDS // 2):
        h.kill_round()
    assert h.stats.acked_checked > 500, h.stats


# --------------------------------------------------------------------------- garbage tail


def _write(path: str, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def _nothing_after(store_dir: str, path: str, offset: int) -> None:
    """Zeros from commitlog ``offset`` to the end of its segment ``path``, and no later segment:
    what follows damage written there is then a torn tail, nothing valid."""
    if offset % SEG:
        _write(path, offset % SEG, bytes(SEG - offset % SEG))
    d = os.path.join(store_dir, "commitlog")
    for name in os.listdir(d):
        first = fmt.parse_offset_file_name(name)
        if first is not None and first >= offset:
            os.unlink(os.path.join(d, name))


def _cut_at_most(limit: int):
    def check(store):
        assert store.commitlog.max_offset <= limit, (store.commitlog.max_offset, limit)

    return check


@pytest.mark.parametrize("variant", ["tail", "partial", "forged"])
def test_garbage_tail(harness, variant):
    """Random bytes over the last segment's tail past the last acked record ('tail': from a point
    after it to the segment end; 'partial': a short run right at its end, over the unacked
    region; 'forged': a record-shaped header with the right magic, size and offset but a bad
    CRC), with nothing valid after them (zeros to the segment's end, no later segment: a torn
    tail; garbage with whole records after it is damage in the middle of the log, which
    recovery skips: test_damaged_log, test_store_damage). Recovery cuts there, keeps every
    acked record, and appending works."""
    h = harness
    warm_up(h)
    for _ in range(3):
        info = kill(h)
        end = h.known_end(info)
        path = segment_path(h.store_dir, end)
        seg_end = end - end % SEG + SEG
        if not os.path.exists(path) or seg_end - end < 512:
            h.reopen_and_verify(info)
            continue
        rng = h.rng
        if variant == "tail":
            start = end + rng.randrange(0, min(4096, seg_end - end - 8))
            with open(path, "rb") as f:
                f.seek(end % SEG)
                if fmt.BLANK.unpack(f.read(fmt.BLANK.size))[1] == fmt.BLANK_MAGIC:
                    # the next record did not fit: a blank ends this segment at ``end`` and the
                    # records after it (unacknowledged, but whole) are in the next segment, which
                    # recovery rightly keeps; garbage must cover the blank to be a tail at all
                    start = end
            data = os.urandom(seg_end - start)
        elif variant == "partial":
            start = end
            data = os.urandom(rng.randint(1, min(2000, seg_end - end)))
        else:
            start = end
            last = max(h.model.values(), key=lambda w: w[3])[3] if h.model else info.acks[0].phys[0]
            for a in info.acks:
                last = max(last, a.phys[-1])
            with open(segment_path(h.store_dir, last), "rb") as f:
                f.seek(last % SEG)
                size = int.from_bytes(f.read(4), "big")
                f.seek(last % SEG)
                rec = bytearray(f.read(size))
            if end + size + 8 > seg_end:
                h.reopen_and_verify(info)
                continue
            fmt._I64.pack_into(rec, fmt.OFF_PHYSICALOFFSET, end)
            (body_len,) = fmt._I32.unpack_from(rec, fmt.OFF_BODYLEN)
            if body_len:
                rec[fmt.OFF_BODY + body_len // 2] ^= 0x5A
            else:
                fmt._I32.pack_into(rec, fmt.OFF_BODYCRC, fmt._I32.unpack_from(rec, fmt.OFF_BODYCRC)[0] ^ 1)
            data = bytes(rec)
        _write(path, start % SEG, data)
        _nothing_after(h.store_dir, path, start + len(data))
        h.reopen_and_verify(info, on_open=_cut_at_most(start))
        return
    pytest.fail("no round left room in the last segment")


# --------------------------------------------------------------------------- lost folders


@pytest.mark.parametrize("folder", ["consumequeue", "index", "both"])
def test_rebuild_lost_folder(harness, folder):
    """After a kill the consumequeue/ (or index/, or both) folder is gone: reopening rebuilds it
    completely from the commitlog; every record is readable by queue and by key."""
    h = harness
    warm_up(h, 3)
    info = kill(h)
    for name in ["consumequeue", "index"] if folder == "both" else [folder]:
        shutil.rmtree(os.path.join(h.store_dir, name))
    h.reopen_and_verify(info, query_all=True)
    h.kill_round()  # and the rebuilt store survives the next crash too


# --------------------------------------------------------------------------- killed between a record's keys


@pytest.mark.parametrize("point", ["index-key", "index-roll"])
def test_kill_between_a_records_index_keys(harness, point):
    """The child kills itself when the index holds some of a record's keys but not all: a
    one-record put after its UNIQ_KEY entry, before its KEYS entry ('index-key'); a batch after
    the index file it filled in the middle of a record, before the next file ('index-roll').
    Recovery completes that record's keys: the next start finds it by every key."""
    h = harness
    info = h.run_child(kill_at=point, timeout=60)
    assert info.started and not info.clean
    h.reopen_and_verify(info, query_all=True)
    in_flight = [
        seq for seq in h.model if seq >= info.start_seq and not any(a.seq <= seq < a.seq + a.n for a in info.acks)
    ]
    assert in_flight, "the put that was killed is in the store (its records come after every acked one)"
    # the records of the killed put joined the model: this round looks each of them up by key
    h.reopen_and_verify(h.run_child(max_puts=1), query_all=True)


# --------------------------------------------------------------------------- clean shutdown


def test_clean_shutdown_rebuilds_nothing(harness):
    """A child that shuts down cleanly: the reopen is a normal recovery that keeps everything
    and changes no commitlog, consume-queue or index byte; same after our own clean shutdown."""
    h = harness
    warm_up(h)
    info = h.run_child(max_puts=60)
    assert info.clean and len(info.acks) >= 60  # a multi-queue put acks each record on its own line
    h.reopen_and_verify(info, expect_unchanged=True, append=False)
    h.reopen_and_verify(info, expect_unchanged=True, expect_abnormal=False, query_all=True)


# --------------------------------------------------------------------------- torn record


@pytest.mark.parametrize("where", ["body", "tail_bytes", "half"])
def test_torn_last_record(harness, where):
    """The last record's bytes are zeroed in place from some point to its end ('body': from the
    middle of its body; 'tail_bytes': only its last 3 bytes, inside the properties; 'half': its
    second half). It must not be visible after recovery; every earlier record stays."""
    h = harness
    warm_up(h)
    info = kill(h)
    recs = raw_scan(h.store_dir)
    phys, size = recs[-1]
    path = segment_path(h.store_dir, phys)
    with open(path, "rb") as f:
        f.seek(phys % SEG)
        raw = f.read(size)
    rec = fmt.decode_record(raw)
    seq = seq_of(rec)
    body_len = len(rec.body)
    if where == "body" and body_len:
        cut = fmt.OFF_BODY + body_len // 2
    elif where == "tail_bytes":
        cut = size - 3
    else:
        cut = size // 2
    _write(path, phys % SEG + cut, bytes(size - cut))

    def gone(store):
        assert store.commitlog.max_offset == phys, (store.commitlog.max_offset, phys)
        assert store.look_message_by_offset(phys) is None
        assert store.query_message(rec.topic, str(seq)) == []

    h.reopen_and_verify(info, lost={seq}, on_open=gone)
    h.kill_round()
