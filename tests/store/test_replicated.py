"""ReplicaAppender: a master store's commitlog bytes streamed into a replica store (real stores,
small segments so that records straddle segment ends), checked byte for byte and entry for
entry; corrupt input refused with nothing of it kept; truncation; a replica SIGKILLed
mid-append; a replica store reopened as a master."""

from __future__ import annotations

import itertools
import os
import random
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

from shmq.codec import record as fmt
from shmq.store import replica_scan
from shmq.store.message_store import MessageStore
from shmq.store.write.replicated import ReplicaAppender
from tests.store.conftest import SMALL, put_multi, put_one, record

SEG = SMALL["mappedFileSizeCommitLog"]
FRAME = 32 * 1024


def feed(master: MessageStore, rng: random.Random, rounds: int = 60, first: int = 0) -> list[tuple[str, str]]:
    """Mixed puts: topics, queues, tags, keys, uniq keys, sizes up to 3 KB, batches and singles;
    returns the (topic, key) pairs used."""
    keys: list[tuple[str, str]] = []
    for i in range(first, first + rounds):
        n = rng.choice([1, 1, 3, 40])
        topics = [rng.choice(["TopicA", "TopicB", "T%|c"]) for _ in range(n)]
        qids = [rng.randrange(4) for _ in range(n)]
        bodies = [rng.randbytes(rng.choice([0, 5, 100, 700, 3000])) for _ in range(n)]
        props = []
        for j in range(n):
            key = f"k{i}-{j}" if rng.random() < 0.5 else None
            more = f"{key} extra{rng.randrange(5)}" if key and rng.random() < 0.3 else key
            tags = rng.choice([None, "TagA", "tagBB", "t"])
            props.append(fmt.message_properties(tags=tags, keys=more, uniq_key=f"{i:016X}{j:016X}"))
            if key:
                keys.append((topics[j], key))
        if n == 1:
            put_one(master, topics[0], qids[0], fmt.encode_message(topics[0], bodies[0], properties=props[0]))
        else:
            batches = [fmt.encode_batch(t, [b], [p]) for t, b, p in zip(topics, bodies, props)]
            put_multi(master, topics, qids, fmt.concat_batches(batches))
    return keys


def stream(
    master: MessageStore, replica: ReplicaAppender, rng: random.Random, upto: int | None = None, defer: bool = False
) -> None:
    """The master's log from the replica's end to ``upto`` in random chunks that never cross a
    segment; ``defer``: most of them with dispatch=False, as an HA client with frames queued."""
    end = master.commitlog.max_offset if upto is None else upto
    while replica.max_offset < end:
        at = replica.max_offset
        size = min(rng.randint(1, FRAME), end - at, SEG - at % SEG)
        data = master.commitlog.data(at, size)
        assert data is not None
        replica.append(at, bytes(data), dispatch=not defer or rng.random() < 0.2)
    replica.dispatch()


def segment_bytes(store: MessageStore, upto: int) -> dict[str, bytes]:
    out = {}
    for mf in store.commitlog.queue.files:
        if mf.file_from_offset < upto:
            out[os.path.basename(mf.path)] = bytes(mf.view[: min(mf.size, upto - mf.file_from_offset)])
    return out


def assert_same(master: MessageStore, replica: MessageStore, keys: list[tuple[str, str]], upto: int) -> None:
    assert replica.commitlog.max_offset == upto
    assert segment_bytes(replica, upto) == segment_bytes(master, upto)
    mq = {(cq.topic, cq.queue_id): cq for cq in master.consume_queues() if cq.max_offset}
    rq = {(cq.topic, cq.queue_id): cq for cq in replica.consume_queues() if cq.max_offset}
    assert set(mq) == set(rq)
    for k, cq in mq.items():
        a = cq.get_range(cq.min_offset, cq.max_offset)
        b = rq[k].get_range(cq.min_offset, cq.max_offset)
        while len(a) < cq.max_offset - cq.min_offset:  # get_range stops at a file end
            a = np.concatenate([a, cq.get_range(cq.min_offset + len(a), cq.max_offset)])
            b = np.concatenate([b, rq[k].get_range(cq.min_offset + len(b), cq.max_offset)])
        assert a.tobytes() == b.tobytes(), k
        got_m = master.get_message(k[0], k[1], cq.min_offset, 1000)
        got_r = replica.get_message(k[0], k[1], cq.min_offset, 1000)
        assert [bytes(r.body) for r in got_m.messages] == [bytes(r.body) for r in got_r.messages]
        assert [r.physical_offset for r in got_m.messages] == [r.physical_offset for r in got_r.messages]
    for topic, key in keys:
        expect = [r.physical_offset for r in master.query_message(topic, key, 64)]
        assert expect, (topic, key)
        assert [r.physical_offset for r in replica.query_message(topic, key, 64)] == expect, (topic, key)


