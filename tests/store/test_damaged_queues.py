"""Issue 10 D12: a consume queue truncated to nothing, a queue folder removed or a queue file of
the wrong size must not hide stored messages or restart the queue at offset 0: recovery checks
every queue against the queue table (config/queueMaxOffsets.json) and the commitlog tail, and
rebuilds the damaged ones from the commitlog, after a clean shutdown as after a crash."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time

import pytest

from shmq.codec import record as fmt
from shmq.store.message_store import MessageStore

from .conftest import put_one, record


def fill(store: MessageStore, plan: list[tuple[str, int, int]]) -> None:
    """Put ``n`` messages to each (topic, queue, n), interleaved one by one in the plan's order."""
    left = {(t, q): n for t, q, n in plan}
    done = dict.fromkeys(left, 0)
    while any(done[k] < left[k] for k in left):
        for k in left:
            if done[k] < left[k]:
                put_one(store, k[0], k[1], record(k[0], b"%s-%d-%d" % (k[0].encode(), k[1], done[k])))
                done[k] += 1


def assert_whole(store: MessageStore, topic: str, qid: int, n: int, first: int = 0) -> None:
    """Queue offsets first..n-1 hold that queue's messages in order, and the next put gets offset n."""
    got: list[tuple[int, bytes]] = []
    offset = first
    while offset < n:
        r = store.get_message(topic, qid, offset, 64)
        assert r.messages, (topic, qid, offset, r.status)
        got += [(m.queue_offset, bytes(m.body)) for m in r.messages]
        offset = r.next_begin_offset
    assert got == [(i, b"%s-%d-%d" % (topic.encode(), qid, i)) for i in range(first, n)]
    assert store.get_max_offset_in_queue(topic, qid) == n
    assert put_one(store, topic, qid, record(topic, b"next")).queue_offset == n


def cq_dir(store_dir: str, topic: str, qid: int | None = None) -> str:
    parts = [store_dir, "consumequeue", topic] + ([str(qid)] if qid is not None else [])
    return os.path.join(*parts)


def cq_files(store_dir: str, topic: str, qid: int) -> list[str]:
    d = cq_dir(store_dir, topic, qid)
    return [os.path.join(d, n) for n in sorted(os.listdir(d))]


@pytest.fixture
def store_dir(tmp_path) -> str:
    return str(tmp_path / "store")


PLAN = [("A", 0, 300), ("A", 1, 40), ("B", 0, 50)]  # A/0: 3 files of 128 entries (SMALL)


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "abort-marker"])
def test_a_consume_queue_truncated_to_nothing_is_rebuilt(store_dir, small_config, caplog, crash):
    """Regression: A/1 (one file) truncated to 0 bytes came back empty, its 40 messages invisible
    and the next put at offset 0, both after a clean shutdown and after a crash."""
    with MessageStore(store_dir, small_config) as s:
        fill(s, PLAN)
    for path in cq_files(store_dir, "A", 1):
        os.truncate(path, 0)
    if crash:  # the marker a killed broker leaves: abnormal recovery
        open(os.path.join(store_dir, "abort"), "w").close()
    with caplog.at_level(logging.ERROR), MessageStore(store_dir, small_config) as s:
        for topic, qid, n in PLAN:
            assert_whole(s, topic, qid, n)
    assert "A/1" in caplog.text and "rebuilding them from the commitlog" in caplog.text


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "abort-marker"])
def test_a_removed_queue_folder_is_rebuilt(store_dir, small_config, caplog, crash):
    """Regression: topic B's folder removed: its messages were gone from the store's topics and
    its next message got offset 0."""
    with MessageStore(store_dir, small_config) as s:
        fill(s, PLAN)
    shutil.rmtree(cq_dir(store_dir, "B"))
    if crash:
        open(os.path.join(store_dir, "abort"), "w").close()
    with caplog.at_level(logging.ERROR), MessageStore(store_dir, small_config) as s:
        assert s.topics() == {"A": [0, 1], "B": [0]}
        for topic, qid, n in PLAN:
            assert_whole(s, topic, qid, n)
    assert "B/0" in caplog.text


