"""ProduceAccumulator on its own: when batches go out, in what order, and which go together."""

import threading
import time

import pytest

from shmq.client.producer.accumulator import MIN_BATCH, RECORD_OVERHEAD, ProduceAccumulator, settle
from shmq.errors import ShmqError
from shmq.model.message import Message


class Recorder:
    def __init__(self) -> None:
        self.batches: list[tuple[str, int, list[bytes]]] = []
        self.flushes: list[int] = []  # groups handed over per flush call
        self.sent = threading.Event()

    def __call__(self, groups) -> None:
        self.flushes.append(len(groups))
        for topic, qid, msgs, _futures in groups:
            self.batches.append((topic, qid, [m.body for m in msgs]))
        self.sent.set()


def _wait_batches(rec: Recorder, n: int) -> None:
    deadline = time.monotonic() + 5
    while len(rec.batches) < n and time.monotonic() < deadline:
        time.sleep(0.001)
    assert len(rec.batches) >= n


def test_a_full_batch_goes_at_once_in_order():
    rec = Recorder()
    acc = ProduceAccumulator(rec, batch_max_delay=60.0, batch_max_bytes=10 * (1 + RECORD_OVERHEAD))
    for i in range(25):
        acc.add(Message("T", b"%d" % i), 1, oneway=True)
    assert [len(b) for _, _, b in rec.batches] == [10, 10]
    acc.close()  # sends the last 5 without waiting for the delay
    assert [b for _, _, b in rec.batches] == [[b"%d" % i for i in range(k, min(k + 10, 25))] for k in (0, 10, 20)]


def test_the_delay_sends_what_waits_together_and_queues_are_kept_apart():
    rec = Recorder()
    acc = ProduceAccumulator(rec, batch_max_delay=0.2, batch_max_bytes=1 << 20)
    for i in range(MIN_BATCH):
        acc.add(Message("A", b"a%d" % i), -1, oneway=True)
        acc.add(Message("B", b"b%d" % i), 2, oneway=True)
    _wait_batches(rec, 2)
    assert sorted((t, q, len(b)) for t, q, b in rec.batches) == [("A", -1, MIN_BATCH), ("B", 2, MIN_BATCH)]
    assert rec.flushes == [2]  # one hand-over: the producer writes them back to back
    acc.close()


def test_small_groups_of_many_queues_go_in_one_flush():
    """Many topics, each sent rarely: the groups stay small, and all of them go together."""
    rec = Recorder()
    acc = ProduceAccumulator(rec, batch_max_delay=0.5, batch_max_bytes=1 << 20)  # ample on a loaded machine
    for i in range(300):
        acc.add(Message(f"Rare{i % 100}", b"%d" % i), -1, oneway=True)
    _wait_batches(rec, 100)
    assert rec.flushes == [100]
    assert [b for t, _, b in rec.batches if t == "Rare7"] == [[b"7", b"107", b"207"]]
    acc.close()


def test_waiting_on_a_pending_send_sends_its_batch_now():
    rec = Recorder()
    acc = ProduceAccumulator(rec, batch_max_delay=60.0, batch_max_bytes=1 << 20)
    futures = [acc.add(Message("T", b"%d" % i), 0) for i in range(3)]
    acc.add(Message("U", b"u"), 0, oneway=True)
    assert rec.batches == []
    with pytest.raises(TimeoutError):  # the recorder never answers; the point is what was sent
        futures[1].result(0.01)
    assert rec.batches == [("T", 0, [b"0", b"1", b"2"]), ("U", 0, [b"u"])]  # what waited went along
    with pytest.raises(TimeoutError):
        futures[2].exception(0.01)
    assert len(rec.batches) == 2  # sent once
    acc.close()


def test_closed_accumulator_refuses():
    acc = ProduceAccumulator(Recorder(), batch_max_delay=0.001, batch_max_bytes=1 << 20)
    acc.close()
    with pytest.raises(ShmqError):
        acc.add(Message("T", b"x"), 0, oneway=True)