@pytest.fixture
def pair(tmp_path):
    master = MessageStore(str(tmp_path / "master"), SMALL).start()
    replica = MessageStore(str(tmp_path / "replica"), SMALL).start()
    try:
        yield master, replica
    finally:
        replica.shutdown()
        master.shutdown()


def test_stream_is_byte_identical(pair):
    master, replica = pair
    rng = random.Random(11)
    keys = feed(master, rng, 120)
    assert master.commitlog.max_offset > 3 * SEG  # several segments, records straddling their ends
    app = ReplicaAppender(replica.writer, replica.checkpoint)
    stream(master, app, rng)
    assert_same(master, replica, keys, master.commitlog.max_offset)


def test_deferred_dispatch_is_the_same(pair):
    """append(dispatch=False) for most frames, across segment ends: the same store in the end."""
    master, replica = pair
    rng = random.Random(12)
    keys = feed(master, rng, 120)
    app = ReplicaAppender(replica.writer, replica.checkpoint)
    stream(master, app, rng, defer=True)
    assert_same(master, replica, keys, master.commitlog.max_offset)


def test_deferred_corrupt_record_cut_at_dispatch(pair):
    master, replica = pair
    for i in range(30):
        put_one(master, "TopicA", 0, record("TopicA", bytes([i]) * 80, keys=f"key{i}"))
    cl = master.commitlog
    size = cl.size_at(0)
    run = bytearray(cl.data(0, cl.max_offset))
    run[10 * size + fmt.OFF_BODY + 3] ^= 1  # record 10's body: its CRC fails
    app = ReplicaAppender(replica.writer, replica.checkpoint)
    app.append(0, bytes(run[: 5 * size + 7]), dispatch=False)
    app.append(5 * size + 7, bytes(run[5 * size + 7 :]), dispatch=False)
    assert app.max_offset == len(run)  # written, not yet checked
    assert replica.get_max_offset_in_queue("TopicA", 0) == 0
    with pytest.raises(fmt.CorruptRecordError, match=f"record at offset {10 * size}: body CRC"):
        app.dispatch()
    assert app.max_offset == 10 * size and replica.get_max_offset_in_queue("TopicA", 0) == 10
    assert not replica.commitlog.queue.files[0].array[10 * size : len(run)].any()


def test_one_byte_frames_and_blank_tails(pair):
    """Frames cut anywhere: inside headers, inside BLANK fillers, in the zeros after them."""
    master, replica = pair
    rng = random.Random(5)
    keys = feed(master, rng, 40)
    app = ReplicaAppender(replica.writer, replica.checkpoint)
    end = master.commitlog.max_offset
    while app.max_offset < end:
        at = app.max_offset
        size = min(rng.choice([1, 2, 7, 50, 300]), end - at, SEG - at % SEG)
        app.append(at, bytes(master.commitlog.data(at, size)))
    assert_same(master, replica, keys, end)


def test_wrong_offset_and_segment_crossing_refused(pair):
    master, replica = pair
    feed(master, random.Random(1), 30)
    app = ReplicaAppender(replica.writer, replica.checkpoint)
    data = bytes(master.commitlog.data(0, 1000))
    with pytest.raises(ValueError, match=r"offset 10.*max offset is 0"):
        app.append(10, data)
    app.append(0, data)
    with pytest.raises(ValueError, match="max offset is 1000"):
        app.append(0, data)
    with pytest.raises(ValueError, match="crosses the end"):
        app.append(1000, bytes(SEG))
    assert app.max_offset == 1000


def _corrupt_cases(master: MessageStore) -> list[tuple[str, int, int, bytes]]:
    """(name, offset of the bad record, byte position in the run, replacement bytes)."""
    cl = master.commitlog
    second = cl.size_at(0)
    return [
        ("crc", second, second + fmt.OFF_BODYCRC, struct.pack(">i", 12345)),
        ("phys", second, second + fmt.OFF_PHYSICALOFFSET, struct.pack(">q", 99)),
        ("magic", second, second + fmt.OFF_MAGIC, b"\x00\x01\x02\x03"),
        ("garbage", second, second, bytes(range(200))),
    ]


