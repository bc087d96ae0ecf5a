"""shmq through its public API (DESIGN.md section 5): ``shmq.Broker`` spawns the broker,
``Producer.send_async`` (per-message API, a window of sends in flight) or ``send_batch_async``
of a ``MessageBatch`` (batch API), ``PullConsumer.pull`` + ``commit`` on the consumer side, ``Producer.send`` for
round trips, and a second broker with ``flushDiskType=SYNC_FLUSH`` for durability.

Until the client API has landed, ``install()`` says which part is missing and every shmq
row of the report reads "not available yet": no number is made up."""

from __future__ import annotations

import collections
import os
import shutil
import tempfile
import time

import numpy as np

from ..core import (
    POLL,
    PUSH_RATE,
    PUSH_SETTLE_S,
    System,
    body,
    durable_result,
    paced_stamped,
    percentiles,
    run_push,
    run_roles,
    stamp_age,
    timed_loop,
)
from ..install import say
from .shmqha import ReplicatedPair, replicated_sender  # noqa: F401  (the sender runs from this module)

WINDOW = 256
BATCH_WINDOW = 4  # batches in flight (send_batch_async), like the other peers' pipelines
PULL_NUMS = 256  # messages per pull: the PushConsumer's default pull_batch_size
WARMUP = b"w"
PUSH_APIS = ("send", "send_async")
# The store layout the published figures were measured with (RocketMQ's 1 GiB segments, each
# warmed whole before the writer reaches it), set explicitly so a change of defaults moves nothing.
STORE_LAYOUT = {"mapped_file_size_commit_log": 1 << 30, "warm_ahead_size": 1 << 30}


def missing_api() -> list[str]:
    import importlib

    try:
        shmq = importlib.import_module("shmq")
    except Exception as e:
        return [f"shmq ({e})"]
    return [n for n in ("Broker", "Producer", "Message", "PullConsumer") if not hasattr(shmq, n)]


