"""POP under faults and bad input, with real broker and worker processes: a broker SIGKILLed
under a steady load of 4 workers, acks of receipts that are not (or no longer) the consumer's,
10,000 unacked messages of one consumer and a consumer that never acks. No timing is asserted;
waits give up after generous deadlines. (A worker SIGKILLed holding messages and the argument
checks are in tests/process/consumers/test_simple.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

import shmq
from shmq import MessageBatch, Producer, ReceiptError, SendStatus
from shmq.errors import BadArgumentError, BrokerBusyError, ShmqError
from tests.pulling import read_topic
from tests.waiting import wait_for


def _send(broker: str, topic: str, n: int, prefix: str = "m") -> None:
    """``n`` messages with bodies ``<prefix><i>``, in batches."""
    with Producer("pop-faults", broker=broker) as p:
        for start in range(0, n, 100):
            p.send_batch(MessageBatch(topic, [f"{prefix}{i}".encode() for i in range(start, min(n, start + 100))]))


def _spawn(broker: str, group: str, topic: str, out: Path, **opts: object) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tests.process.pop.worker", broker, group, topic, str(out), json.dumps(opts)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def _expect(proc: subprocess.Popen, line: str) -> None:
    got = proc.stdout.readline().strip()
    assert got == line, f"worker said {got!r}, exit status {proc.poll()}"


def _stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
    finally:
        proc.stdout.close()


def _rows(path: Path, start: int = 0) -> list[list[str]]:
    """The worker's lines (``got <body> <attempt>`` / ``ack <body>``) from byte ``start`` on."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return [line.decode().split() for line in f if line.endswith(b"\n")]
    except FileNotFoundError:
        return []


def _acked(paths: list[Path]) -> set[str]:
    return {r[1] for p in paths for r in _rows(p) if r[0] == "ack"}


def _group_done(adm: shmq.Admin, group: str) -> bool:
    """Every queue of ``group`` (its retry topic's too, once it has one) committed to its end:
    nothing of it is in flight or waiting on the broker."""
    progress = adm.consumer_progress(group)
    retry = f"%RETRY%{group}"
    has_retry = retry in adm.topics()
    return progress.lag == 0 and (not has_retry or any(q.topic == retry for q in progress.queues))


def _one_line(e: BaseException) -> str:
    """The error's message, checked to be what a user should see: one line, no Python internals."""
    text = str(e)
    assert "\n" not in text and "Traceback" not in text and not text.startswith(type(e).__name__), text
    return text


class Sender:
    """A thread sending jobs ``m<i>`` in batches of 20 until stopped; ``stored`` holds the bodies
    of every batch the broker answered SEND_OK (a batch cut by the broker's death may be stored
    or not: it is not counted)."""

    def __init__(self, broker: str, topic: str) -> None:
        self.stored: list[str] = []
        self.stopping = threading.Event()
        self.producer = Producer("pop-load", broker=broker, send_msg_timeout=10).start()
        self.topic = topic
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            bodies = [f"m{i}" for i in range(n, n + 20)]
            n += 20
            try:
                batch = MessageBatch(self.topic, [b.encode() for b in bodies])
                if self.producer.send_batch(batch).status is SendStatus.SEND_OK:
                    self.stored += bodies
            except ShmqError:
                time.sleep(0.05)  # the broker is gone: the producer attaches to the next one
            time.sleep(0.002)  # a steady load, not a flood: the workers keep up and hold jobs in flight

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)
        self.producer.shutdown()


