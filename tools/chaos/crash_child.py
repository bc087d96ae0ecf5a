"""Crash-test child: appends to a MessageStore (SYNC_FLUSH unless told) until it is killed.

    python tools/chaos/crash_child.py STORE_DIR START_SEQ SEED ACK_FILE [--max-puts N] [--kill-at POINT]

Every record carries a sequence number (its KEYS property) from which its body, and nothing
else, is derived (`body_for`), so the parent can check any record it finds, acknowledged or
not. After each put that returns PUT_OK, one ack line is appended to ACK_FILE with a single
os.write (a regular file survives SIGKILL; the parent ignores a line without its newline):

    A <first seq> <count> <topic> <queue id> <first queue offset> <phys0>,<phys1>,...

The first line is `R <recovery ms>` once the store is open. Puts alternate at random between
single records, user batches of 1-64 records, and puts of 1-32 separate
records each to a random queue (one ack line per record), bodies 0-3000 bytes, over a few
queues.
With --kill-at the child SIGKILLs itself at an exact point of its writes instead of waiting
for the parent's kill (`KILL_POINTS`), once the store is open.
The shared helpers (`CONFIG`, `body_for`, `ROUTES`) are imported by the parent and by
tools/chaos/store_crash.py, so child and checker agree by construction.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from shmq.codec import ids
from shmq.codec import record as fmt
from shmq.store.write.hooks import PutRequest

# Small segments so commitlog, consume-queue and index files all roll often. The flush mode
# comes from SHMQ_CHAOS_FLUSH (store_crash.py --flush): SYNC_FLUSH by default; ASYNC_FLUSH
# drives the fused compiled put, which SYNC_FLUSH puts do not take (a SIGKILL keeps the page
# cache, so an acknowledged ASYNC_FLUSH record must survive it too).
CONFIG = {
    "flushDiskType": os.environ.get("SHMQ_CHAOS_FLUSH", "SYNC_FLUSH"),
    "mappedFileSizeCommitLog": 256 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 512,
    "maxHashSlotNum": 1024,
    "maxIndexNum": 4096,
}
ROUTES = [("CrashA", 0), ("CrashA", 1), ("CrashA", 2), ("CrashB", 0), ("CrashB", 3)]
MAX_BODY = 3000
TAGS = ["tagA", "tagB", None]


def body_for(seq: int) -> bytes:
    """The body of record `seq`: length 0-3000 and content both derived from seq only."""
    h = hashlib.blake2b(seq.to_bytes(8, "big"), digest_size=8).digest()
    n = int.from_bytes(h[:4], "big") % (MAX_BODY + 1)
    return random.Random(int.from_bytes(h, "big")).randbytes(n)


def tags_for(seq: int) -> str | None:
    return TAGS[seq % len(TAGS)]


def seq_of(rec: fmt.StoredRecord) -> int:
    """The sequence number a record carries in KEYS (ValueError if it does not)."""
    keys = rec.keys
    if len(keys) != 1:
        raise ValueError(f"record at {rec.physical_offset} has KEYS {rec.properties.get('KEYS')!r}")
    return int(keys[0])


def props_for(seq: int, uniq: ids.UniqKeyGenerator) -> dict[str, str]:
    return fmt.message_properties(tags=tags_for(seq), keys=str(seq), uniq_key=uniq.next())


# Where --kill-at stops the child: points a timed SIGKILL hits too rarely to test by chance.
KILL_POINTS = {
    "index-key": "a one-record put, after its first index key (its UNIQ_KEY), before the next (its KEYS)",
    "index-roll": "a put of several records, after the index file it filled in the middle of a record's "
    "keys, before the next file holds the rest of them",
}


def arm_kill(point: str) -> None:
    """SIGKILL this process at ``point`` (a name of ``KILL_POINTS``), the first time it is reached."""
    import numpy as np

    from shmq.store.index_file import IndexFile

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "index-key":
        put = IndexFile.put

        def put_then_die(self: IndexFile, key_hash: int, phys_offset: int, store_timestamp: int) -> bool:
            done = put(self, key_hash, phys_offset, store_timestamp)
            die()
            return done

        IndexFile.put = put_then_die  # type: ignore[method-assign]
    elif point == "index-roll":
        put_batch = IndexFile.put_batch

        def put_batch_then_die(
            self: IndexFile, key_hashes: np.ndarray, phys_offsets: np.ndarray, store_timestamps: np.ndarray
        ) -> int:
            n = put_batch(self, key_hashes, phys_offsets, store_timestamps)
            if 0 < n < len(key_hashes) and phys_offsets[n] == phys_offsets[n - 1]:
                die()
            return n

        IndexFile.put_batch = put_batch_then_die  # type: ignore[method-assign]
    else:
        raise SystemExit(f"--kill-at: {point!r} is not one of {', '.join(KILL_POINTS)}")


def main(argv: list[str]) -> int:
    store_dir, start_seq, seed, ack_path = argv[0], int(argv[1]), int(argv[2]), argv[3]
    max_puts = int(argv[argv.index("--max-puts") + 1]) if "--max-puts" in argv else -1
    kill_at = argv[argv.index("--kill-at") + 1] if "--kill-at" in argv else None

    from shmq.store.message_store import MessageStore
    from shmq.store.write.result import PutStatus

    ack_fd = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    t0 = time.monotonic()
    store = MessageStore(store_dir, CONFIG).start()
    os.write(ack_fd, f"R {(time.monotonic() - t0) * 1000:.1f}\n".encode())
    if kill_at is not None:
        arm_kill(kill_at)
    rng = random.Random(seed)
    uniq = ids.UniqKeyGenerator()
    seq = start_seq
    puts = 0
    while max_puts < 0 or puts < max_puts:
        topic, qid = rng.choice(ROUTES)
        kind = rng.random()
        if kind >= 0.75:
            n = rng.randint(1, 32)
            routes = [rng.choice(ROUTES) for _ in range(n)]
            batch = fmt.concat_batches(
                [
                    fmt.encode_batch(t, [body_for(s)], [props_for(s, uniq)])
                    for s, (t, _) in zip(range(seq, seq + n), routes)
                ]
            )
            res = store.put(PutRequest.of_routes([t for t, _ in routes], [q for _, q in routes], batch))
            if res.status == PutStatus.PUT_OK:  # one line per record, all in one write
                os.write(
                    ack_fd,
                    "".join(
                        f"A {seq + i} 1 {t} {q} {int(qoff)} {int(p)}\n"
                        for i, ((t, q), qoff, p) in enumerate(zip(routes, res.queue_offsets, res.phys_offsets))
                    ).encode(),
                )
            else:
                sys.stderr.write(f"child: put of seq {seq} returned {res.status}\n")
            seq += n
            puts += 1
            continue
        if kind < 0.3:
            rec = fmt.encode_message(topic, body_for(seq), queue_id=qid, properties=props_for(seq, uniq))
            res = store.put(PutRequest.of_records(topic, qid, [rec]))
            n = 1
            phys = [res.wrote_offset]
        else:
            n = rng.randint(1, 64)
            seqs = range(seq, seq + n)
            batch = fmt.encode_batch(topic, [body_for(s) for s in seqs], [props_for(s, uniq) for s in seqs])
            res = store.put(PutRequest(batch, [topic], None, qid, user_batch=True))
            # where each record landed (a batch may be split over a segment end); get_range
            # stops at a consume-queue file end, so read until all n are in
            cq = store.find_consume_queue(topic, qid)
            phys = []
            while len(phys) < n:
                more = cq.get_range(res.queue_offset + len(phys), n - len(phys))
                if not len(more):
                    break
                phys += [int(p) for p in more["offset"]]
            if len(phys) != n or phys[0] != res.wrote_offset:
                sys.stderr.write(f"child: batch of {n} at {res.wrote_offset}, consume queue has {phys[:3]}...\n")
                return 3
        if res.status == PutStatus.PUT_OK:
            os.write(ack_fd, (f"A {seq} {n} {topic} {qid} {res.queue_offset} {','.join(map(str, phys))}\n").encode())
        else:
            sys.stderr.write(f"child: put of seq {seq} returned {res.status}\n")
        seq += n
        puts += 1
    store.shutdown()
    os.write(ack_fd, b"S\n")
    return 0


# =========================================================================== parent side
# The harness below runs in the parent (pytest or tools/chaos/store_crash.py): it starts this
# file as a child, kills it, optionally damages the store, reopens it and checks everything.


class CrashCheckError(AssertionError):
    """The recovered store broke a crash-safety promise."""


@dataclass
class Ack:
    seq: int
    n: int
    topic: str
    queue_id: int
    queue_offset: int
    phys: list[int]


@dataclass
class RoundInfo:
    acks: list[Ack]
    started: bool  # the child opened the store (so it left the abort file)
    recovery_ms_child: float
    clean: bool  # the child shut down by itself
    start_seq: int


@dataclass
class Stats:
    rounds: int = 0
    acked_checked: int = 0  # acknowledged records found intact after a crash (summed over rounds)
    recovered_unacked: int = 0  # records written but not acked (the in-flight put) that survived
    records_in_store: int = 0
    max_recovery_ms: float = 0.0  # parent re-open (recovery) time
    recovery_ms: list[float] = field(default_factory=list)
    kills_during_startup: int = 0


def _ck(cond: bool, msg: str) -> None:
    if not cond:
        raise CrashCheckError(msg)


def parse_acks(path: str) -> tuple[list[Ack], bool, float, bool]:
    acks: list[Ack] = []
    started, clean, rec_ms = False, False, 0.0
    try:
        with open(path, "rb") as f:
            data = f.read().decode()
    except FileNotFoundError:
        return acks, started, rec_ms, clean
    for line in data.split("\n")[:-1]:  # a last line without its newline was cut by the kill
        parts = line.split()
        if parts[0] == "R":
            started, rec_ms = True, float(parts[1])
        elif parts[0] == "S":
            clean = True
        elif parts[0] == "A":
            acks.append(
                Ack(
                    int(parts[1]),
                    int(parts[2]),
                    parts[3],
                    int(parts[4]),
                    int(parts[5]),
                    [int(x) for x in parts[6].split(",")],
                )
            )
    return acks, started, rec_ms, clean


def raw_scan(store_dir: str, segment_size: int = CONFIG["mappedFileSizeCommitLog"]) -> list[tuple[int, int]]:
    """(phys offset, size) of every valid record in the commitlog files, without opening a store."""
    d = os.path.join(store_dir, "commitlog")
    names = sorted(n for n in os.listdir(d) if fmt.parse_offset_file_name(n) is not None) if os.path.isdir(d) else []
    out: list[tuple[int, int]] = []
    expected = None
    for name in names:
        base = fmt.parse_offset_file_name(name)
        if expected is not None and base != expected:
            break
        with open(os.path.join(d, name), "rb") as f:
            buf = f.read()
        pos = 0
        while True:
            status, size = fmt.check_record(buf, pos, len(buf), base + pos, True)
            if status == fmt.RECORD_OK:
                out.append((base + pos, size))
                pos += size
            elif status == fmt.RECORD_BLANK:
                break
            else:
                return out
        expected = base + segment_size
    return out


def segment_path(store_dir: str, offset: int, segment_size: int = CONFIG["mappedFileSizeCommitLog"]) -> str:
    return os.path.join(store_dir, "commitlog", fmt.offset_file_name(offset - offset % segment_size))


def tree_digest(path: str) -> dict[str, str]:
    """sha1 of every file under `path` (relative names)."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = hashlib.sha1(f.read()).hexdigest()
    return out