@pytest.mark.parametrize("case", ["crc", "phys", "magic", "garbage", "topic", "split"])
def test_corrupt_records_refused_nothing_kept(pair, case):
    master, replica = pair
    rng = random.Random(3)
    for i in range(20):
        put_one(master, "TopicA", i % 2, record("TopicA", rng.randbytes(60), tags="x", keys=f"key{i}"))
    cl = master.commitlog
    first = cl.size_at(0)
    run = bytearray(cl.data(0, cl.max_offset))
    if case == "topic":
        body_len = struct.unpack_from(">i", run, first + fmt.OFF_BODYLEN)[0]
        run[first + fmt.OFF_BODY + body_len + 1] = ord("#")
    elif case == "split":  # the bad record's head arrives first, its corrupt tail in the next frame
        run[first + fmt.OFF_BODY + 55] ^= 0x40  # inside its body (past the first frame): the CRC fails
    else:
        _, _, at, repl = next(c for c in _corrupt_cases(master) if c[0] == case)
        run[at : at + len(repl)] = repl
    app = ReplicaAppender(replica.writer, replica.checkpoint)
    if case == "split":
        touched = app.append(0, bytes(run[: first + 50]))
        assert touched == [("TopicA", 0)] and app.max_offset == first + 50
        with pytest.raises(fmt.CorruptRecordError, match=f"record at offset {first}: body CRC"):
            app.append(first + 50, bytes(run[first + 50 :]))
    else:
        with pytest.raises(fmt.CorruptRecordError, match=f"offset {first}"):
            app.append(0, bytes(run))
    assert app.max_offset == first  # the good first record kept and dispatched, nothing after it
    assert replica.get_max_offset_in_queue("TopicA", 0) == 1
    assert replica.get_max_offset_in_queue("TopicA", 1) == 0
    mf = replica.commitlog.queue.files[0]
    assert not mf.array[first : first + 4096].any()  # the refused bytes are not in the file
    app.append(first, bytes(cl.data(first, cl.max_offset - first)))  # the true bytes then go on
    assert_same(master, replica, [("TopicA", f"key{i}") for i in range(20)], cl.max_offset)


def test_truncate_then_different_tail(pair, tmp_path):
    master, replica = pair
    rng = random.Random(8)
    keys = feed(master, rng, 50)
    app = ReplicaAppender(replica.writer, replica.checkpoint)
    stream(master, app, rng)
    full = master.commitlog.max_offset
    # a boundary in an earlier segment: the record starting right after the first segment's end
    cut = SEG + master.commitlog.size_at(SEG)
    with pytest.raises(ValueError, match="not the start of a record"):
        app.truncate(cut + 1)
    with pytest.raises(ValueError, match="holds"):
        app.truncate(full + 1)
    starts = [cut, *range(cut - cut % SEG + SEG, full, SEG)]
    cut_bytes = b"".join(bytes(master.commitlog.data(o, min(SEG - o % SEG, full - o))) for o in starts)
    removed = app.truncate(cut)
    assert removed == full - cut and app.max_offset == cut
    with open(app.diverged_path(cut), "rb") as f:
        assert f.read() == cut_bytes
    assert os.stat(app.diverged_path(cut)).st_mode & 0o777 == 0o600
    assert not os.path.exists(os.path.join(replica.store_dir, "truncating"))
    for cq in replica.consume_queues():
        assert cq.max_phys_end <= cut
    assert len(replica.commitlog.queue.files) == 2
    # a second master with the same first `cut` bytes and a different tail
    other = MessageStore(str(tmp_path / "other"), SMALL).start()
    try:
        prefix = ReplicaAppender(other.writer, other.checkpoint)
        stream(master, prefix, rng, upto=cut)
        keys2 = feed(other, random.Random(99), 30, first=1000)
        stream(other, app, rng)
        kept = [(t, k) for t, k in keys if any(r.physical_offset < cut for r in master.query_message(t, k, 64))]
        assert_same(other, replica, kept + keys2, other.commitlog.max_offset)
    finally:
        other.shutdown()