def test_broker_sigkill_under_four_workers_no_ack_is_lost_and_every_job_is_acked_in_the_end(
    store_dir, broker_name, config, tmp_path
) -> None:
    """Under a steady load, acks answered before the kill are durable (those jobs are never
    handed out again); what was in flight comes back after the restart on the same store, and
    in the end every job stored is acked by someone. The redeliveries are counted and printed
    (run with -s to see them)."""
    outs = [tmp_path / f"w{i}" for i in range(4)]
    broker = shmq.Broker(store_dir, broker_name, config)
    workers: list[subprocess.Popen] = []
    sender = None
    try:
        _send(broker_name, "Jobs", 1, prefix="first")  # the topic, before the workers subscribe
        workers = [_spawn(broker_name, "wg", "Jobs", out, invisible=5, busy=0.02) for out in outs]
        for w in workers:
            _expect(w, "ready")
        sender = Sender(broker_name, "Jobs")
        assert wait_for(lambda: len(_acked(outs)) >= 1_000, 120), "the workers acked too little before the kill"
        broker.kill()
        time.sleep(0.5)  # a worker answered just before the kill writes its ack line now
        sizes = [os.path.getsize(o) for o in outs]
        acked_before, got_before = _acked(outs), {r[1] for o in outs for r in _rows(o) if r[0] == "got"}
        broker = shmq.Broker(store_dir, broker_name, config)
        stored = len(sender.stored)
        assert wait_for(lambda: len(sender.stored) >= stored + 1_000, 120), "the producer did not send again"
        sender.stop()
        missing = lambda: set(sender.stored) - _acked(outs)  # noqa: E731
        # an ack the broker took but could not answer before it died is settled without the worker
        # knowing: such a job is never handed out again, and the group's progress shows it done
        unanswered = lambda: {r[1] for o in outs for r in _rows(o) if r[0] == "unanswered"}  # noqa: E731
        adm = shmq.Admin(broker_name)
        settled = lambda: missing() <= unanswered() and _group_done(adm, "wg")  # noqa: E731
        assert wait_for(settled, 180), (
            f"{len(missing())} stored jobs never acked, {len(missing() - unanswered())} of them with no ack "
            f"sent; progress of wg: {adm.consumer_progress('wg')}"
        )
    finally:
        if sender:
            sender.stop()
        for w in workers:
            _stop(w)
        broker.stop()
    again = [r[1] for o, size in zip(outs, sizes) for r in _rows(o, size) if r[0] == "got" and r[1] in acked_before]
    assert not again, f"{len(again)} jobs acked before the kill were handed out again: {again[:5]}"
    got = Counter(r[1] for o in outs for r in _rows(o) if r[0] == "got" and r[1] != "first0")
    print(
        f"\nbroker SIGKILL under 4 POP workers: {len(sender.stored):,} jobs stored, {len(acked_before):,} acked and "
        f"{len(got_before - acked_before):,} in flight at the kill; {sum(got.values()) - len(got):,} redeliveries "
        f"({sum(1 for c in got.values() if c > 1):,} jobs more than once)"
    )


@pytest.fixture
def consumer(store_dir, broker_name, config):
    """A broker and a SimpleConsumer of group ``wg`` on ``Jobs`` (it gets ``jobs`` messages)."""
    with shmq.Broker(store_dir, broker_name, config) as broker:
        _send(broker_name, "Jobs", 5)
        with shmq.SimpleConsumer("wg", broker=broker_name, subscriptions={"Jobs": "*"}, await_duration=1.0) as sc:
            yield broker, sc


def test_receive_refuses_a_nan_invisible_time_and_goes_on(consumer) -> None:
    """NaN passes neither "more than 0" nor "at most 12 h" as a comparison: refused in one line
    before anything is sent, and the consumer still works afterwards (the other bad arguments:
    tests/process/consumers/test_simple.py)."""
    _, sc = consumer
    with pytest.raises(BadArgumentError) as e:
        sc.receive(1, float("nan"))
    _one_line(e.value)
    assert len(sc.receive(5, 10.0)) == 5


def test_acking_twice_says_it_was_acked_already(consumer) -> None:
    """A receipt already settled: refused with one line; the other acks are unaffected."""
    _, sc = consumer
    msgs = sc.receive(5, 30.0)
    sc.ack(msgs[0])
    with pytest.raises(ReceiptError) as e:
        sc.ack(msgs[0])
    assert "acked already" in _one_line(e.value)
    for m in msgs[1:]:
        sc.ack(m)