class CrashHarness:
    """A store directory driven through kill / damage / recover / verify rounds.

    The model is every record known to be in the store: seq -> (topic, queue id, queue offset,
    phys offset). Acked records join it when the round that acked them is verified; unacked
    records that survived a crash (the put that was in flight) join it too, since from then on
    they are part of the store and must stay.
    """

    def __init__(self, store_dir: str, work_dir: str, seed: int, log=None) -> None:
        self.store_dir = store_dir
        self.work_dir = work_dir
        self.rng = random.Random(seed)
        self.seed = seed
        self.model: dict[int, tuple[str, int, int, int]] = {}
        self.sizes: dict[int, int] = {}  # seq -> record size
        self.next_seq = 0
        self.stats = Stats()
        self.log = log or (lambda msg: None)
        self.round_no = 0

    # ------------------------------------------------------------------ child

    def run_child(
        self,
        run_ms: float | None = None,
        kill_at_spawn_ms: float | None = None,
        max_puts: int | None = None,
        timeout: float = 30.0,
        kill_at: str | None = None,
    ) -> RoundInfo:
        """Start the child; SIGKILL it `run_ms` after it opened the store (or `kill_at_spawn_ms`
        after spawning it, which may land inside its recovery); or let it do `max_puts` and exit;
        or let it kill itself at `kill_at` (a name of KILL_POINTS)."""
        import signal
        import subprocess

        self.round_no += 1
        ack_path = os.path.join(self.work_dir, f"acks-{self.round_no}")
        start_seq = self.next_seq
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            self.store_dir,
            str(start_seq),
            str(self.rng.randrange(1 << 30)),
            ack_path,
        ]
        if max_puts is not None:
            cmd += ["--max-puts", str(max_puts)]
        if kill_at is not None:
            cmd += ["--kill-at", kill_at]
        err_path = ack_path + ".err"
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        try:
            t_spawn = time.monotonic()
            if max_puts is not None:
                rc = proc.wait(timeout)
                _ck(rc == 0, f"child exited {rc}: {Path(err_path).read_text()[-2000:]}")
            elif kill_at is not None:
                rc = proc.wait(timeout)
                _ck(
                    rc == -signal.SIGKILL,
                    f"child did not kill itself at {kill_at} ({rc}): {Path(err_path).read_text()[-2000:]}",
                )
            else:
                if kill_at_spawn_ms is not None:
                    deadline = t_spawn + kill_at_spawn_ms / 1000
                else:
                    while True:  # wait for the R line
                        if proc.poll() is not None:
                            raise CrashCheckError(
                                f"child died early ({proc.returncode}): {Path(err_path).read_text()[-2000:]}"
                            )
                        if os.path.exists(ack_path) and os.path.getsize(ack_path) > 0:
                            break
                        if time.monotonic() - t_spawn > timeout:
                            raise CrashCheckError("child did not open the store in time")
                        time.sleep(0.002)
                    deadline = time.monotonic() + run_ms / 1000
                time.sleep(max(0.0, deadline - time.monotonic()))
                _ck(
                    proc.poll() is None,
                    f"child exited by itself ({proc.returncode}): {Path(err_path).read_text()[-2000:]}",
                )
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        acks, started, rec_ms, clean = parse_acks(ack_path)
        errors = Path(err_path).read_text()
        _ck("Traceback" not in errors, f"child raised:\n{errors[-3000:]}")
        if kill_at_spawn_ms is not None and not started:
            self.stats.kills_during_startup += 1
        return RoundInfo(acks, started, rec_ms, clean, start_seq)

    # ------------------------------------------------------------------ damage helpers

    def known_end(self, info: RoundInfo) -> int:
        """End offset of the last record that must survive (model + this round's acks)."""
        end = 0
        for seq, (_, _, _, phys) in self.model.items():
            end = max(end, phys + self.sizes[seq])
        for a in info.acks:
            last = a.phys[-1]
            with open(segment_path(self.store_dir, last), "rb") as f:
                f.seek(last % CONFIG["mappedFileSizeCommitLog"])
                size = int.from_bytes(f.read(4), "big", signed=True)
            end = max(end, last + size)
        return end

    # ------------------------------------------------------------------ reopen + verify

    def reopen_and_verify(
        self,
        info: RoundInfo,
        lost: set[int] = frozenset(),
        expect_abnormal: bool | None = None,
        query_all: bool = False,
        append: bool = True,
        expect_unchanged: bool = False,
        on_open=None,
    ):
        from shmq.store.message_store import MessageStore

        abort = os.path.join(self.store_dir, "abort")
        # A child killed after the store made its abort marker but before it reported "R" leaves
        # a marker nobody was told of: either state is right then (the marker only makes the next
        # start recover abnormally, which is always safe).
        unreported = expect_abnormal is None and not info.started and not info.clean
        if expect_abnormal is None:
            expect_abnormal = info.started and not info.clean
        _ck(
            unreported or os.path.exists(abort) == expect_abnormal,
            f"abort file {'missing' if expect_abnormal else 'present'} before reopen",
        )
        before = {}
        if expect_unchanged:
            before = {d: tree_digest(os.path.join(self.store_dir, d)) for d in ("commitlog", "consumequeue", "index")}
        t0 = time.monotonic()
        store = MessageStore(self.store_dir, CONFIG).start()
        rec_ms = (time.monotonic() - t0) * 1000
        try:
            if expect_unchanged:
                for d, digest in before.items():
                    after = tree_digest(os.path.join(self.store_dir, d))
                    _ck(
                        after == digest,
                        f"normal recovery changed {d}/: "
                        f"{sorted(k for k in set(after) | set(digest) if after.get(k) != digest.get(k))[:10]}",
                    )
            if on_open is not None:
                on_open(store)
            self.verify(store, info, lost, query_all)
            if append:
                self.append_and_check(store)
        except BaseException:
            store.shutdown()
            raise
        store.shutdown()
        st = self.stats
        st.rounds += 1
        st.recovery_ms.append(rec_ms)
        st.max_recovery_ms = max(st.max_recovery_ms, rec_ms)
        st.records_in_store = len(self.model)
        return store

    def verify(self, store, info: RoundInfo, lost: set[int] = frozenset(), query_all: bool = False) -> None:
        """Every model record and every ack present and byte-identical; nothing else but the put in flight."""
        import zlib

        found: dict[int, tuple[str, int, int, int]] = {}
        sizes: dict[int, int] = {}
        cl = store.commitlog
        by_phys = {where[3]: seq for seq, where in self.model.items()}
        # 1. walk the whole commitlog through the store's own mapped files
        files = cl.queue.files
        off = cl.min_offset
        for i, mf in enumerate(files):
            _ck(mf.file_from_offset == off, f"segment {mf.path} does not start at {off}")
            pos = 0
            limit = mf.wrote_position
            while pos < limit:
                size, magic = fmt.BLANK.unpack_from(mf.view, pos)
                if magic == fmt.BLANK_MAGIC:
                    _ck(pos + size == mf.size, f"blank at {off + pos} of size {size} does not end segment")
                    pos = mf.size
                    break
                _ck(magic == fmt.MESSAGE_MAGIC, f"bad magic {magic:#x} at {off + pos} below the write position")
                old_seq = by_phys.get(off + pos)
                if old_seq is not None and self.sizes[old_seq] == size:
                    # a record verified in an earlier round: header fields and body CRC here,
                    # full decode and body bytes for a random sample below
                    h = fmt.HEADER.unpack_from(mf.view, pos)
                    _, qid, qoff, phys = self.model[old_seq]
                    _ck(
                        h[6] == phys and h[3] == qid and h[5] == qoff, f"record {old_seq} at {phys}: header changed {h}"
                    )
                    _ck(
                        zlib.crc32(mf.view[pos + fmt.OFF_BODY : pos + fmt.OFF_BODY + h[14]]) & 0x7FFFFFFF == h[2],
                        f"bad body CRC at {phys} (record {old_seq})",
                    )
                    _ck(old_seq not in found, f"record {old_seq} appears twice")
                    found[old_seq] = self.model[old_seq]
                    sizes[old_seq] = size
                    pos += size
                    continue
                rec = fmt.decode_record(mf.view[pos : pos + size])
                _ck(rec.physical_offset == off + pos, f"record at {off + pos} says phys {rec.physical_offset}")
                _ck(zlib.crc32(rec.body) & 0x7FFFFFFF == rec.body_crc, f"bad body CRC at {off + pos}")
                seq = seq_of(rec)
                where = (rec.topic, rec.queue_id, rec.queue_offset, off + pos)
                # bodies of records verified in an earlier round: CRC here, bytes in the sample below
                if self.model.get(seq) != where or self.sizes.get(seq) != size:
                    _ck(bytes(rec.body) == body_for(seq), f"record {seq} at {off + pos}: body differs")
                _ck((rec.topic, rec.queue_id) in ROUTES, f"record {seq}: route {rec.topic}/{rec.queue_id}")
                _ck(rec.tags == tags_for(seq), f"record {seq}: tags {rec.tags!r}")
                _ck(seq not in found, f"record {seq} appears twice (at {found.get(seq)} and {off + pos})")
                found[seq] = where
                sizes[seq] = size
                pos += size
            _ck(
                pos == limit or (i < len(files) - 1 and pos == mf.size),
                f"segment {mf.path}: walk ended at {pos}, write position {limit}",
            )
            if i < len(files) - 1:
                _ck(limit == mf.size, f"segment {mf.path} is not full but is not the last")
            off = mf.file_to_offset
        # 2. the model and the acks are all there, unchanged
        for seq, where in self.model.items():
            if seq in lost:
                _ck(seq not in found, f"record {seq} should have been cut")
                continue
            _ck(found.get(seq) == where, f"record {seq} (in the store before) is {found.get(seq)}, expected {where}")
        acked: dict[int, tuple[str, int, int, int]] = {}
        for a in info.acks:
            for i in range(a.n):
                acked[a.seq + i] = (a.topic, a.queue_id, a.queue_offset + i, a.phys[i])
        for seq, where in acked.items():
            if seq in lost:
                continue
            _ck(found.get(seq) == where, f"acked record {seq} is {found.get(seq)}, acked as {where}")
        max_acked = max(acked, default=info.start_seq - 1)
        extra = [s for s in found if s not in self.model and s not in acked]
        for seq in extra:
            _ck(
                seq > max_acked and seq >= info.start_seq,
                f"unexpected record {seq} (round started at {info.start_seq}, last acked {max_acked})",
            )
        _ck(len(extra) <= 64, f"{len(extra)} unacked records survived; at most one put (64) was in flight")
        self._sizes_now = sizes
        # 3. every queue, through get_message: exactly the found records, in order, no gaps
        by_queue: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        for seq, (topic, qid, qoff, phys) in found.items():
            by_queue.setdefault((topic, qid), []).append((qoff, seq, phys))
        for key in set(by_queue) | {(t, q) for t, q, _, _ in self.model.values()}:
            expect = sorted(by_queue.get(key, []))
            _ck([q for q, _, _ in expect] == list(range(len(expect))), f"queue {key}: offsets have gaps")
            self._check_queue(store, key, expect)
        # 4. acked records by offset and by key
        cap = None if query_all else 200
        new_acked = [s for s in acked if s not in lost]
        sample = new_acked if cap is None or len(new_acked) <= cap else self.rng.sample(new_acked, cap)
        old = [s for s in self.model if s not in lost]
        sample += old if cap is None or len(old) <= cap else self.rng.sample(old, cap)
        for seq in sample:
            topic, qid, qoff, phys = found[seq]
            rec = store.look_message_by_offset(phys)
            _ck(
                rec is not None
                and bytes(rec.body) == body_for(seq)
                and rec.queue_offset == qoff
                and rec.queue_id == qid
                and rec.topic == topic,
                f"look_message_by_offset({phys}) for {seq}",
            )
            hits = store.query_message(topic, str(seq))
            _ck(
                [r.physical_offset for r in hits] == [phys],
                f"query_message({topic}, {seq}) -> {[r.physical_offset for r in hits]}, expected [{phys}]",
            )
        for seq in sample[:50]:
            topic, _, _, phys = found[seq]
            rec = store.query_by_uniq_key(topic, store.look_message_by_offset(phys).uniq_key)
            _ck(rec is not None and rec.physical_offset == phys, f"query by UNIQ_KEY of {seq}")
        # 5. adopt what is there now
        st = self.stats
        st.acked_checked += len(new_acked)
        st.recovered_unacked += len(extra)
        self.model = found
        self.sizes = sizes
        self.next_seq = max(
            self.next_seq, max(found, default=-1) + 1, info.start_seq + sum(a.n for a in info.acks) + 64
        )

    def _check_queue(self, store, key, expect) -> None:
        """Consume-queue entries of the whole queue against `expect` [(qoff, seq, phys)]; get_message
        over everything new since the last round plus a random window of the old part."""
        from shmq.store.read.lookup import GetStatus

        topic, qid = key
        n = len(expect)
        _ck(
            store.get_max_offset_in_queue(topic, qid) == n,
            f"queue {key}: max offset {store.get_max_offset_in_queue(topic, qid)}, expected {n}",
        )
        if n == 0:
            return
        cq = store.find_consume_queue(topic, qid)
        phys = []
        while len(phys) < n:
            part = cq.get_range(len(phys), n - len(phys))
            _ck(len(part) > 0, f"queue {key}: consume queue ends at {len(phys)}")
            want = [self._sizes_now[expect[len(phys) + i][1]] for i in range(len(part))]
            _ck(part["size"].tolist() == want, f"queue {key}: entry sizes differ from the records")
            phys += part["offset"].tolist()
        if phys != [p for _, _, p in expect]:
            i = next(i for i, (a, (_, _, b)) in enumerate(zip(phys, expect)) if a != b)
            raise CrashCheckError(f"queue {key}: consume-queue entry {i} -> {phys[i]}, commitlog has {expect[i]}")
        new_from = next((i for i, (_, seq, _) in enumerate(expect) if seq not in self.model), n)
        windows = [(max(0, new_from - 8), n)]
        w = self.rng.randrange(n)
        windows.append((w, min(n, w + 64)))
        for lo, hi in windows:
            offset, got = lo, []
            while offset < hi:
                res = store.get_message(topic, qid, offset, min(32, hi - offset))
                _ck(res.status == GetStatus.FOUND, f"queue {key} @ {offset}: {res.status}")
                for rec in res.messages:
                    seq = seq_of(rec)
                    if seq not in self.model:
                        _ck(bytes(rec.body) == body_for(seq), f"queue {key}: record {seq} has a bad body")
                    got.append((rec.queue_offset, seq, rec.physical_offset))
                offset = res.next_begin_offset
            exp = expect[lo:hi]
            if got != exp:
                i = next((i for i, (g, e) in enumerate(zip(got, exp)) if g != e), min(len(got), len(exp)))
                raise CrashCheckError(
                    f"queue {key}: get_message [{lo}, {hi}) gave {len(got)} records, first difference at {lo + i}"
                )
        res = store.get_message(topic, qid, n, 32)
        _ck(res.status == GetStatus.OFFSET_OVERFLOW_ONE, f"queue {key}: reading past the end gave {res.status}")

    def append_and_check(self, store) -> None:
        """Appending continues after recovery: one put, read back by queue, offset and key."""
        from shmq.store.write.result import PutStatus

        seq = self.next_seq
        topic, qid = self.rng.choice(ROUTES)
        uniq = ids.UniqKeyGenerator()
        res = store.put(
            PutRequest.of_records(
                topic, qid, [fmt.encode_message(topic, body_for(seq), queue_id=qid, properties=props_for(seq, uniq))]
            )
        )
        _ck(res.status == PutStatus.PUT_OK, f"append after recovery: {res.status}")
        qlen = sum(1 for t, q, _, _ in self.model.values() if (t, q) == (topic, qid))
        _ck(res.queue_offset == qlen, f"append after recovery got queue offset {res.queue_offset}, expected {qlen}")
        got = store.get_message(topic, qid, res.queue_offset, 1).messages
        _ck(
            len(got) == 1 and bytes(got[0].body) == body_for(seq) and got[0].physical_offset == res.wrote_offset,
            "appended record not readable",
        )
        hits = store.query_message(topic, str(seq))
        _ck([r.physical_offset for r in hits] == [res.wrote_offset], "appended record not found by key")
        self.model[seq] = (topic, qid, res.queue_offset, res.wrote_offset)
        self.sizes[seq] = res.wrote_bytes
        self.next_seq = seq + 1

    # ------------------------------------------------------------------ the standard round

    def kill_round(self) -> RoundInfo:
        """One SIGKILL round: run 50-400 ms (every 5th round: killed 0-400 ms after spawn, maybe
        in the middle of its recovery), reopen, verify, append."""
        if self.rng.random() < 0.2:
            info = self.run_child(kill_at_spawn_ms=self.rng.uniform(0, 400))
        else:
            info = self.run_child(run_ms=self.rng.uniform(50, 400))
        self.reopen_and_verify(info)
        return info


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