def test_replica_reopened_as_master(pair, tmp_path):
    master, replica = pair
    rng = random.Random(21)
    keys = feed(master, rng, 60)
    app = ReplicaAppender(replica.writer, replica.checkpoint)
    stream(master, app, rng)
    end = master.commitlog.max_offset
    replica.shutdown()
    promoted = MessageStore(replica.store_dir, SMALL).start()
    try:
        assert_same(master, promoted, keys, end)
        before = {(cq.topic, cq.queue_id): cq.max_offset for cq in promoted.consume_queues()}
        res = put_one(promoted, "TopicA", 0, record("TopicA", b"after", keys="promoted"))
        assert res.wrote_offset >= end and res.queue_offset == before[("TopicA", 0)]
        assert [bytes(r.body) for r in promoted.query_message("TopicA", "promoted")] == [b"after"]
    finally:
        promoted.shutdown()


_CHILD = r"""
import random, sys
from shmq.store.message_store import MessageStore
from shmq.store.write.replicated import ReplicaAppender
from tests.store.conftest import SMALL
master = MessageStore(sys.argv[1], SMALL).start()
replica = MessageStore(sys.argv[2], SMALL).start()
app = ReplicaAppender(replica.writer, replica.checkpoint)
rng = random.Random(int(sys.argv[3]))
end = master.commitlog.max_offset
print(app.max_offset, flush=True)
told = False
while app.max_offset < end:
    at = app.max_offset
    size = min(rng.randint(1, 600), end - at, 65536 - at % 65536)
    app.append(at, bytes(master.commitlog.data(at, size)))
    if at > int(sys.argv[4]) and not told:
        print("go", flush=True)  # killed a moment later, in the middle of some append
        told = True
print("done", flush=True)
sys.stdin.readline()
"""


def test_sigkill_mid_append_recovers(tmp_path):
    mdir = str(tmp_path / "master")
    rng = random.Random(4)
    with MessageStore(mdir, SMALL) as master:
        keys = feed(master, rng, 80)
        end = master.commitlog.max_offset
    for round_ in range(3):
        rdir = str(tmp_path / f"replica{round_}")
        stop = rng.randrange(end // 4, end - 4096)
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, mdir, rdir, str(round_), str(stop)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=os.getcwd(),
        )
        try:
            start_at = int(child.stdout.readline())
            assert child.stdout.readline().strip() == "go"
            time.sleep(rng.uniform(0, 0.02))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        replica = MessageStore(rdir, SMALL).start()
        master = MessageStore(mdir, SMALL).start()
        try:
            app = ReplicaAppender(replica.writer, replica.checkpoint)
            got = app.max_offset
            assert start_at <= got <= end
            assert segment_bytes(replica, got) == segment_bytes(master, got)
            stream(master, app, rng)
            assert_same(master, replica, keys, end)
        finally:
            master.shutdown()
            replica.shutdown()


def test_fresh_replica_starts_at_a_segment_start(pair):
    """An empty replica takes the master's log from a segment start (a master whose first
    segments were cleaned); queues start past 0 as on the master."""
    master, replica = pair
    rng = random.Random(2)
    feed(master, rng, 60)
    app = ReplicaAppender(replica.writer, replica.checkpoint)
    with pytest.raises(ValueError):
        app.append(SEG + 8, b"x")
    stream_from = SEG
    data = master.commitlog.data(stream_from, 100)
    app.append(stream_from, bytes(data))
    stream(master, app, rng)
    assert replica.commitlog.min_offset == SEG
    assert segment_bytes(replica, master.commitlog.max_offset) == {
        k: v for k, v in segment_bytes(master, master.commitlog.max_offset).items() if int(k) >= SEG
    }


_TRUNCATE_CHILD = r"""
import os, random, sys
from shmq.store import recovery
from shmq.store.write import replicated
from shmq.store.consume_queue import ConsumeQueue
from shmq.store.message_store import MessageStore
from tests.store.conftest import SMALL
replica = MessageStore(sys.argv[1], SMALL).start()
app = replicated.ReplicaAppender(replica.writer, replica.checkpoint)
def crash(*args, **kw):
    os._exit(9)
if sys.argv[3] == "after_marker":  # the marker is durable, nothing cut yet
    replicated.recovery.finish_cut = crash
else:  # the commitlog is cut, consume queues, index and checkpoint not yet
    ConsumeQueue.truncate_dirty = crash
app.truncate(int(sys.argv[2]))
"""