class Shmq(System):
    name = "shmq"
    title = "shmq (broker + commitlog, ASYNC_FLUSH)"
    how = (
        "Producer.send_async (window of 256 acks in flight; auto_batch on) / send_batch_async of a MessageBatch "
        "of 100, 4 in flight; PullConsumer.pull (256, MessageExt) / pull_batch (1024, numpy columns) + commit; "
        "Producer.send for round trips"
    )
    persistence = "commitlog, async flush (SYNC_FLUSH for durability)"
    broker = True
    note = ""
    durable = True
    durable_note = "flushDiskType=SYNC_FLUSH"
    replicated = True
    replicated_note = (
        "a master broker (sync: brokerRole=SYNC_MASTER, async: ASYNC_MASTER; ASYNC_FLUSH) and "
        "`shmq replica` on loopback; Producer.send, only SEND_OK counts"
    )

    def install(self):
        missing = missing_api()
        core = [m for m in missing if m != "PullConsumer"]
        if core:
            return "not available yet: shmq." + ", shmq.".join(core) + " not importable"
        self.no_consumer = "PullConsumer" in missing
        return None

    def consumer_missing(self) -> str | None:
        return "not available yet: shmq.PullConsumer not importable" if getattr(self, "no_consumer", True) else None

    def versions(self):
        import shmq

        return {"shmq": shmq.__version__}

    def start(self, workdir):
        import shmq

        self.workdir = workdir
        self.name_ = f"bench{os.getpid()}"
        self.brokers = []
        self.store = tempfile.mkdtemp(prefix="shmq.", dir=workdir)
        self.broker_ = self._start_broker(self.store, self.name_, dict(STORE_LAYOUT, default_topic_queue_nums=8))
        # The SYNC_FLUSH broker starts now, like the Redis and NATS servers: its first commitlog
        # segment is warmed (zeros written and synced) in the background by then, as on any
        # broker that has been up for a few seconds.
        self.durable_store = tempfile.mkdtemp(prefix="shmq-sync.", dir=workdir)
        self.durable_name = self.name_ + "s"
        self._start_broker(
            self.durable_store,
            self.durable_name,
            dict(STORE_LAYOUT, flush_disk_type="SYNC_FLUSH", default_topic_queue_nums=8),
        )
        self.producer = shmq.Producer("bench-admin", broker=self.name_)
        self.producer.start()
        self.pairs: dict[str, ReplicatedPair] = {}  # started on first use, when this shmq has HA

    def _start_broker(self, store, name, config):
        import shmq

        broker = shmq.Broker(store, name=name, config=config)
        self.brokers.append(broker)
        return broker

    def stop(self):
        """Detach the admin producer, then stop each broker and say how it ended: a crash shows here."""
        producer = getattr(self, "producer", None)
        try:
            if producer is not None:
                producer.shutdown()
        except Exception as e:
            say(f"shmq: stop: {e}")
        for pair in getattr(self, "pairs", {}).values():
            say(f"shmq: {pair.stop_replica()}")
        for broker in getattr(self, "brokers", []):
            self._stop_broker(broker)
        shutil.rmtree(getattr(self, "store", ""), ignore_errors=True)
        shutil.rmtree(getattr(self, "durable_store", ""), ignore_errors=True)

    @staticmethod
    def _stop_broker(broker):
        try:
            status = broker.stop()
        except Exception as e:
            say(f"shmq: stopping broker {broker.name}: {e}")
            return
        tail = " / ".join(broker.log().strip().splitlines()[-8:]) if status else ""
        say(
            f"shmq: broker {broker.name} on {broker.store_dir} stopped, exit status {status}"
            + (f"; log tail: {tail}" if tail else "")
        )

    def _topic(self, run_id, producer=None, broker=None):
        topic = "Bench" + run_id.replace(".", "_").replace("-", "_")
        warm(producer or self.producer, [topic])
        return {"broker": broker or self.name_, "topic": topic}

    def why_not(self, kind, spec):
        return self.consumer_missing() if kind == "tput" else None

    def replicated_context(self, spec):
        """The pair of this mode (started once, then kept like the other brokers), streaming, and a fresh topic."""
        import shmq

        role = "SYNC_MASTER" if spec.sync else "ASYNC_MASTER"
        pair = self.pairs.get(role)
        if pair is None:
            # "bench<pid>sm" / "bench<pid>am": not "bench<pid>s", the SYNC_FLUSH broker's name
            pair = self.pairs[role] = ReplicatedPair(self.workdir, f"{self.name_}{role[0].lower()}m", role)
            self.brokers.append(pair.master)
            pair.wait_streaming()
        p = shmq.Producer("bench-admin-ha", broker=pair.name)
        p.start()
        try:
            ctx = self._topic(spec.run_id, p, pair.name)
        finally:
            p.shutdown()
        pair.wait_streaming()
        return ctx

    def tput_context(self, spec):
        return self._topic(spec.run_id)

    def latency_context(self, spec):
        return self._topic(spec.run_id)

    def durable_context(self, spec):
        import shmq

        p = shmq.Producer("bench-admin-sync", broker=self.durable_name)
        p.start()
        try:
            return self._topic(spec.run_id, p, self.durable_name)
        finally:
            p.shutdown()

    def extra_workloads(self, settings):
        """Backlog, then queue-count scaling (shmq only; 10,000 queues last, as the hardest), then
        the cluster rows (1, 2 and 4 brokers of their own), then the worker-pool rows (a broker and a
        redis-server of their own)."""
        out = {}
        reason = self.consumer_missing()
        if reason:
            out["backlog"] = {"error": reason}
        else:
            try:
                out["backlog"] = self._backlog(settings)
            except Exception as e:
                out["backlog"] = {"error": f"{type(e).__name__}: {e}{self._log_tail()}"}
        try:
            out["push"] = self._push_latency(settings)
        except Exception as e:
            out["push"] = {"error": f"{type(e).__name__}: {e}{self._log_tail()}"}
        try:
            out["queues"] = self._scaling(settings)
        except Exception as e:
            out["queues"] = {"error": f"{type(e).__name__}: {e}{self._log_tail()}"}
        from tools.bench import cluster_bench  # brokers of its own, stopped before it returns

        out["cluster"] = cluster_bench.run(
            settings.cluster_seconds, settings.reps, settings.cluster_brokers, namesrv=not settings.quick
        )
        from tools.bench import pop_bench  # the same

        try:
            out["pop"] = pop_bench.run(settings.pop_messages, settings.reps, settings.pop_workers, settings.pop_rounds)
        except Exception as e:
            out["pop"] = {"error": f"{type(e).__name__}: {e}"}
        return out

    def _log_tail(self) -> str:
        try:
            if self.broker_.process.poll() is None:
                return ""
            tail = self.broker_.log().strip().splitlines()[-8:]
            return f" (broker exited {self.broker_.process.returncode}; log tail: " + " / ".join(tail) + ")"
        except Exception:
            return ""

    def _scaling(self, settings):
        res = {}
        base = None
        for q in settings.queue_counts:
            topics = max(1, q // 8)
            prefix = f"BenchQ{q}_"
            try:
                warm(self.producer, [f"{prefix}{t}" for t in range(topics)])
                ctx = {
                    "broker": self.name_,
                    "topics": [f"{prefix}{t}" for t in range(topics)],
                    "count": settings.scaling_count,
                    "size": 100,
                }
                runs = []
                for _ in range(settings.reps):
                    (r,) = run_roles(
                        self, [("scaling_producer", (ctx,))], settings.run_deadline, settings.run_deadline + 60
                    )
                    runs.append(r)
            except Exception as e:
                res[str(q)] = {"error": f"{type(e).__name__}: {e}{self._log_tail()}"}
                continue
            med = float(np.median(runs))
            base = base or (med if q == settings.queue_counts[0] else None)
            res[str(q)] = {"runs": runs, "median": med, "ratio_to_8": med / base if base else None}
        return res

    def _push_latency(self, settings):
        """Send -> PushConsumer listener latency at 1,000 msgs/s, per send API."""
        ctx = self._topic("push")
        ctx.update(count=settings.push_count, size=100)
        return {api: run_push(self, dict(ctx, api=api), settings.push_count, settings.reps) for api in PUSH_APIS}

    def _backlog(self, settings):
        ctx = self._topic("backlog")
        ctx.update(count=settings.backlog_count, size=100, batch=settings.batch_size)
        (w,) = run_roles(
            self, [("backlog_producer", (ctx,))], settings.backlog_deadline, settings.backlog_deadline * 4 + 120
        )
        ctx["count"] = w["messages"]
        (d,) = run_roles(
            self, [("backlog_consumer", (ctx,))], settings.backlog_deadline, settings.backlog_deadline * 4 + 120
        )
        w.update(d)
        return w


def warm(producer, topics: list[str], queues: int = 8) -> None:
    """Create the topics (auto-create) and write once to each of their queues, untimed.

    The consumers skip these messages: their body is shorter than any benchmark body."""
    import shmq

    pending = collections.deque()
    for topic in topics:
        producer.send(shmq.Message(topic, WARMUP))
        for q in range(1, queues):
            pending.append(
                producer.send_async(shmq.Message(topic, WARMUP), selector=lambda qs, m, a: qs[a % len(qs)], arg=q)
            )
            if len(pending) >= 64:
                pending.popleft().result(60)
    for f in pending:
        f.result(60)


def _producer(ctx):
    import shmq

    p = shmq.Producer(f"bench-p{os.getpid()}", broker=ctx["broker"])
    p.start()
    return p


def tput_producer(ctx, spec, idx, n, sync):
    import shmq

    p = _producer(ctx)
    topic = ctx["topic"]
    data = body(spec.size)
    sync.ready()
    sent = 0
    if spec.api == "batch":
        batches = collections.deque()
        while sent < n:
            k = min(spec.batch, n - sent)
            batches.append(p.send_batch_async(shmq.MessageBatch(topic, [data] * k)))
            sent += k
            if len(batches) >= BATCH_WINDOW:
                batches.popleft().result(60)
                if sync.expired():
                    break
        for f in batches:
            f.result(60)
    else:
        window = collections.deque()
        while sent < n:
            window.append(p.send_async(shmq.Message(topic, data)))
            sent += 1
            if len(window) >= WINDOW:
                window.popleft().result(60)
                if sent & 255 == 0 and sync.expired():
                    break
        for f in window:
            f.result(60)
    p.shutdown()
    return sent


def _puller(pc, size: int, columnar: bool):
    """pull (MessageExt list, the everyday API) or pull_batch (numpy columns, the batch API);
    returns a function (mq, offset, timeout) -> (messages of the benchmark's size, next offset)."""

    def pull(mq, offset, timeout):
        res = pc.pull(mq, "*", offset=offset, max_nums=PULL_NUMS, timeout=timeout)
        msgs = res.messages
        return (sum(1 for m in msgs if len(m.body) == size) if msgs else 0), res.next_offset

    def pull_batch(mq, offset, timeout):
        res = pc.pull_batch(mq, "*", offset=offset, max_nums=1024, timeout=timeout)
        b = res.batch
        return (int(np.count_nonzero(b.body_len == size)) if b is not None and len(b) else 0), res.next_offset

    return pull_batch if columnar and hasattr(pc, "pull_batch") else pull


def tput_consumer(ctx, spec, idx, sync):
    import shmq

    pc = shmq.PullConsumer(f"bench-cg-{ctx['topic']}", broker=ctx["broker"])
    pc.start()
    queues = sorted(pc.fetch_queues(ctx["topic"]), key=lambda mq: mq.queue_id)
    mine = queues[idx :: spec.consumers]
    offsets = {mq.queue_id: 0 for mq in mine}
    pull = _puller(pc, spec.size, spec.api == "batch")
    sync.ready()
    done = False
    while not done:
        k = 0
        for mq in mine:
            n, nxt = pull(mq, offsets[mq.queue_id], 0)
            if nxt != offsets[mq.queue_id]:
                offsets[mq.queue_id] = nxt
                pc.commit(mq, nxt)
            k += n
        if k:
            done = sync.got(k)
            continue
        mq = mine[0]
        n, nxt = pull(mq, offsets[mq.queue_id], POLL)  # long poll, so an idle consumer sleeps
        if nxt != offsets[mq.queue_id]:
            offsets[mq.queue_id] = nxt
            pc.commit(mq, nxt)
        done = sync.got(n) if n else sync.idle()
    pc.shutdown()


def latency_client(ctx, spec, sync):
    import shmq

    p = _producer(ctx)
    msg = shmq.Message(ctx["topic"], body(spec.size))
    sync.ready()
    for _ in range(50):
        p.send(msg)
    lat = timed_loop(sync, lambda: p.send(msg), spec.rounds)
    p.shutdown()
    return lat


def durable_sender(ctx, spec, idx, sync):
    import shmq

    p = _producer(ctx)
    msg = shmq.Message(ctx["topic"], body(spec.size))
    p.send(msg)
    sync.ready()
    lat = timed_loop(sync, lambda: p.send(msg), spec.count, check_every=16)
    p.shutdown()
    return durable_result(sync, lat)


def push_sender(ctx, sync):
    """``Producer.send`` (api "send") or ``send_async`` without waiting (api "send_async":
    auto_batch holds a lone message up to ``batch_max_delay`` waiting for company)."""
    import shmq

    p = _producer(ctx)
    send = p.send if ctx["api"] == "send" else p.send_async
    topic = ctx["topic"]
    n = paced_stamped(sync, ctx["count"], ctx["size"], lambda data: send(shmq.Message(topic, data)))
    p.flush()
    p.shutdown()
    return n


def push_listener(ctx, sync):
    """A PushConsumer whose listener records each message's age (warm-up bodies skipped)."""
    import threading

    import shmq

    lat = []
    done = threading.Event()
    want = ctx["count"]

    def listener(msgs, _ctx):
        lat.extend(stamp_age(m.body) for m in msgs if len(m.body) == ctx["size"])
        if len(lat) >= want:
            done.set()
        return shmq.ConsumeResult.SUCCESS

    c = shmq.PushConsumer(f"bench-push-{os.getpid()}", broker=ctx["broker"])
    c.subscribe(ctx["topic"])
    c.register_listener(listener)
    c.start()
    sync.ready()
    done.wait(want / PUSH_RATE + PUSH_SETTLE_S + 30)
    c.shutdown()
    return percentiles(np.array(lat[:want], dtype=np.int64))


def scaling_producer(ctx, sync):
    import shmq

    p = _producer(ctx)
    data = body(ctx["size"])
    msgs = [shmq.Message(t, data) for t in ctx["topics"]]
    nt = len(msgs)
    window = collections.deque()
    sync.ready()
    sent = 0
    while sent < ctx["count"]:
        window.append(p.send_async(msgs[sent % nt]))
        sent += 1
        if len(window) >= WINDOW:
            window.popleft().result(60)
            if sent & 1023 == 0 and sync.expired():
                break
    for f in window:
        f.result(60)
    elapsed = time.perf_counter() - sync.t0
    p.shutdown()
    return sent / elapsed


def backlog_producer(ctx, sync):
    import shmq

    p = _producer(ctx)
    data = body(ctx["size"])
    batch = shmq.MessageBatch(ctx["topic"], [data] * ctx["batch"])
    n = ctx["count"]
    tenth = max(n // 10, ctx["batch"])
    marks = []
    sync.ready()
    marks.append((0, sync.t0))
    sent = 0
    next_mark = tenth
    in_flight = collections.deque()
    while sent < n:
        in_flight.append(p.send_batch_async(batch))  # pipelined as in the batch throughput runs
        sent += len(batch)
        if len(in_flight) >= BATCH_WINDOW:
            in_flight.popleft().result(60)
        if sent >= next_mark:
            marks.append((sent, time.perf_counter()))
            next_mark += tenth
        if sync.expired():
            break
    for f in in_flight:
        f.result(60)
    end = time.perf_counter()
    p.shutdown()
    if marks[-1][0] != sent:
        marks.append((sent, end))

    def rate(a, b):
        return (b[0] - a[0]) / max(b[1] - a[1], 1e-9)

    first, last = rate(marks[0], marks[1]), rate(marks[-2], marks[-1])
    return {
        "messages": sent,
        "write_msgs_s": sent / (end - sync.t0),
        "first_tenth_msgs_s": first,
        "last_tenth_msgs_s": last,
        "last_vs_first": last / first,
        "capped": sent < n,
    }


def backlog_consumer(ctx, sync):
    import shmq

    pc = shmq.PullConsumer(f"bench-backlog-{os.getpid()}", broker=ctx["broker"])
    pc.start()
    queues = pc.fetch_queues(ctx["topic"])
    offsets = {mq.queue_id: 0 for mq in queues}
    pull = _puller(pc, ctx["size"], True)
    want = ctx["count"]
    got = 0
    sync.ready()
    while got < want and not sync.expired():
        for mq in queues:
            n, offsets[mq.queue_id] = pull(mq, offsets[mq.queue_id], 0)
            got += n
    elapsed = time.perf_counter() - sync.t0
    pc.shutdown()
    return {"drained": got, "drain_msgs_s": got / elapsed}