def test_a_receipt_of_another_group_is_refused(consumer, broker_name) -> None:
    """A consumer of group ``other`` cannot settle what ``wg`` was handed out; ``wg`` still can."""
    _, sc = consumer
    msgs = sc.receive(5, 30.0)
    with shmq.SimpleConsumer("other", broker=broker_name, subscriptions={"Jobs": "*"}) as foreign:
        with pytest.raises(ReceiptError) as e:
            foreign.ack(msgs[0])
        _one_line(e.value)
    for m in msgs:
        sc.ack(m)


def test_a_receipt_of_an_earlier_delivery_is_stale(store_dir, broker_name, config) -> None:
    """FIFO: a job not acked in time is handed out again in place; the first receipt is then
    stale (refused, saying so) and the new one settles it."""
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, "Jobs", 1)
        with shmq.SimpleConsumer(
            "fg", broker=broker_name, subscriptions={"Jobs": "*"}, await_duration=1.0, fifo=True
        ) as sc:
            first = sc.receive(1, 1.0)[0]
            again: list = []
            assert wait_for(lambda: again.extend(sc.receive(1, 30.0)) or again, 60, step=0)
            assert again[0].body == first.body and again[0].delivery_attempt == 2
            with pytest.raises(ReceiptError) as e:
                sc.ack(first)
            assert "stale" in _one_line(e.value).lower()
            sc.ack(again[0])


def test_ten_thousand_unacked_messages_then_the_cap_answers_one_line_and_memory_stays_bounded(
    store_dir, broker_name, config
) -> None:
    """One consumer receives without acking until the broker refuses (popMaxInflightPerClient,
    10,000): a one-line BrokerBusyError naming the setting, every further receive refused the same
    way, the broker up and its memory bounded; acking what it holds lets it receive again."""
    n = 12_000
    with shmq.Broker(store_dir, broker_name, config) as broker:
        _send(broker_name, "Jobs", n)
        rss = psutil.Process(broker.pid).memory_info().rss
        held: list = []
        with shmq.SimpleConsumer("wg", broker=broker_name, subscriptions={"Jobs": "*"}, await_duration=1.0) as sc:
            with pytest.raises(BrokerBusyError) as e:
                for _ in range(n // 1024 + 2):
                    held += sc.receive(1024, 600.0)
            assert "popMaxInflightPerClient" in _one_line(e.value)
            assert 10_000 <= len(held) < n, len(held)
            for _ in range(20):
                with pytest.raises(BrokerBusyError):
                    sc.receive(1024, 600.0)
            assert broker.process.poll() is None
            grown = psutil.Process(broker.pid).memory_info().rss - rss
            assert grown < 64 << 20, f"the broker grew {grown >> 20} MiB holding 10,000 receipts"
            for f in [sc.ack_async(m) for m in held]:
                f.result(60)
            rest: list = []
            assert wait_for(lambda: rest.extend(sc.receive(1024, 600.0)) or len(rest) == n - len(held), 60, step=0)


def test_a_consumer_that_never_acks_sends_its_jobs_to_the_dlq(store_dir, broker_name, config) -> None:
    """Never acked: each job is handed out max_delivery_attempts (2) times, then stored in
    %DLQ%<group> and handed out no more, so the broker holds nothing of it."""
    with shmq.Broker(store_dir, broker_name, config):
        _send(broker_name, "Jobs", 20, prefix="n")
        seen: Counter = Counter()
        with shmq.SimpleConsumer(
            "ng", broker=broker_name, subscriptions={"Jobs": "*"}, await_duration=0.5, max_delivery_attempts=2
        ) as sc:

            def dead() -> bool:
                seen.update((m.body.decode(), m.delivery_attempt) for m in sc.receive(32, 1.0))
                return len(read_topic(broker_name, "%DLQ%ng")) == 20

            assert wait_for(dead, 90, step=0), f"{len(read_topic(broker_name, '%DLQ%ng'))} of 20 in the DLQ"
            time.sleep(2.0)  # past one more invisible time: nothing comes again
            late = sc.receive(32, 1.0)
        assert not late, [m.body for m in late]
        assert {b.body.decode() for b in read_topic(broker_name, "%DLQ%ng")} == {f"n{i}" for i in range(20)}
        assert set(seen.values()) == {1} and {a for _, a in seen} == {1, 2}, seen
