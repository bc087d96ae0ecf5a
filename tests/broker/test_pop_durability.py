"""The pop state survives the broker's death: after a crash (files as written, nothing closed in
order) acked messages never come back, unacked ones come back after their deadline, tokens are
not reused; a torn or damaged pop log is cut at its first bad record with a log line."""

from __future__ import annotations

import logging
import os
import stat
import time

import pytest

from shmq.broker.answers import Peer
from shmq.codec import frames as P
from shmq.codec import pop_frames as F
from shmq.codec import pop_log as L
from shmq.errors import MetadataError

from .pop_helpers import ack, bodies, crash, join, open_core, pop, put, run, tick


def _first_life(store_dir: str) -> tuple[set[bytes], set[bytes], int]:
    """Pop 20 messages, ack 12, crash; returns (acked, unacked, the highest token handed out)."""
    with open_core(store_dir) as core:
        core.update_topic("Jobs", 4, 4)
        w = Peer(1)
        join(core, w)
        put(core, "Jobs", [b"%d" % i for i in range(20)])
        r = pop(core, w, 20, invisible_ms=2000)
        got = bodies(core, r)
        assert ack(core, w, r, list(range(12))).statuses.tolist() == [F.RECEIPT_OK] * 12
        top = int(r.tokens.max())
        crash(core)
    return set(got[:12]), set(got[12:]), top


def test_after_a_crash_acked_stay_acked_and_unacked_come_back(tmp_path):
    store_dir = str(tmp_path / "store")
    acked, unacked, top = _first_life(store_dir)
    pop_dir = os.path.join(store_dir, "pop")
    assert stat.S_IMODE(os.stat(pop_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(pop_dir, "pop.log")).st_mode) == 0o600
    with open_core(store_dir) as core:
        w = Peer(2)
        join(core, w)
        assert len(pop(core, w, 32).tokens) == 0, "nothing comes back before its deadline"
        deadline = time.monotonic() + 30
        back: list[bytes] = []
        while len(back) < len(unacked) and time.monotonic() < deadline:
            time.sleep(0.05)
            tick(core)
            r = pop(core, w, 32)
            assert (r.tokens > top).all(), "tokens are never reused after a restart"
            assert set(r.topics) <= {"%RETRY%wg"} and (r.attempts == 2).all()
            back += bodies(core, r)
            if len(r.tokens):
                ack(core, w, r)
        assert sorted(back) == sorted(unacked), "the unacked ones, once each, and none of the acked"
        assert not acked & set(back)


def test_a_torn_tail_is_cut_with_a_log_line_and_the_rest_kept(tmp_path, caplog):
    store_dir = str(tmp_path / "store")
    _, unacked, _ = _first_life(store_dir)
    path = os.path.join(store_dir, "pop", "pop.log")
    with open(path, "ab") as f:  # half a record: what a death in the middle of a write leaves
        f.write(L.encode(L.SETTLE, "wg", "Jobs", 0, 0, L.settle_rows([1, 2, 3]))[:30])
    with caplog.at_level(logging.WARNING, "shmq.broker"), open_core(store_dir) as core:
        assert any("dropped the last 30 bytes" in r.getMessage() for r in caplog.records)
        assert core.pop_store.state.rows == len(unacked), "every record before the tear kept"
        assert os.path.getsize(path) < os.path.getsize(path + ".damaged")


def test_a_damaged_record_keeps_what_was_acked_before_it(tmp_path, caplog):
    store_dir = str(tmp_path / "store")
    with open_core(store_dir) as core:
        core.update_topic("Jobs", 1, 1)
        w = Peer(1)
        join(core, w, subs={"Jobs": "*"})
        put(core, "Jobs", [b"a", b"b", b"c"], qid=0)
        r = pop(core, w, 3, invisible_ms=200)
        ack(core, w, r, [0])
        size_after_first_ack = core.pop_store.size
        ack(core, w, r, [1])
        crash(core)
    path = os.path.join(store_dir, "pop", "pop.log")
    with open(path, "r+b") as f:  # the second ack's record damaged
        f.seek(size_after_first_ack + 12)
        f.write(b"\xff")
    with caplog.at_level(logging.WARNING, "shmq.broker"), open_core(store_dir) as core:
        assert any("CRC" in r.getMessage() for r in caplog.records)
        w = Peer(2)
        join(core, w)
        back: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(back) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            tick(core)
            back += bodies(core, pop(core, w, 8))
        # a (acked before the damage) never comes back; b (its ack was in the damaged record) and c do
        assert sorted(back) == [b"b", b"c"]