@pytest.mark.parametrize("point", ["after_marker", "after_cut"])
def test_crash_during_truncate_recovers_to_the_offset(tmp_path, point):
    """A replica killed in the middle of truncate() (fault injected in a child process)
    recovers to exactly the target offset, its queues and index in line with it."""
    rng = random.Random(6)
    master = MessageStore(str(tmp_path / "master"), SMALL).start()
    rdir = str(tmp_path / "replica")
    try:
        keys = feed(master, rng, 60)
        with MessageStore(rdir, SMALL) as replica:
            stream(master, ReplicaAppender(replica.writer, replica.checkpoint), rng)
        cut = 2 * SEG + master.commitlog.size_at(2 * SEG)
        child = subprocess.run([sys.executable, "-c", _TRUNCATE_CHILD, rdir, str(cut), point], cwd=os.getcwd())
        assert child.returncode == 9
        with MessageStore(rdir, SMALL) as replica:
            app = ReplicaAppender(replica.writer, replica.checkpoint)
            assert app.max_offset == cut
            assert not os.path.exists(os.path.join(rdir, "truncating"))
            for cq in replica.consume_queues():
                assert cq.max_phys_end <= cut
            kept = [(t, k) for t, k in keys if any(r.physical_offset < cut for r in master.query_message(t, k, 64))]
            for topic, key in kept:
                want = [r.physical_offset for r in master.query_message(topic, key, 64) if r.physical_offset < cut]
                assert [r.physical_offset for r in replica.query_message(topic, key, 64)] == want
            stream(master, app, rng)  # the master's bytes go on from the cut, as after a handshake
            assert_same(master, replica, keys, master.commitlog.max_offset)
    finally:
        master.shutdown()


def _raw(topic: str, body: bytes, props: bytes, sysflag: int = 0) -> bytes:
    buf = bytearray(fmt.record_size(len(body), len(topic), len(props)))
    fmt.pack_message_into(buf, 0, topic.encode(), body, props, fmt.body_crc(body), sysflag=sysflag, born_timestamp=1)
    return bytes(buf)


def test_odd_records_dispatch_like_recovery(pair):
    """Records the fast paths must not get wrong: non-ASCII property values, a name given twice,
    KEYS with runs of spaces, empty values, a prepared transaction, a body holding a record-like
    pattern at its own position, many property layouts; the replica's consume queues and index
    equal the master's and the scan's dispatch data equal what recovery's decode computes."""
    master, replica = pair
    rng = random.Random(17)
    for i in range(300):
        topic = rng.choice(["TopicA", "TopicB"])
        kind = i % 7
        if kind == 0:
            props = fmt.encode_properties({"TAGS": "t\u00e9", "KEYS": f"k\u00fc{i}", "UNIQ_KEY": f"U{i}"})
        elif kind == 1:
            props = f"KEYS\x01a{i}\x02TAGS\x01x\x02KEYS\x01b{i}\x02".encode()
        elif kind == 2:
            props = f"KEYS\x01  s{i}   t{i} \x02UNIQ_KEY\x01\x02TAGS\x01\x02".encode()
        elif kind == 3:
            props = f"X\x01TAGS\x01no\x02UNIQ_KEY\x01{i:032X}\x02TAGS\x01{'a' * (i % 5 + 1)}\x02".encode()
        else:
            props = fmt.encode_properties(
                {"TAGS": rng.choice(["A", "BB"]), "UNIQ_KEY": f"{i:032X}", **({"KEYS": f"q{i}"} if kind == 4 else {})}
            )
        body = rng.randbytes(rng.choice([0, 3, 40]))
        if i == 200:  # a body that mimics a record at its own position (magic + PHYSICALOFFSET)
            at = master.commitlog.max_offset + fmt.OFF_BODY
            fake = bytearray(_raw(topic, b"zz", b""))
            struct.pack_into(">q", fake, fmt.OFF_PHYSICALOFFSET, at)
            body = bytes(fake)
        put_one(master, topic, 1, _raw(topic, body, props, fmt.TRANSACTION_PREPARED if i == 250 else 0))
    end = master.commitlog.max_offset
    assert end < SEG
    data = bytes(master.commitlog.data(0, end))
    found = replica_scan.scan(np.frombuffer(data, np.uint8), 0, SEG)
    expect_tags, expect_keys = [], []
    for i, s in enumerate(found.starts.tolist()):
        rec = fmt.decode_record(data, s)
        expect_tags.append(fmt.tags_code(rec.tags))
        expect_keys += [(i, h) for h in fmt.record_key_hashes(rec.topic, rec.uniq_key, rec.properties.get("KEYS"))]
    assert found.error is None and found.end == end and len(found) > 100
    assert found.tags_codes.tolist() == expect_tags
    assert list(zip(found.key_records.tolist(), found.key_hashes.tolist())) == expect_keys
    app = ReplicaAppender(replica.writer, replica.checkpoint)
    app.append(0, data)
    assert_same(master, replica, [], end)
    for topic, key in [
        ("TopicA", "k\u00fc0"),
        ("TopicB", "k\u00fc0"),
        ("TopicA", "b1"),
        ("TopicB", "b1"),
        ("TopicA", "s2"),
        ("TopicB", "t2"),
        ("TopicA", "q4"),
    ]:
        assert [r.physical_offset for r in replica.query_message(topic, key)] == [
            r.physical_offset for r in master.query_message(topic, key)
        ]


