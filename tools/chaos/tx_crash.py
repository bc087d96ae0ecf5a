"""Broker SIGKILLs in the middle of transactions: committed messages visible exactly once,
rolled-back ones never.

    .venv/bin/python tools/chaos/tx_crash.py --rounds 60 --dir /tmp/shmq-tx-chaos

Each round: a TransactionProducer sends transactions as fast as it can (message ``seq``: the
local transaction commits, rolls back, or says UNKNOWN and leaves it to the check; the
outcome is a pure function of ``seq``, which the check uses too), the broker is SIGKILLed
20-400 ms in, at whatever point of a half, a commit or an op record it is. In about half the
rounds the log is then also cut (zeroed, as an unwritten tail is) from the message of its last
commit on: the kill between the two records of a commit's put, made on purpose because a
random kill rarely lands inside those microseconds (halves cut with it count as never
acknowledged: the cut is an earlier kill, not a lost write). The broker
is started again, a second transaction producer of the group answers the checks until every
half is settled (the check progress in config/transactionCheck.json reaches the half queue's
end), and everything ever sent is verified through a consumer: no message twice, none whose
outcome is rollback, every one whose half was acknowledged and whose outcome is commit there.
Exit status 1 on the first violation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import shmq
from shmq import Message, MessageQueue, PullConsumer, PullStatus, TransactionProducer, TransactionStatus
from shmq.codec import record as fmt
from shmq.model.system_topics import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

TOPIC = "TxChaos"
GROUP = "txg"
CONFIG = {
    "mappedFileSizeCommitLog": 4 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 4096,
    "maxHashSlotNum": 1009,
    "maxIndexNum": 40000,
    "transactionTimeOut": 150,
    "transactionCheckInterval": 50,
    "transactionCheckMax": 1000,
}


class TxCrashError(AssertionError):
    pass


def outcome(seq: int) -> TransactionStatus:
    """What message ``seq``'s transaction decides (the local transaction and the check agree)."""
    return TransactionStatus.ROLLBACK if seq % 5 == 4 else TransactionStatus.COMMIT


def local_answer(seq: int) -> TransactionStatus:
    """What the local transaction answers at once: every third leaves it to the check."""
    return TransactionStatus.UNKNOWN if seq % 3 == 2 else outcome(seq)


def check(msg: shmq.MessageExt) -> TransactionStatus:
    return outcome(int(msg.keys or "-1"))


@dataclass
class Totals:
    rounds: int = 0
    sent: int = 0
    acked: int = 0
    committed_visible: int = 0
    cut_commits: int = 0
    repairs_logged: int = 0
    kill_ms: list[float] = field(default_factory=list)


def _records_of_last_segment(store_dir: str) -> tuple[str, list[tuple[int, fmt.StoredRecord]]]:
    """(segment path, [(position, record)]) of the newest commitlog segment."""
    folder = os.path.join(store_dir, "commitlog")
    names = (
        [n for n in os.listdir(folder) if fmt.parse_offset_file_name(n) is not None] if os.path.isdir(folder) else []
    )
    if not names:
        return "", []
    name = max(names)
    path = os.path.join(folder, name)
    with open(path, "rb") as f:
        buf = f.read()
    out = []
    for status, pos, size in fmt.scan_segment(buf, 0, len(buf), fmt.parse_offset_file_name(name) or 0):
        if status == fmt.RECORD_OK:
            out.append((pos, fmt.decode_record(buf[pos : pos + size])))
    return path, out


def cut_at_last_commit(store_dir: str) -> set[int] | None:
    """Cut the log (zero it, as an unwritten tail is) from the message of its last commit on, as a
    kill between that commit's op record and its message leaves it; the seq of the halves cut
    with it (they were never stored, in this crash), None if the newest segment holds no commit."""
    path, recs = _records_of_last_segment(store_dir)
    for i in range(len(recs) - 1, 0, -1):
        op, msg = recs[i - 1][1], recs[i][1]
        if (
            op.topic == TRANS_OP_HALF_TOPIC
            and msg.sysflag & fmt.TRANSACTION_MASK == fmt.TRANSACTION_COMMIT
            and msg.prepared_tx_offset
        ):
            break
    else:
        return None
    pos = recs[i][0]
    end = recs[-1][0] + recs[-1][1].total_size
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(b"\0" * (end - pos))
    return {int(r.keys[0]) for _, r in recs[i:] if r.topic == TRANS_HALF_TOPIC and r.keys}