def test_compaction_keeps_the_live_state_and_the_token_counter(tmp_path):
    store_dir = str(tmp_path / "store")
    with open_core(store_dir, popLogCompactBytes=4096) as core:
        core.update_topic("Jobs", 1, 1)
        w = Peer(1)
        join(core, w)
        put(core, "Jobs", [b"%d" % i for i in range(300)], qid=0)
        for _ in range(9):  # 270 popped and acked: far more log than 4 KiB
            ack(core, w, pop(core, w, 30))
        held = pop(core, w, 5)
        top = int(held.tokens.max())
        tick(core)  # the log grew past popLogCompactBytes: rewritten with what is live
        assert core.pop_store.size < 4096
        crash(core)
    with open_core(store_dir) as core:
        state = core.pop_store.state
        assert state.rows == 5 and state.next_token > top
        assert state.queues[("wg", "Jobs", 0)].cursor == 275
        assert core.offsets.query("wg", "Jobs", 0) == 270


def test_sync_flush_fsyncs_the_pop_log_before_the_answers_go_out(tmp_path):
    with open_core(str(tmp_path / "store"), flushDiskType="SYNC_FLUSH") as core:
        core.update_topic("Jobs", 1, 1)
        w = Peer(1)
        join(core, w)
        put(core, "Jobs", [b"a"], qid=0)
        r = pop(core, w, 1)  # served and its pass ended
        assert len(r.tokens) == 1 and not core.pop_store.dirty


def test_sync_flush_revives_stay_whole(tmp_path):
    with open_core(str(tmp_path / "store"), flushDiskType="SYNC_FLUSH") as core:
        core.update_topic("Jobs", 1, 1)
        w = Peer(1)
        join(core, w)
        put(core, "Jobs", [b"a"], qid=0)
        pop(core, w, 1, invisible_ms=10)
        time.sleep(0.03)
        tick(core)
        assert core.store.group_commit.flushed_offset >= core.store.commitlog.max_offset
        r = pop(core, w, 1)
        assert bodies(core, r) == [b"a"] and r.topics == ["%RETRY%wg"] and not core.pop_store.dirty


def test_an_offset_reset_survives_a_crash(tmp_path):
    store_dir = str(tmp_path / "store")
    with open_core(store_dir) as core:
        core.update_topic("Jobs", 1, 1)
        w = Peer(1)
        join(core, w)
        put(core, "Jobs", [b"a", b"b", b"c"], qid=0)
        pop(core, w, 3)
        core.resets.reset("wg", "Jobs", to="first")
        crash(core)
    with open_core(store_dir) as core:
        qs = core.pop_store.state.queues[("wg", "Jobs", 0)]
        assert qs.cursor == 0 and not qs.rows


def test_a_pop_log_that_cannot_be_written_refuses_with_one_line_and_logs_once(tmp_path, caplog):
    with open_core(str(tmp_path / "store")) as core:
        core.update_topic("Jobs", 1, 1)
        w = Peer(1)
        join(core, w)
        put(core, "Jobs", [b"a", b"b", b"c"], qid=0)
        ps = core.pop_store
        writable = ps.fd
        ps.fd = os.open(ps.path, os.O_RDONLY)  # every write fails (as on a full disk)
        try:
            with caplog.at_level(logging.ERROR, "shmq.broker"):
                for req in (1, 2):
                    got = run(core, w, F.POP, F.encode_pop(req, 0, "wg", 60_000, 0, 1))
                    assert got[0][0] == P.ERROR and got[0][1].code == P.SYSTEM_ERROR
                    assert got[0][1].message.startswith("the broker cannot write its pop state: ")
            assert sum("writing the pop log failed" in r.getMessage() for r in caplog.records) == 1
        finally:
            os.close(ps.fd)
            ps.fd = writable
        assert ps.compact_after_failure, "the failed write could not be cut back: the file is rewritten"
        tick(core)
        assert bodies(core, pop(core, w, 8)) == [b"c"], "a and b wait for their invisible time"


def test_a_pop_log_that_cannot_be_opened_stops_the_start_with_one_line(tmp_path):
    store_dir = str(tmp_path / "store")
    with open_core(store_dir):
        pass
    path = os.path.join(store_dir, "pop", "pop.log")
    os.remove(path)
    os.mkdir(path)  # not a file the broker can read (tests run as root: permissions would not stop it)
    with pytest.raises(MetadataError) as e, open_core(store_dir):
        pass
    assert "\n" not in str(e.value) and "the pop log" in str(e.value) and "writable" in str(e.value)
