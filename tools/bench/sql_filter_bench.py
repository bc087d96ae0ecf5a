"""SQL92 filter benchmark: the filter bitmap (enableCalcFilterBitMap) against exact evaluation.

A backlog of N messages (100-byte bodies, properties ``a`` = 0..99 and ``region``) is stored
with a group subscribed by ``shmq.sql("a = 7 AND region = 'eu'")`` (1 % match). Figures:

- consume: a PullConsumer reads every queue from offset 0 with the filter; with the group
  whose bitmap the broker computed (skips the other 99 % unread) and with a group that has
  none (every message's properties read and evaluated, over columns); messages scanned / s.
- put: ``send_batch`` of 256 messages, broker put rate with the bitmap on and the SQL group
  joined (the filter evaluated at dispatch) and with it off.

Each figure is the median of ``--rounds`` runs on a fresh store.

    .venv/bin/python tools/bench/sql_filter_bench.py [--messages 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import shmq
from shmq import ConsumeResult, Message, Producer, PullConsumer, PullStatus, PushConsumer

TOPIC = "SqlBench"
EXPR = "a = 7 AND region = 'eu'"
CONFIG = {"mappedFileSizeCommitLog": 256 * 1024 * 1024, "defaultTopicQueueNums": 4}
BATCH = 256


def _messages(n: int) -> list[list[Message]]:
    body = b"x" * 100
    msgs = [
        Message(
            TOPIC,
            body,
            tags="T",
            properties={"a": str(i % 100), "region": "eu" if i % 2 else "us", "kind": f"k{i % 5}"},
        )
        for i in range(n)
    ]
    return [msgs[i : i + BATCH] for i in range(0, n, BATCH)]


def _scan(name: str, group: str) -> tuple[float, int]:
    """Seconds to read every queue through the filter, and the messages found."""
    found = 0
    with PullConsumer(group, broker=name) as pc:
        t = time.perf_counter()
        for mq in pc.fetch_queues(TOPIC):
            offset = 0
            while True:
                r = pc.pull_batch(mq, shmq.sql(EXPR), offset=offset, max_nums=4096, timeout=0)
                if r.status is PullStatus.NO_NEW_MSG:
                    break
                found += len(r.batch) if r.batch is not None else 0
                offset = r.next_begin_offset
        return time.perf_counter() - t, found


def run(n: int, bitmap: bool, batches: list[list[Message]]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        name = f"sqlbench{int(time.time() * 1000) % 100000}"
        with (
            shmq.Broker(d + "/store", name, dict(CONFIG, enableCalcFilterBitMap=bitmap)),
            Producer("pg", broker=name) as p,
        ):
            p.send(Message(TOPIC, b"warm"))
            # the group joins first: its filter reaches the broker (and, bitmap on, the dispatcher);
            # it consumes the 1 % that match while the backlog is written
            c = PushConsumer("sqlg", broker=name)
            c.subscribe(TOPIC, shmq.sql(EXPR))
            c.register_listener(lambda msgs, ctx: ConsumeResult.SUCCESS)
            c.start()
            time.sleep(0.5)
            t = time.perf_counter()
            for b in batches:
                p.send_batch(b)
            put_s = time.perf_counter() - t
            c.shutdown()
            scan_s, found = _scan(name, "sqlg")
            exact_s, found2 = _scan(name, "other")
            assert found == found2 == n // 100, (found, found2)
    return {"put": n / put_s, "consume_bitmap_group": n / scan_s, "consume_exact": n / exact_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    batches = _messages(args.messages)
    for bitmap in (False, True):
        runs = [run(args.messages, bitmap, batches) for _ in range(args.rounds)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(
            f"enableCalcFilterBitMap={str(bitmap).lower():5s} put {med['put']:>10,.0f} msg/s   "
            f"consume (group with bitmap) {med['consume_bitmap_group']:>12,.0f} msg/s   "
            f"consume (exact) {med['consume_exact']:>10,.0f} msg/s   (median of {args.rounds}, "
            f"{args.messages:,} messages, 1 % match)"
        )


if __name__ == "__main__":
    main()
