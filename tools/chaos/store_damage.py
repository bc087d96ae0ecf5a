"""Store-damage fuzzing: one header field of one record of a stopped store changed, then a start.

    .venv/bin/python tools/chaos/store_damage.py --rounds 300 --dir /tmp/shmq-damage [--seed N] [--json]

A template store is written once (two topics, three queues, several commitlog segments, stopped
cleanly). Each round copies it, picks a random record and one of its 15 header fields, and
changes that field (half the rounds one flipped bit, half a random value), starts a
MessageStore on the copy (normal recovery), and reads every queue from offset 0 the way a
FIRST_OFFSET consumer does (``columns.read_batch``). It counts:

- intact: records other than the damaged one (each round), and how many of them a consumer
  read back with their queue offset and body (``survived``);
- stalls: a queue whose read raised, so a consumer could not get past that point (the records
  after it count as lost); ``stalls_at_damage`` of them raised CorruptRecordError naming the
  damaged record itself (a damaged field no check covers, met when it is read);
- silently_lost: intact records missing from a queue whose read did not stall;
- invented: a message read back that was never written (wrong body for its queue offset);
- refused: a start that failed (everything counts as lost).

The figure "intact messages that survive one flipped field" is survived / intact. Also used by
tests/store/test_store_damage.py for a short round.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from shmq.codec import record as fmt
from shmq.store.message_store import MessageStore
from shmq.store.read import columns
from shmq.store.read.reader import StoreReader
from shmq.store.write.hooks import PutRequest

CONFIG = {
    "mappedFileSizeCommitLog": 64 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 256,
    "maxHashSlotNum": 97,
    "maxIndexNum": 2048,
}
QUEUES = [("DmgA", 0), ("DmgA", 1), ("DmgB", 0)]
PER_QUEUE = 300
# (name, offset, struct code) of every header field
FIELDS = [
    (name, off, code)
    for name, off, code in (
        ("TOTALSIZE", fmt.OFF_TOTALSIZE, ">I"),
        ("MAGICCODE", fmt.OFF_MAGIC, ">I"),
        ("BODYCRC", fmt.OFF_BODYCRC, ">I"),
        ("QUEUEID", fmt.OFF_QUEUEID, ">I"),
        ("FLAG", fmt.OFF_FLAG, ">I"),
        ("QUEUEOFFSET", fmt.OFF_QUEUEOFFSET, ">Q"),
        ("PHYSICALOFFSET", fmt.OFF_PHYSICALOFFSET, ">Q"),
        ("SYSFLAG", fmt.OFF_SYSFLAG, ">I"),
        ("BORNTIMESTAMP", fmt.OFF_BORNTIMESTAMP, ">Q"),
        ("BORNHOST", fmt.OFF_BORNHOST, ">Q"),
        ("STORETIMESTAMP", fmt.OFF_STORETIMESTAMP, ">Q"),
        ("STOREHOST", fmt.OFF_STOREHOST, ">Q"),
        ("RECONSUMETIMES", fmt.OFF_RECONSUMETIMES, ">I"),
        ("PREPAREDTXOFFSET", fmt.OFF_PREPAREDTXOFFSET, ">Q"),
        ("BODYLEN", fmt.OFF_BODYLEN, ">I"),
    )
]


def body_of(topic: str, qid: int, i: int) -> bytes:
    return b"%s/%d/%05d" % (topic.encode(), qid, i) + bytes(random.Random(i).randrange(200))


@dataclass
class Written:
    """The template's records: (topic, queue id, queue offset) -> commitlog offset, in log order."""

    phys: dict[tuple[str, int, int], int] = field(default_factory=dict)


@dataclass
class Totals:
    rounds: int = 0
    intact: int = 0
    survived: int = 0
    rounds_losing: int = 0
    stalls: int = 0
    stalls_at_damage: int = 0
    silently_lost: int = 0
    invented: int = 0
    refused: int = 0
    by_field: dict[str, list[int]] = field(default_factory=dict)  # field -> [rounds, rounds losing]

    @property
    def survival(self) -> float:
        return self.survived / self.intact if self.intact else 1.0


def write_template(store_dir: str) -> Written:
    """The store every round starts from: PER_QUEUE messages per queue, in small interleaved batches."""
    written = Written()
    store = MessageStore(store_dir, CONFIG).start()
    try:
        for start in range(0, PER_QUEUE, 20):
            for topic, qid in QUEUES:
                bodies = [body_of(topic, qid, i) for i in range(start, min(start + 20, PER_QUEUE))]
                res = store.put(PutRequest(fmt.encode_batch(topic, bodies), [topic], None, qid, user_batch=True))
                for k, phys in enumerate(res.phys_offsets.tolist()):
                    written.phys[(topic, qid, res.queue_offset + k)] = phys
    finally:
        store.shutdown()
    return written