class TxCrashHarness:
    """One store, one broker name; ``round`` kills, restarts, settles and verifies."""

    def __init__(self, store_dir: str, name: str, seed: int) -> None:
        self.store_dir = store_dir
        self.name = name
        self.rng = random.Random(seed)
        self.next_seq = 0
        self.acked: set[int] = set()  # seq of the halves stored with SEND_OK
        self.totals = Totals()
        self.broker: shmq.Broker | None = None

    def start(self) -> None:
        self.broker = shmq.Broker(self.store_dir, self.name, CONFIG)

    def close(self) -> None:
        if self.broker is not None:
            self.broker.stop()
            self.broker = None

    def round(self) -> None:
        assert self.broker is not None
        stop = threading.Event()
        sender = threading.Thread(target=self._send_until, args=(stop,), daemon=True)
        sender.start()
        kill_ms = self.rng.uniform(20, 400)
        time.sleep(kill_ms / 1000)
        self.broker.kill()
        stop.set()
        sender.join(10)
        if self.rng.random() < 0.5:
            lost = cut_at_last_commit(self.store_dir)
            if lost is not None:
                self.acked -= lost
                self.totals.cut_commits += 1
        self.broker = shmq.Broker(self.store_dir, self.name, CONFIG)
        log_text = self.broker.log()
        self.totals.repairs_logged += log_text.count("cut off by a crash after its op record")
        with TransactionProducer(GROUP, broker=self.name, check=check):
            self._wait_settled()
        self.verify()
        self.totals.rounds += 1
        self.totals.kill_ms.append(kill_ms)

    def _send_until(self, stop: threading.Event) -> None:
        try:
            tp = TransactionProducer(GROUP, broker=self.name, check=check, send_msg_timeout=1.0).start()
        except shmq.ShmqError:
            return
        try:
            while not stop.is_set():
                seq = self.next_seq
                self.next_seq += 1
                self.totals.sent += 1
                try:
                    r = tp.send_in_transaction(
                        Message(TOPIC, b"tx-%d" % seq, keys=str(seq)), lambda m, a: local_answer(a), arg=seq
                    )
                except (shmq.ShmqError, TimeoutError):
                    return  # the broker is gone: its half may or may not be stored
                if r.status is shmq.SendStatus.SEND_OK:
                    self.acked.add(seq)
                    self.totals.acked += 1
        finally:
            tp.shutdown()

    def _wait_settled(self, timeout: float = 30.0) -> None:
        """Until the check progress covers the whole half queue."""
        path = os.path.join(self.store_dir, "config", "transactionCheck.json")
        deadline = time.monotonic() + timeout
        with PullConsumer("tx-chaos-watch", broker=self.name) as c:
            mq = MessageQueue(TRANS_HALF_TOPIC, self.name, 0)
            while time.monotonic() < deadline:
                hi = c.max_offset(mq)
                try:
                    with open(path) as f:
                        done = json.load(f)["halfOffset"]
                except FileNotFoundError:
                    done = 0  # nothing was ever settled
                except (OSError, ValueError, KeyError):
                    done = -1
                if done >= hi:
                    return
                time.sleep(0.02)
        raise TxCrashError(f"halves still open after {timeout} s: progress {done}, half queue end {hi}")

    def visible(self) -> list[int]:
        """The seq of every message a consumer of the topic sees, in queue order."""
        seen: list[int] = []
        with PullConsumer("tx-chaos-check", broker=self.name) as c:
            for mq in c.fetch_queues(TOPIC):
                offset = c.min_offset(mq)
                while True:
                    r = c.pull(mq, "*", offset=offset, max_nums=256, timeout=0)
                    if r.status is not PullStatus.FOUND and r.status is not PullStatus.NO_MATCHED_MSG:
                        break
                    seen += [int(m.keys or "-1") for m in r.messages]
                    offset = r.next_begin_offset
        return seen

    def verify(self) -> None:
        seen = self.visible()
        dup = [s for s, n in Counter(seen).items() if n > 1]
        if dup:
            raise TxCrashError(f"messages visible twice: {sorted(dup)[:10]}")
        rolled = [s for s in seen if outcome(s) is not TransactionStatus.COMMIT]
        if rolled:
            raise TxCrashError(f"rolled-back messages visible: {rolled[:10]}")
        seen_set = set(seen)
        missing = sorted(s for s in self.acked if outcome(s) is TransactionStatus.COMMIT and s not in seen_set)
        if missing:
            raise TxCrashError(f"committed messages missing: {missing[:10]} (of {len(missing)})")
        self.totals.committed_visible = len(seen)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--dir", required=True, help="work directory (its store/ is replaced)")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    store_dir = os.path.join(args.dir, "store")
    if os.path.exists(store_dir):
        import shutil

        shutil.rmtree(store_dir)
    os.makedirs(args.dir, exist_ok=True)
    print(f"seed={seed} rounds={args.rounds} dir={args.dir}", flush=True)
    h = TxCrashHarness(store_dir, f"txchaos{os.getpid()}", seed)
    t0 = time.monotonic()
    h.start()
    try:
        for r in range(args.rounds):
            h.round()
            t = h.totals
            if (r + 1) % 10 == 0:
                print(
                    f"round {r + 1}: sent {t.sent}, acked {t.acked}, visible {t.committed_visible}, "
                    f"commits cut {t.cut_commits}, repairs logged {t.repairs_logged}",
                    flush=True,
                )
    except TxCrashError as e:
        print(f"VIOLATION in round {h.totals.rounds + 1} (seed {seed}): {e}", flush=True)
        return 1
    finally:
        h.close()
    t = h.totals
    print(
        f"ok: {t.rounds} rounds in {time.monotonic() - t0:.0f} s; {t.sent} transactions sent, {t.acked} halves "
        f"acknowledged, {t.committed_visible} committed messages visible exactly once, none rolled back; "
        f"commits cut after their op record: {t.cut_commits}, repaired at start: {t.repairs_logged}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
