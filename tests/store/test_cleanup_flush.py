import os
import time

from shmq.codec import record as fmt
from shmq.store.checkpoint import StoreCheckpoint
from shmq.store.cleanup import decide
from shmq.store.message_store import MessageStore

from .conftest import put_one, record


def test_decide():
    d = decide(0.5, 4, "04", 75, 0.85, 0.90)
    assert (d.disk_full, d.delete_expired, d.delete_forcibly) == (False, True, False)
    d = decide(0.5, 5, "04;23", 75, 0.85, 0.90)
    assert not d.delete_expired and decide(0.5, 23, "04;23", 75, 0.85, 0.90).delete_expired
    assert decide(0.8, 5, "04", 75, 0.85, 0.90).delete_expired  # over diskMaxUsedSpaceRatio
    d = decide(0.88, 5, "04", 75, 0.85, 0.90)
    assert d.delete_forcibly and not d.disk_full
    assert decide(0.95, 5, "04", 75, 0.85, 0.90).disk_full
    assert decide(0.1, 5, "04", 75, 0.85, 0.90, manual=True).delete_expired


def test_async_flush_reaches_disk_and_checkpoint(tmp_path, small_config):
    d = str(tmp_path / "s")
    with MessageStore(d, small_config) as s:
        r = put_one(s, "T", 0, record("T", b"x" * 5000))
        for _ in range(20):
            put_one(s, "T", 0, record("T", b"y" * 1000))
        deadline = time.time() + 5
        while s.commitlog.queue.flushed_offset < s.commitlog.max_offset and time.time() < deadline:
            time.sleep(0.02)
        assert s.commitlog.queue.flushed_offset == s.commitlog.max_offset  # flushed without being asked
        while s.checkpoint.logics_msg_timestamp < r.store_timestamp and time.time() < deadline:
            time.sleep(0.02)
        assert s.checkpoint.physic_msg_timestamp >= r.store_timestamp
        assert s.checkpoint.logics_msg_timestamp >= r.store_timestamp
    cp = StoreCheckpoint(os.path.join(d, "checkpoint"))
    try:
        assert cp.physic_msg_timestamp >= r.store_timestamp and cp.index_msg_timestamp >= r.store_timestamp
    finally:
        cp.close()


def test_clean_shutdown_leaves_no_abort_and_crash_leaves_it(tmp_path, small_config):
    d = str(tmp_path / "s")
    s = MessageStore(d, small_config).start()
    assert os.path.exists(os.path.join(d, "abort"))
    put_one(s, "T", 0, record("T", b"x"))
    s.shutdown()
    assert not os.path.exists(os.path.join(d, "abort"))
    assert sorted(os.listdir(d)) == ["checkpoint", "commitlog", "config", "consumequeue", "index", "lock"]
    assert os.listdir(os.path.join(d, "consumequeue", "T")) == ["0"]
    assert len(fmt.offset_file_name(0)) == 20
