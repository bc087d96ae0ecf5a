"""POP against a real broker process, spoken in frames: after a SIGKILL of the broker nothing
acked comes back, everything unacked comes back after its invisible time, and nothing sent is
lost. (Workers that die, and a broker killed under four workers: tests/process/consumers/test_simple.py
and tests/process/pop/test_pop_faults.py.)"""

from __future__ import annotations

import os
import signal
import time

import shmq
from shmq import Message, Producer
from shmq.codec import pop_frames as F
from shmq.codec import record as fmt
from shmq.store.read.reader import CommitLogReader

from .rawclient import RawClient

_req = iter(range(1, 1 << 40))


class Worker:
    """A POP member of group wg speaking frames, reading bodies from the store's files."""

    def __init__(self, broker_name: str, store_dir: str) -> None:
        self.c = RawClient(broker_name)
        reply = self.c.admin("join_group", group="wg", model="POP", subscriptions={"Jobs": "*"})
        assert reply.ok, reply.body
        self.log = CommitLogReader(store_dir)

    def answer(self, want: int, timeout: float = 30.0) -> memoryview:
        deadline = time.monotonic() + timeout
        ring = self.c.channel.responses
        while time.monotonic() < deadline:
            frame = ring.read()
            if frame is not None:
                kind, view = frame
                data = memoryview(bytes(view))
                ring.release()
                assert kind == want, (kind, bytes(data[:200]))
                return data
            time.sleep(0.001)
        raise AssertionError(f"no answer of kind {want} in {timeout} s")

    def pop(self, n: int, invisible_ms: int) -> tuple[F.PopResult, list[bytes]]:
        self.c.write(F.POP, F.encode_pop(next(_req), time.monotonic_ns(), "wg", invisible_ms, 0, n))
        r = F.decode_pop_result(self.answer(F.POP_RESULT))
        self.log.refresh()
        out = []
        for off, size in zip(r.commitlog_offsets.tolist(), r.sizes.tolist()):
            raw = self.log.data(off, size)
            assert raw is not None
            out.append(bytes(fmt.decode_record(raw).body))
        return r, out

    def ack(self, r: F.PopResult, rows: list[int]) -> F.ReceiptResult:
        cols = (r.topic_idx[rows], r.queue_ids[rows], r.queue_offsets[rows], r.tokens[rows])
        self.c.write(F.ACK, F.encode_receipts(next(_req), time.monotonic_ns(), "wg", r.topics, *cols))
        return F.decode_receipt_result(self.answer(F.RECEIPT_RESULT))

    def close(self, detach: bool = True) -> None:
        self.log.close()
        self.c.close(detach)


def test_after_a_broker_sigkill_acked_stay_acked_and_nothing_is_lost(store_dir, broker_name, config):
    sent = {b"job-%d" % i for i in range(200)}
    broker = shmq.Broker(store_dir, broker_name, config)
    try:
        with Producer("pg", broker=broker_name) as p:
            for body in sorted(sent):
                p.send(Message("Jobs", body))
        a, b = Worker(broker_name, store_dir), Worker(broker_name, store_dir)
        ra, got_a = a.pop(40, 4000)  # long enough for the acks to come first on a loaded machine
        rb, got_b = b.pop(40, 4000)
        assert len(got_a) == len(got_b) == 40 and not set(got_a) & set(got_b), "one holder at a time"
        assert a.ack(ra, list(range(40))).statuses.tolist() == [F.RECEIPT_OK] * 40
        assert b.ack(rb, list(range(15))).statuses.tolist() == [F.RECEIPT_OK] * 15
        acked = set(got_a) | set(got_b[:15])
        os.kill(broker.pid, signal.SIGKILL)  # right after the acks were answered
        broker.process.wait()
        a.close(detach=False)  # the broker is gone
        b.close(detach=False)
    finally:
        broker.stop()
    with shmq.Broker(store_dir, broker_name, config):
        w = Worker(broker_name, store_dir)
        try:
            seen: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(set(seen)) < len(sent - acked) and time.monotonic() < deadline:
                r, got = w.pop(64, 60_000)
                if got:
                    seen += got
                    assert w.ack(r, list(range(len(got)))).statuses.tolist() == [F.RECEIPT_OK] * len(got)
                else:
                    time.sleep(0.05)
            assert not acked & set(seen), "an acked message came back"
            assert set(seen) == sent - acked, "every message not acked came (the unacked after their invisible time)"
            assert len(seen) == len(set(seen)), "each once"
        finally:
            w.close()