def damage(store_dir: str, phys: int, rng: random.Random) -> str:
    """Change one header field of the record at ``phys``; returns the field's name."""
    name, off, code = rng.choice(FIELDS)
    width = 4 if code == ">I" else 8
    seg = CONFIG["mappedFileSizeCommitLog"]
    path = os.path.join(store_dir, "commitlog", fmt.offset_file_name(phys - phys % seg))
    with open(path, "r+b") as f:
        f.seek(phys % seg + off)
        old = int.from_bytes(f.read(width), "big")
        new = old
        while new == old:
            new = old ^ (1 << rng.randrange(width * 8)) if rng.random() < 0.5 else rng.getrandbits(width * 8)
        f.seek(phys % seg + off)
        f.write(new.to_bytes(width, "big"))
    return name


def read_queue(store_dir: str, topic: str, qid: int, max_offset: int) -> tuple[dict[int, bytes], str | None]:
    """queue offset -> body of what a consumer reads from offset 0; and why it stalled (None: it did not)."""
    got: dict[int, bytes] = {}
    with StoreReader(store_dir) as reader:
        offset = 0
        while offset < max_offset:
            try:
                batch = columns.read_batch(reader, topic, qid, offset, 64, max_offset)
                bodies = batch.bodies()
            except Exception as e:  # noqa: BLE001 - whatever it is, a consumer cannot get past it
                return got, f"{type(e).__name__}: {e}"
            if batch.next_offset <= offset:
                return got, f"no progress at queue offset {offset}"
            for q, b in zip(batch.queue_offset.tolist(), bodies):
                got[int(q)] = bytes(b)
            offset = batch.next_offset
    return got, None


def one_round(template: str, written: Written, work: str, rng: random.Random, totals: Totals) -> None:
    store_dir = os.path.join(work, "store")
    shutil.rmtree(store_dir, ignore_errors=True)
    shutil.copytree(template, store_dir)
    victim_key = rng.choice(sorted(written.phys))
    name = damage(store_dir, written.phys[victim_key], rng)
    intact = {k for k in written.phys if k != victim_key}
    survived = 0
    try:
        store = MessageStore(store_dir, CONFIG).start()
    except Exception:  # noqa: BLE001 - a start that fails keeps nothing readable
        totals.refused += 1
    else:
        try:
            ends = {(t, q): store.get_max_offset_in_queue(t, q) for t, q in QUEUES}
        finally:
            store.shutdown()
        victim_at = f"CorruptRecordError: commitlog record at offset {written.phys[victim_key]}"
        for (topic, qid), end in ends.items():
            got, stalled = read_queue(store_dir, topic, qid, end)
            totals.stalls += stalled is not None
            totals.stalls_at_damage += stalled is not None and stalled.startswith(victim_at)
            kept = 0
            for qoff, body in got.items():
                key = (topic, qid, qoff)
                if body == body_of(topic, qid, qoff) and key in intact:
                    kept += 1
                elif key != victim_key:
                    totals.invented += 1
            survived += kept
            if stalled is None:
                totals.silently_lost += sum(1 for t, q, _ in intact if (t, q) == (topic, qid)) - kept
    totals.rounds += 1
    totals.intact += len(intact)
    totals.survived += survived
    lost = survived < len(intact)
    totals.rounds_losing += lost
    per = totals.by_field.setdefault(name, [0, 0])
    per[0] += 1
    per[1] += lost


def run(rounds: int, work: str, seed: int) -> Totals:
    rng = random.Random(seed)
    template = os.path.join(work, "template")
    shutil.rmtree(template, ignore_errors=True)
    written = write_template(template)
    totals = Totals()
    for _ in range(rounds):
        one_round(template, written, work, rng, totals)
    return totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--dir", required=True, help="work directory (created; its template/ and store/ are replaced)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", action="store_true", help="one JSON line of totals instead of the text summary")
    ap.add_argument("--verbose", action="store_true", help="show the store's log (recovery's lines per round)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.CRITICAL, format="%(levelname)s %(message)s")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    os.makedirs(args.dir, exist_ok=True)
    t0 = time.monotonic()
    totals = run(args.rounds, args.dir, seed)
    out = dict(asdict(totals), seed=seed, survival=round(totals.survival, 6), seconds=round(time.monotonic() - t0, 1))
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"seed={seed} rounds={totals.rounds} intact={totals.intact} survived={totals.survived} "
            f"({100 * totals.survival:.2f}%) rounds_losing={totals.rounds_losing} stalls={totals.stalls} "
            f"(at the damaged record: {totals.stalls_at_damage}) silently_lost={totals.silently_lost} "
            f"invented={totals.invented} refused={totals.refused} seconds={out['seconds']}"
        )
        for name, (n, lost) in sorted(totals.by_field.items()):
            print(f"  {name:<17} rounds={n:<4} losing={lost}")
    return 0 if totals.survived == totals.intact and not totals.invented and not totals.stalls else 1


if __name__ == "__main__":
    sys.exit(main())