def test_a_queue_file_of_the_wrong_size_is_rebuilt(store_dir, small_config, caplog):
    """Regression: a middle file of A/0 cut to 100 bytes made the start fail (mmap of a short
    file); now the queue is rebuilt from the commitlog."""
    with MessageStore(store_dir, small_config) as s:
        fill(s, PLAN)
    files = cq_files(store_dir, "A", 0)
    assert len(files) == 3
    os.truncate(files[1], 100)
    with caplog.at_level(logging.ERROR), MessageStore(store_dir, small_config) as s:
        assert_whole(s, "A", 0, 300)
    assert "consume queue A/0 is damaged" in caplog.text


def test_a_lost_queue_is_found_by_its_gap_when_the_queue_table_is_stale(store_dir, small_config, caplog):
    """With a stale queue table (written while running: lower bounds), a queue truncated to
    nothing is still found when the commitlog tail re-dispatched at start holds its later
    records: they would start past its end (a gap), which before filled offsets 0..49 with blanks."""
    with MessageStore(store_dir, small_config) as s:
        fill(s, [("A", 0, 50)])
        fill(s, [("B", 0, 1)])
        put_one(s, "A", 0, record("A", b"x"))  # A's last record comes after B's
    table = os.path.join(store_dir, "config", "queueMaxOffsets.json")
    with open(table, "w") as f:
        json.dump({"queueMaxOffsets": {"A": {"0": 0}, "B": {"0": 1}}}, f)
    for path in cq_files(store_dir, "A", 0):
        os.truncate(path, 0)
    with caplog.at_level(logging.ERROR), MessageStore(store_dir, small_config) as s:
        assert s.get_max_offset_in_queue("A", 0) == 51
        assert [bytes(m.body) for m in s.get_message("A", 0, 0, 64).messages][:2] == [b"A-0-0", b"A-0-1"]
    assert "A/0" in caplog.text


@pytest.mark.parametrize("kind", ["garbage", "missing"])
def test_a_damaged_or_missing_queue_table_checks_every_queue(store_dir, small_config, caplog, kind):
    """A queue table that cannot be read is logged, and every queue is checked against the whole
    commitlog instead (record headers only), so a truncated queue is still rebuilt; likewise
    once for a store written before the table existed."""
    with MessageStore(store_dir, small_config) as s:
        fill(s, PLAN)
    table = os.path.join(store_dir, "config", "queueMaxOffsets.json")
    os.makedirs(os.path.dirname(table), exist_ok=True)
    for path in (table, table + ".bak"):
        if kind == "garbage":
            with open(path, "w") as f:
                f.write('{"queueMaxOffsets": {"A": {"0": "many"}}}')
        elif os.path.exists(path):
            os.unlink(path)
    for path in cq_files(store_dir, "B", 0):
        os.truncate(path, 0)
    with caplog.at_level(logging.WARNING), MessageStore(store_dir, small_config) as s:
        for topic, qid, n in PLAN:
            assert_whole(s, topic, qid, n)
    if kind == "garbage":
        assert "queue table damaged" in caplog.text and "queueMaxOffsets.json" in caplog.text
    else:
        assert "no queue table" in caplog.text
    assert "B/0" in caplog.text
    with open(table) as f:  # rewritten at start and at shutdown
        assert json.load(f)["queueMaxOffsets"]["B"]["0"] == 51


