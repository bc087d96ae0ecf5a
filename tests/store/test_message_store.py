import logging
import os
import time

import numpy as np
import pytest

from shmq.broker.groups import ConsumerOffsetManager
from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.errors import DiskFullError, StoreLockedError
from shmq.store.message_store import MessageStore
from shmq.store.read.lookup import GetStatus
from shmq.store.write.hooks import MESSAGE_ILLEGAL, PutRequest
from shmq.store.write.result import PutMessageResult, PutStatus

from .conftest import put_batch, put_multi, put_one, record


def test_put_get_statuses_and_tag_filter(store):
    for i in range(10):
        r = put_one(store, "Orders", 1, record("Orders", b"m%d" % i, tags="A" if i % 2 else "B"))
        assert r.status is PutStatus.PUT_OK and r.queue_offset == i
    assert store.get_message("Nope", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    res = store.get_message("Orders", 1, 0, 32, tags={"A"})
    assert res.status is GetStatus.FOUND and res.next_begin_offset == 10
    assert [bytes(m.body) for m in res.messages] == [b"m1", b"m3", b"m5", b"m7", b"m9"]
    assert store.get_message("Orders", 1, 0, 4, tags={"C"}).status is GetStatus.NO_MATCHED_MESSAGE
    assert store.get_message("Orders", 1, 10).status is GetStatus.OFFSET_OVERFLOW_ONE
    assert store.get_message("Orders", 1, 11).status is GetStatus.OFFSET_OVERFLOW_BADLY
    all_ = store.get_message("Orders", 1, 3, 4)
    assert [m.queue_offset for m in all_.messages] == [3, 4, 5, 6] and all_.next_begin_offset == 7


def test_batch_put_and_queries(store):
    gen = ids.UniqKeyGenerator()
    uniq = [gen.next() for _ in range(100)]
    props = [fmt.message_properties(tags=f"T{i % 3}", keys=f"order-{i} shared", uniq_key=uniq[i]) for i in range(100)]
    r = put_batch(store, "Pay", 2, fmt.encode_batch("Pay", [b"p%d" % i for i in range(100)], props))
    assert r.status is PutStatus.PUT_OK and r.msg_num == 100 and r.queue_offset == 0
    assert store.get_max_offset_in_queue("Pay", 2) == 100
    found = store.query_message("Pay", "order-42")
    assert [bytes(m.body) for m in found] == [b"p42"]
    assert len(store.query_message("Pay", "shared", max_num=30)) == 30
    assert bytes(store.query_by_uniq_key("Pay", uniq[7]).body) == b"p7"
    assert store.query_message("Other", "order-42") == []
    m = store.get_message("Pay", 2, 5, 1).messages[0]
    assert bytes(store.view_message_by_id(m.offset_msg_id).body) == b"p5"


def test_offset_by_time(store):
    before = int(time.time() * 1000)
    for _i in range(5):
        put_one(store, "T", 0, record("T", b"a"))
    time.sleep(0.02)
    mid = int(time.time() * 1000)
    for _i in range(5):
        put_one(store, "T", 0, record("T", b"b"))
    assert store.get_offset_in_queue_by_time("T", 0, before - 10_000) == 0
    assert store.get_offset_in_queue_by_time("T", 0, mid) == 5
    assert store.get_offset_in_queue_by_time("T", 0, mid + 60_000) == 10


def test_reopen_keeps_everything(tmp_path, small_config):
    d = str(tmp_path / "s")
    with MessageStore(d, small_config) as s:
        offs = [put_one(s, "T", i % 4, record("T", os.urandom(700), keys=f"k{i}")).wrote_offset for i in range(300)]
        bodies = [bytes(s.look_message_by_offset(o).body) for o in offs]
        assert len(s.commitlog.queue.files) > 3
    assert not os.path.exists(os.path.join(d, "abort"))
    with MessageStore(d, small_config) as s:
        assert [bytes(s.look_message_by_offset(o).body) for o in offs] == bodies
        assert sum(s.get_max_offset_in_queue("T", q) for q in range(4)) == 300
        assert [bytes(m.body) for m in s.query_message("T", "k123")] == [bodies[123]]
        r = put_one(s, "T", 0, record("T", b"after"))
        assert r.queue_offset == 75 and r.wrote_offset >= offs[-1]


def test_a_put_larger_than_a_segment_survives_a_clean_shutdown(tmp_path):
    """Regression (found by the Spark reader's tests): a put that rolled through two segments
    made ahead for it ended with the second one also queued for warm-ahead preparation, and
    shutdown deleted it as an unused prepared file, records and all."""
    d = str(tmp_path / "s")
    config = {"mappedFileSizeCommitLog": 65536, "flushDiskType": "ASYNC_FLUSH"}
    with MessageStore(d, config) as s:
        put_multi(s, ["T"] * 100, [0] * 100, fmt.encode_batch("T", [b"a" * 500] * 100))
        big = put_multi(s, ["T"] * 160, [0] * 160, fmt.encode_batch("T", [b"b" * 500] * 160))
        assert big.status is PutStatus.PUT_OK
        assert len(s.commitlog.queue.files) == 3
    with MessageStore(d, config) as s:
        assert s.get_max_offset_in_queue("T", 0) == 260
        got = s.get_message("T", 0, 0, 300)
        assert [bytes(m.body)[:1] for m in got.messages] == [b"a"] * 100 + [b"b"] * 160


def test_second_store_on_same_dir_fails(store):
    with pytest.raises(StoreLockedError, match="already open"):
        MessageStore(store.store_dir, store.config).start()


def _refused(r: PutMessageResult, match: str) -> None:
    """Every record of the put was refused, for a reason matching ``match``."""
    assert r.msg_num == 0 and r.refused is not None and r.refused.all()
    code, reason = r.reason(0)
    assert code == MESSAGE_ILLEGAL and match in reason, reason


def test_bad_input_refused_store_unharmed(store):
    put_one(store, "T", 0, record("T", b"ok"))
    _refused(put_one(store, "Other", 0, record("T", b"x")), "topic")
    _refused(put_one(store, "T", 0, record("T", b"x")[:-3]), "")
    _refused(put_one(store, "T", 0, os.urandom(200)), "")
    big = bytearray(record("T", b"x"))
    big[fmt.OFF_BODYLEN : fmt.OFF_BODYLEN + 4] = (5 * 2**20).to_bytes(4, "big")
    _refused(put_one(store, "T", 0, bytes(big)), "")
    batch = fmt.encode_batch("T", [b"a", b"b", b"c"])
    garbled = bytearray(batch.buf)
    garbled[batch.starts[1] + fmt.OFF_MAGIC] ^= 0xFF
    garbled_batch = fmt.EncodedBatch(
        bytes(garbled), batch.starts, batch.tags_codes, batch.key_hashes, batch.key_records
    )
    _refused(put_batch(store, "T", 0, garbled_batch), "magic")  # a user's batch: all or nothing
    _refused(put_batch(store, "U", 0, batch), "topic")
    short = fmt.EncodedBatch(batch.buf[:-1], batch.starts, batch.tags_codes, batch.key_hashes, batch.key_records)
    _refused(put_batch(store, "T", 0, short), "")
    with pytest.raises(fmt.CorruptRecordError):  # record starts that do not fit: the whole put
        store.put(
            PutRequest(
                fmt.EncodedBatch(batch.buf[:40], batch.starts, batch.tags_codes, batch.key_hashes, batch.key_records),
                ["T"],
                None,
                0,
            )
        )
    assert store.get_max_offset_in_queue("T", 0) == 1
    assert put_one(store, "T", 0, record("T", b"still fine")).queue_offset == 1
    assert [bytes(m.body) for m in store.get_message("T", 0, 0).messages] == [b"ok", b"still fine"]


def test_separate_sends_fail_alone(store):
    """One policy for every put: a bad record or a refused queue fails only its own records."""
    batch = fmt.encode_batch("T", [b"a", b"b", b"c", b"d"])
    garbled = bytearray(batch.buf)
    garbled[batch.starts[1] + fmt.OFF_MAGIC] ^= 0xFF
    sends = fmt.EncodedBatch(bytes(garbled), batch.starts, batch.tags_codes, batch.key_hashes, batch.key_records)
    r = store.put(PutRequest(sends, ["T"], None, np.array([0, 0, 70000, 1], np.int64)))
    assert r.msg_num == 2 and r.refused.tolist()[0] == 0 and r.refused.tolist()[3] == 0
    assert "magic" in r.reason(1)[1] and "queue id" in r.reason(2)[1]
    assert r.queue_offsets.tolist() == [0, -1, -1, 0] and (r.phys_offsets[[1, 2]] == -1).all()
    assert [bytes(m.body) for m in store.get_message("T", 0, 0).messages] == [b"a"]
    assert [bytes(m.body) for m in store.get_message("T", 1, 0).messages] == [b"d"]
    bad_topic = store.put(PutRequest(batch, ["T", "../x"], np.array([0, 1, 0, 1], np.int64), 0))
    assert bad_topic.msg_num == 2 and bad_topic.refused.astype(bool).tolist() == [False, True, False, True]


class _RouteByTag:
    """A put hook that rewrites where records go and refuses some: records tagged "no" are
    refused, the rest go to queue 3 of topic "Moved" (what delay and retry hooks will do)."""

    def plain_lane(self, req: PutRequest) -> bool:
        return False  # it may act on any put

    def before_put(self, req: PutRequest) -> None:
        no = req.batch.tags_codes == fmt.tags_code("no")
        req.refuse(no, 16, "tag no is refused")
        req.queue_ids = 3


def test_put_hook_can_refuse_and_reroute(store):
    store.put_hooks.append(_RouteByTag())
    bodies = [b"a", b"b", b"c"]
    props = [fmt.message_properties(tags=t) for t in ("yes", "no", "yes")]
    r = put_batch(store, "T", 0, fmt.encode_batch("T", bodies, props))
    assert r.msg_num == 0 and r.reason(0) == (16, "tag no is refused")  # a user's batch fails whole
    r = store.put(PutRequest(fmt.encode_batch("T", bodies, props), ["T"], None, 0))
    assert r.msg_num == 2 and r.reason(1) == (16, "tag no is refused")
    assert [bytes(m.body) for m in store.get_message("T", 3, 0).messages] == [b"a", b"c"]
    assert store.find_consume_queue("T", 0) is None


def test_transaction_half_and_rollback_not_in_queue(store):
    put_one(store, "Tx", 0, record("Tx", b"prepared", sysflag=fmt.TRANSACTION_PREPARED))
    put_one(store, "Tx", 0, record("Tx", b"rolled back", sysflag=fmt.TRANSACTION_ROLLBACK))
    put_one(store, "Tx", 0, record("Tx", b"committed", sysflag=fmt.TRANSACTION_COMMIT))
    put_one(store, "Tx", 0, record("Tx", b"plain"))
    assert [bytes(m.body) for m in store.get_message("Tx", 0, 0).messages] == [b"committed", b"plain"]


def test_sync_flush_acks_after_flush(tmp_path, small_config):
    small_config["flushDiskType"] = "SYNC_FLUSH"
    with MessageStore(str(tmp_path / "s"), small_config) as s:
        r = put_one(s, "T", 0, record("T", b"durable"))
        assert r.status is PutStatus.PUT_OK
        assert s.commitlog.queue.flushed_offset >= r.end_offset
        b = put_batch(s, "T", 0, fmt.encode_batch("T", [b"x"] * 50))
        assert s.commitlog.queue.flushed_offset >= b.end_offset


def test_disk_full_refuses_writes(tmp_path, small_config):
    small_config["diskSpaceWarningLevelRatio"] = 0.0001
    with MessageStore(str(tmp_path / "s"), small_config) as s:
        with pytest.raises(DiskFullError, match="refused"):
            put_one(s, "T", 0, record("T", b"x"))
        assert s.commitlog.max_offset == 0


def test_cleanup_deletes_expired_segments_and_queues(tmp_path, small_config):
    small_config.update(fileReservedTime=1, deleteCommitLogFilesInterval=0)
    with MessageStore(str(tmp_path / "s"), small_config) as s:
        for i in range(600):
            put_one(s, "T", 0, record("T", b"z" * 600, keys=f"k{i}"))
        files = list(s.commitlog.queue.files)
        assert len(files) > 5
        old = time.time() - 2 * 3600
        for mf in files[:3]:
            os.utime(mf.path, (old, old))
        s.clean_service.execute_delete_files_manually()
        deadline = time.time() + 5
        while s.commitlog.min_offset < files[3].file_from_offset and time.time() < deadline:
            time.sleep(0.02)
        assert s.commitlog.min_offset == files[3].file_from_offset
        assert not any(os.path.exists(mf.path) for mf in files[:3])
        cq = s.find_consume_queue("T", 0)
        first = cq.get_range(cq.min_offset, 1)[0]
        assert int(first["offset"]) >= s.commitlog.min_offset
        assert s.get_message("T", 0, 0).status is GetStatus.OFFSET_TOO_SMALL
        assert s.clean_service.take_moved() == [("T", 0)] and s.clean_service.take_moved() == []
        assert s.get_message("T", 0, cq.min_offset).status is GetStatus.FOUND
        assert s.query_message("T", "k0") == [] and s.query_message("T", "k599")


def test_forcible_cleanup_over_ratio_with_the_rocketmq_key_logs_what_it_deletes(tmp_path, small_config, caplog):
    small_config.update(
        diskSpaceCleanForciblyRatio=0.0001,
        diskMaxUsedSpaceRatio=1,
        deleteCommitLogFilesInterval=0,
        deleteFileBatchMax=3,
        cleanFileForciblyEnable=True,
    )
    with MessageStore(str(tmp_path / "s"), small_config) as s:
        for _i in range(300):
            put_one(s, "T", 0, record("T", b"z" * 600))
        n = len(s.commitlog.queue.files)
        with caplog.at_level(logging.ERROR, "shmq.store.cleanup"):
            assert s.clean_service.delete_commitlog_segments(forcibly=True) == 3
        assert len(s.commitlog.queue.files) == n - 3
        lost = [r.getMessage() for r in caplog.records if "unconsumed" in r.getMessage()]
        assert len(lost) == 3 and "T/0 offsets 0-" in lost[0]
        put_one(s, "T", 0, record("T", b"still writable"))


def test_forcible_cleanup_keeps_what_a_group_has_not_consumed_by_default(tmp_path, small_config):
    """Regression (issue 10 C10): forced cleanup deleted acknowledged, unconsumed messages."""
    small_config.update(
        diskSpaceCleanForciblyRatio=0.0001,
        diskMaxUsedSpaceRatio=1,
        deleteCommitLogFilesInterval=0,
        deleteFileBatchMax=10,
    )
    d = str(tmp_path / "s")
    with MessageStore(d, small_config) as s:
        for _i in range(300):
            put_one(s, "T", 0, record("T", b"z" * 600))
        put_one(s, "Unread", 0, record("Unread", b"nobody reads me"))
        n = len(s.commitlog.queue.files)
        assert s.clean_service.delete_commitlog_segments(forcibly=True) == 0  # no group committed anything
        offsets = ConsumerOffsetManager(d)
        offsets.commit("g1", "T", 0, 300)
        offsets.commit("g2", "T", 0, 100)  # the slower group holds segments back
        offsets.persist()
        first_kept = s.get_message("T", 0, 100, 1).messages[0].physical_offset
        deleted = s.clean_service.delete_commitlog_segments(forcibly=True)
        assert deleted > 0 and s.commitlog.min_offset <= first_kept
        assert len(s.commitlog.queue.files) == n - deleted
        offsets.commit("g2", "T", 0, 300)
        offsets.persist()  # now only the Unread queue (in the last segment) holds the log
        deleted += s.clean_service.delete_commitlog_segments(forcibly=True)
        assert len(s.commitlog.queue.files) == 1 and s.get_message("Unread", 0, 0).status is GetStatus.FOUND


def test_wrong_client_crc_does_not_cut_later_records(tmp_path, small_config):
    d = str(tmp_path / "s")
    with MessageStore(d, small_config) as s:
        put_one(s, "T", 0, record("T", b"before"))
        put_one(s, "T", 0, record("T", b"lying", crc=12345))
        for i in range(5):
            put_one(s, "T", 0, record("T", b"after%d" % i))
    open(os.path.join(d, "abort"), "w").close()  # as if the broker had crashed
    with MessageStore(d, small_config) as s:
        bodies = [bytes(m.body) for m in s.get_message("T", 0, 0).messages]
        assert bodies == [b"before", b"lying"] + [b"after%d" % i for i in range(5)]


def test_bad_names_refused(store):
    _refused(put_one(store, "../x", 0, record("T", b"x")), "topic")
    _refused(put_one(store, "T", -1, record("T", b"x")), "queue id")
    _refused(put_batch(store, "T", 0, fmt.encode_batch("T", [b"x" * (1 << 20)] * 5)), "split")
    assert store.topics() == {}


def _mixed(records: list[tuple[str, bytes, dict]]) -> fmt.EncodedBatch:
    """Records of several topics packed back to back, as the broker gathers SENDs of one pass."""
    return fmt.concat_batches([fmt.encode_batch(t, [body], [props]) for t, body, props in records])


def test_multi_queue_put_keeps_each_queue_in_order(store):
    put_one(store, "A", 0, record("A", b"before"))
    gen = ids.UniqKeyGenerator()
    spec = [("A", 0), ("B", 1), ("A", 0), ("C", 3), ("A", 1), ("B", 1), ("A", 0)]
    recs = [
        (t, b"%s%d-%d" % (t.encode(), q, i), fmt.message_properties(tags=f"T{i}", keys=f"key-{i}", uniq_key=gen.next()))
        for i, (t, q) in enumerate(spec)
    ]
    r = put_multi(store, [t for t, _ in spec], [q for _, q in spec], _mixed(recs))
    assert r.status is PutStatus.PUT_OK and r.msg_num == 7
    assert r.queue_offsets.tolist() == [1, 0, 2, 0, 0, 1, 3]
    assert (np.diff(r.phys_offsets) > 0).all()
    for i, (t, q) in enumerate(spec):
        got = store.get_message(t, q, int(r.queue_offsets[i]), 1).messages[0]
        assert bytes(got.body) == recs[i][1] and got.tags == f"T{i}"
        assert got.topic == t and got.queue_id == q and got.physical_offset == r.phys_offsets[i]
        assert [bytes(m.body) for m in store.query_message(t, f"key-{i}")] == [recs[i][1]]
    assert store.get_max_offset_in_queue("A", 0) == 4 and store.get_max_offset_in_queue("C", 3) == 1
    assert [bytes(m.body) for m in store.get_message("A", 0, 0, 10).messages] == [b"before", b"A0-0", b"A0-2", b"A0-6"]


def test_multi_queue_put_refuses_a_record_of_another_topic(store):
    batch = _mixed([("A", b"a", {}), ("B", b"b", {})])
    r = put_multi(store, ["A", "A"], [0, 0], batch)
    assert r.msg_num == 1 and r.refused.tolist()[0] == 0 and "topic" in r.reason(1)[1]
    with pytest.raises(ValueError):
        put_multi(store, ["A"], [0, 0], batch)
    assert store.get_max_offset_in_queue("A", 0) == 1 and store.get_max_offset_in_queue("B", 0) == 0
    r = put_multi(store, ["A", "B"], [0, 0], batch)
    assert r.queue_offsets.tolist() == [1, 0]


def test_multi_queue_put_survives_a_restart(tmp_path, small_config):
    d = str(tmp_path / "s")
    s = MessageStore(d, small_config).start()
    topics = [f"T{i % 5}" for i in range(40)]
    r = put_multi(s, topics, [i % 3 for i in range(40)], _mixed([(t, b"m%d" % i, {}) for i, t in enumerate(topics)]))
    s.shutdown()
    s = MessageStore(d, small_config).start()
    try:
        for i, t in enumerate(topics):
            got = s.get_message(t, i % 3, int(r.queue_offsets[i]), 1).messages[0]
            assert bytes(got.body) == b"m%d" % i
    finally:
        s.shutdown()


def test_multi_queue_put_across_segment_ends(store):
    """Records of several queues in batches that straddle commitlog segment ends."""
    size = store.config.mapped_file_size_commit_log
    bodies, sent = b"x" * 900, []
    while store.commitlog.max_offset < 2.5 * size:
        topics = [f"S{(len(sent) + k) % 3}" for k in range(7)]
        recs = [(t, bodies + b"%d" % (len(sent) + k), {}) for k, t in enumerate(topics)]
        r = put_multi(store, topics, [0] * 7, _mixed(recs))
        sent += [(t, int(q), body) for (t, body, _), q in zip(recs, r.queue_offsets)]
    assert len(store.commitlog.queue.files) >= 3
    for t, q, body in sent:
        got = store.get_message(t, 0, q, 1).messages[0]
        assert bytes(got.body) == body and got.queue_offset == q