def test_crash_after_a_blank_filler_recovers_to_the_segment_end(pair, tmp_path):
    """A replica dies after writing a segment's BLANK filler but before (all of) the zeros after
    it reached the disk (here: a sparse copy of the running store, whose zero tail is a hole):
    recovery reports the segment's end, where the master goes on (regression: it reported the
    end of the filler's page, and the next frame went to the wrong offset)."""
    master, replica = pair
    rng = random.Random(9)
    for i in range(100):
        put_one(master, "TopicA", i % 3, record("TopicA", rng.randbytes(200), keys=f"s{i}"))
    blank_at = master.commitlog.max_offset
    put_one(master, "TopicA", 0, record("TopicA", rng.randbytes(40_000), keys="big"))  # rolls: a long filler
    assert SEG - blank_at > 8 * 4096 and master.commitlog.max_offset > SEG
    keys = [("TopicA", f"s{i}") for i in range(100)] + [("TopicA", "big")]
    app = ReplicaAppender(replica.writer, replica.checkpoint)
    stream(master, app, rng, upto=blank_at)
    app.append(blank_at, bytes(master.commitlog.data(blank_at, fmt.MIN_BLANK)))
    copy = str(tmp_path / "copy")
    subprocess.run(["cp", "-a", "--sparse=always", replica.store_dir, copy], check=True)
    spare = os.path.join(copy, "commitlog", fmt.offset_file_name(SEG))  # not made yet by the allocator
    if os.path.exists(spare):
        os.unlink(spare)
    with MessageStore(copy, SMALL) as crashed:
        again = ReplicaAppender(crashed.writer, crashed.checkpoint)
        assert again.max_offset == SEG
        stream(master, again, rng)
        assert_same(master, crashed, keys, master.commitlog.max_offset)


@pytest.mark.parametrize("bad_in", ["deferred", "last"])
def test_a_dispatching_append_behind_deferred_frames_checks_all_in_place(pair, bad_in):
    """Frames appended with dispatch=False, then one that dispatches: it is written behind them
    and everything is checked in the file (no copy of the deferred bytes); a bad record, in the
    deferred part or in the last frame, is cut with all after it, the good ones are dispatched."""
    master, replica = pair
    for i in range(40):
        put_one(master, "TopicA", i % 2, record("TopicA", bytes([i]) * 90, keys=f"key{i}"))
    cl = master.commitlog
    end = cl.max_offset
    at = [0]
    while at[-1] < end:
        at.append(at[-1] + cl.size_at(at[-1]))
    bad = at[12 if bad_in == "deferred" else 38]
    run = bytearray(cl.data(0, end))
    run[bad + fmt.OFF_BODY + 7] ^= 1  # its body CRC fails
    app = ReplicaAppender(replica.writer, replica.checkpoint)
    cuts = [0, at[3] + 5, at[20] + 11, at[37] + 2, end]
    for a, b in itertools.pairwise(cuts[:-1]):  # all but the last run
        assert app.append(a, bytes(run[a:b]), dispatch=False) == []
    assert replica.get_max_offset_in_queue("TopicA", 0) == 0  # nothing checked yet
    with pytest.raises(fmt.CorruptRecordError, match=f"record at offset {bad}: body CRC"):
        app.append(cuts[-2], bytes(run[cuts[-2] :]))
    assert app.max_offset == bad
    n = at.index(bad)
    assert replica.get_max_offset_in_queue("TopicA", 0) + replica.get_max_offset_in_queue("TopicA", 1) == n
    assert not replica.commitlog.queue.files[0].array[bad:end].any()  # the refused bytes are gone
    app.append(bad, bytes(cl.data(bad, end - bad)))  # the true bytes then go on
    assert_same(master, replica, [("TopicA", f"key{i}") for i in range(40)], end)