def test_settle_finishes_a_batch_as_futures_do():
    """One lock and one notify for a batch, and still every Future promise: results in order,
    callbacks run, concurrent.futures.wait wakes, a cancelled future stays cancelled."""
    import concurrent.futures as cf

    acc = ProduceAccumulator(lambda groups: None, batch_max_delay=60.0, batch_max_bytes=1 << 20)
    futures = [acc.add(Message("T", b"%d" % i), 0) for i in range(4)]
    seen = []
    futures[0].add_done_callback(lambda f: seen.append(f.result()))
    assert futures[2].cancel()
    acc.flush_all()  # the hand-over: futures go RUNNING, as the producer's flush finds them
    waiter = threading.Thread(target=lambda: seen.append(len(cf.wait(futures[:2], timeout=5).done)))
    waiter.start()
    time.sleep(0.05)
    settle([*futures, None], ["r0", "r1", "r2", "r3", "none"], None)
    waiter.join(5)
    assert [f.result(0) for f in (futures[0], futures[1], futures[3])] == ["r0", "r1", "r3"]
    assert futures[2].cancelled() and sorted(map(str, seen)) == ["2", "r0"]
    failed = [acc.add(Message("U", b"x"), 0) for _ in range(2)]
    acc.flush_all()
    settle(failed, None, ShmqError("broker gone"))
    assert all(isinstance(f.exception(0), ShmqError) for f in failed)
    with pytest.raises(ShmqError):
        failed[0].result(0)
    acc.close()


def test_settle_wakes_waiters_of_every_hand_over():
    """Futures of different hand-overs have different Conditions; settling them together must
    wake a thread waiting on any of them."""
    acc = ProduceAccumulator(lambda groups: None, batch_max_delay=60.0, batch_max_bytes=1 << 20)
    futures = []
    for t in ("A", "B", "C"):
        futures.append(acc.add(Message(t, b"x"), 0))
        acc.flush_all()
    assert len({id(f._condition) for f in futures}) == 3
    got = []
    waiters = [threading.Thread(target=lambda f=f: got.append(f.exception(5) or f.result(0))) for f in futures[1:]]
    for w in waiters:
        w.start()
    time.sleep(0.05)
    settle(futures, ["a", "b", ShmqError("refused")], None)
    for w in waiters:
        w.join(5)
    assert sorted(map(str, got)) == ["b", "refused"] and futures[0].result(0) == "a"
    acc.close()


def test_cancel_before_the_hand_over_withdraws_the_message():
    """Regression (issue 9 A3): cancel() returned True and the message was sent anyway."""
    import concurrent.futures as cf

    rec = Recorder()
    acc = ProduceAccumulator(rec, batch_max_delay=60.0, batch_max_bytes=1 << 20)
    futures = [acc.add(Message("T", b"%d" % i), 0) for i in range(3)]
    assert futures[1].cancel() and futures[1].cancelled()
    assert not futures[0].running()
    acc.flush_all()
    assert rec.batches == [("T", 0, [b"0", b"2"])]  # the cancelled message never left
    assert futures[0].running() and not futures[0].cancel()  # handed over: too late to cancel
    done, not_done = cf.wait(futures, timeout=0)  # wait() learns of the cancel at the hand-over
    assert done == {futures[1]} and not_done == {futures[0], futures[2]}
    with pytest.raises(cf.CancelledError):
        futures[1].result(0)
    settle([futures[0], futures[2]], ["r0", "r2"], None)
    assert [f.result(0) for f in cf.as_completed([futures[0], futures[2]], timeout=1)] != []
    assert (futures[0].result(0), futures[2].result(0)) == ("r0", "r2")
    acc.close()


def test_a_batch_whose_every_message_was_cancelled_is_not_sent():
    rec = Recorder()
    acc = ProduceAccumulator(rec, batch_max_delay=60.0, batch_max_bytes=1 << 20)
    f = acc.add(Message("T", b"x"), 0)
    assert f.cancel()
    acc.close()
    assert rec.batches == [] and rec.flushes == []