def test_a_queue_whose_records_were_cleaned_continues_at_its_max_offset(store_dir, small_config, caplog):
    """When the commitlog no longer holds a lost queue's records (cleaned segments), the queue
    continues at the max offset the queue table recorded: new messages never reuse offsets that
    consumers committed past."""
    with MessageStore(store_dir, small_config) as s:
        fill(s, [("Old", 0, 80)])
        for _i in range(200):  # ~3 segments of 64 KiB
            last = put_one(s, "New", 0, record("New", b"y" * 1000)).wrote_offset
    seg = small_config["mappedFileSizeCommitLog"]
    assert last >= 2 * seg
    for name in os.listdir(os.path.join(store_dir, "commitlog")):  # what cleanup does: whole segments
        if int(name) + seg <= last:  # from the front; Old's records are all in the first
            os.unlink(os.path.join(store_dir, "commitlog", name))
    shutil.rmtree(cq_dir(store_dir, "Old"))
    with caplog.at_level(logging.ERROR), MessageStore(store_dir, small_config) as s:
        assert s.get_max_offset_in_queue("Old", 0) == 80
        assert put_one(s, "Old", 0, record("Old", b"after")).queue_offset == 80
        assert [bytes(m.body) for m in s.get_message("Old", 0, 80, 4).messages] == [b"after"]
    assert "continues at 80" in caplog.text


def test_after_a_crash_queues_outside_the_redispatched_tail_are_checked(store_dir, small_config, caplog):
    """Abnormal recovery re-dispatches only the commitlog from the checkpoint on. A queue whose
    records all lie before it (A/0) is found by the queue table; one whose table entry is stale
    (B/0 recorded at 0, as written while running) by the gap its tail records would leave."""
    with MessageStore(store_dir, small_config) as s:
        fill(s, [("A", 0, 100)])  # ~2 segments of 64 KiB with these bodies
        for i in range(150):
            put_one(s, "B", 0, record("B", b"B-0-%d" % i + b"." * 1000))
    table = os.path.join(store_dir, "config", "queueMaxOffsets.json")
    os.makedirs(os.path.dirname(table), exist_ok=True)
    with open(table, "w") as f:  # B/0 as a table written while running might have it
        json.dump({"queueMaxOffsets": {"A": {"0": 100}, "B": {"0": 0}}}, f)
    for path in cq_files(store_dir, "A", 0):
        os.truncate(path, 0)
    for path in cq_files(store_dir, "B", 0):
        os.unlink(path)
    # a crash whose checkpoint is recent: re-dispatch starts at the last segment only
    with open(os.path.join(store_dir, "checkpoint"), "r+b") as f:
        now = int(time.time() * 1000) + 60_000
        f.write(fmt.CHECKPOINT.pack(now, now, now))
    open(os.path.join(store_dir, "abort"), "w").close()
    with caplog.at_level(logging.INFO), MessageStore(store_dir, small_config) as s:
        redispatched = [r.getMessage() for r in caplog.records if r.getMessage().startswith("re-dispatched")]
        assert not redispatched[0].endswith("from commitlog offset 0")  # the tail, then the rebuild
        assert_whole(s, "A", 0, 100)
        got: list[tuple[int, bytes]] = []
        while len(got) < 150:
            r = s.get_message("B", 0, len(got), 64)
            assert r.messages
            got += [(m.queue_offset, bytes(m.body).rstrip(b".")) for m in r.messages]
        assert got == [(i, b"B-0-%d" % i) for i in range(150)] and s.get_max_offset_in_queue("B", 0) == 150
    assert "A/0, B/0" in caplog.text


def test_the_queue_table_names_new_queues_by_the_next_checkpoint(store_dir, small_config):
    """While running, a queue created since the last write is in the table once the thorough
    consume-queue flush (which writes the checkpoint) has run: abnormal recovery re-dispatches
    everything after the checkpoint, so together they cover every queue."""
    table = os.path.join(store_dir, "config", "queueMaxOffsets.json")
    with MessageStore(store_dir, small_config) as s:
        with open(table) as f:
            assert json.load(f) == {"queueMaxOffsets": {}}  # written at start
        fill(s, [("N", 3, 5)])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with open(table) as f:
                if "3" in json.load(f)["queueMaxOffsets"].get("N", {}):  # a lower bound of its max offset
                    break
            time.sleep(0.02)
        else:
            raise AssertionError("the queue table never named queue N/3")
