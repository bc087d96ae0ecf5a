"""POP benchmark: a pool of worker processes taking jobs from a topic with ``shmq.SimpleConsumer``
(receive 32, ack each), against the other ways a Python program would run a worker pool.

For each worker count (1, 4 and 16) every system gets the same load, each run on fresh state
(a new topic and group, a new stream) with the same number of worker processes:

- **pop**: ``SimpleConsumer.receive(32, 30)`` then ``ack_async`` of each message of the batch,
  waiting for the acks before the next receive (the client sends one ACK frame for them);
- **push**: a clustering ``PushConsumer`` group (the RocketMQ 4 way: each member owns queues,
  its defaults: 4 listener threads, one message per listener call); a topic has 8 queues, so
  past 8 members the others idle, as in RocketMQ;
- **pool**: ``multiprocessing.Pool.imap_unordered`` over the bodies (chunks of 32), the
  standard library's worker pool: no broker, no durability, nothing survives its parent;
- **redis**: Redis Streams, ``XREADGROUP COUNT 32`` + one ``XACK`` per read in a consumer
  group (redis-server on loopback, AOF fsync every second).

The workers start and are ready (a push group has also had a second to rebalance) before the
clock starts; then the benchmark process sends the load (100 B bodies: shmq batches of 100 with
4 in flight, Redis pipelines of 100, the pool's own feeding), and the rate is the messages over
the time from the first send to the last message acked. The CPU seconds (user + system, every
thread) of the server (the broker, redis-server, or the pool's parent that feeds it) and of the
workers over that time are divided by the messages; for pop, the time a worker's thread spends
in ``ack_async`` and waiting for the answers is reported alone (the ack cost per message).

Latency: one worker with a backlog takes one message at a time, ``receive(1)`` -> ``ack`` ->
``receive(1)``; the time from one receive's return to the next one's (the cost of a job's
ack and of getting the next job), p50 and p99, and the ack alone.

Medians of ``--reps`` runs per row, the systems interleaved. On a small or shared machine more
worker processes than cores only add switching: the CPU per message is the figure to compare.

    .venv/bin/python tools/bench/pop_bench.py [--messages N] [--reps N] [--workers 1 4 16]
        [--systems pop push pool redis] [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil

import shmq
from shmq import ConsumeFrom, ConsumeResult, Message, MessageBatch, Producer, PushConsumer
from tools.bench.suite.settings import settings

SIZE = 100
BATCH = 100  # bodies per send batch / Redis pipeline
IN_FLIGHT = 4
RECEIVE = 32  # messages per receive / XREADGROUP / pool chunk
INVISIBLE = 30.0  # seconds: far longer than a run, so nothing comes back twice
QUEUES = 8
WARM = b"w"  # one per queue before the clock starts; workers tell it from a job by its size
SETTLE = 1.0  # seconds a push group gets to rebalance once its members are up
SYSTEMS = ("pop", "push", "pool", "redis")
SERVER = {"pop": "broker", "push": "broker", "pool": "pool parent", "redis": "redis-server"}
CONFIG = {"default_topic_queue_nums": QUEUES, "ha_listen_port": 0}
SPAWN = mp.get_context("spawn")
# counts shared by the workers of one run: warm-up messages and jobs taken
WARMED, TAKEN = 0, 1
GROUP = "g"  # the Redis consumer group


def _cpu(pid: int | None = None) -> float:
    """CPU seconds (user + system, all threads) of a process so far."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


class Tally:
    """What a worker has taken: the shared counts and the time of its last job (ns)."""

    def __init__(self, counts: Any) -> None:
        self.counts = counts
        self.last = 0

    def add(self, sizes: list[int]) -> None:
        jobs = sum(1 for s in sizes if s == SIZE)
        with self.counts.get_lock():
            self.counts[WARMED] += len(sizes) - jobs
            self.counts[TAKEN] += jobs
        if jobs:
            self.last = time.monotonic_ns()


def worker(kind: str, target: dict[str, Any], ready: Any, stop: Any, counts: Any, out: Any) -> None:
    """One worker process of ``kind``; when it fails, break the start barrier and say why, so the
    run stops at once instead of waiting for it."""
    try:
        ack_cpu, last = {"pop": _pop_worker, "push": _push_worker, "redis": _redis_worker}[kind](
            target, ready, stop, Tally(counts)
        )
        out.put(("ok", ack_cpu, last))
    except BaseException as e:
        ready.abort()
        out.put(("error", f"{kind} worker: {type(e).__name__}: {e}", 0))


def _pop_worker(target: dict[str, Any], ready: Any, stop: Any, tally: Tally) -> tuple[float, int]:
    """receive 32, ack_async each, wait for the acks; until told to stop. Returns (CPU s of its
    thread in acks, last job ns)."""
    sc = shmq.SimpleConsumer(
        target["group"], broker=target["broker"], subscriptions={target["topic"]: "*"}, await_duration=0.5
    ).start()
    try:
        ready.wait(120)
        ack_cpu = 0.0
        while not stop.is_set():
            msgs = sc.receive(RECEIVE, INVISIBLE)
            if not msgs:
                continue
            t = time.thread_time()
            for f in [sc.ack_async(m) for m in msgs]:
                f.result(60)
            ack_cpu += time.thread_time() - t
            tally.add([len(m.body) for m in msgs])
        return ack_cpu, tally.last
    finally:
        sc.shutdown()


def _push_worker(target: dict[str, Any], ready: Any, stop: Any, tally: Tally) -> tuple[float, int]:
    """A member of a clustering push group whose listener counts what it gets."""

    def listener(msgs: list[Any], ctx: Any) -> ConsumeResult:
        tally.add([len(m.body) for m in msgs])
        return ConsumeResult.SUCCESS

    c = PushConsumer(target["group"], broker=target["broker"], consume_from=ConsumeFrom.FIRST_OFFSET)
    c.subscribe(target["topic"], "*")
    c.register_listener(listener)
    c.start()
    try:
        ready.wait(120)
        stop.wait()
        return 0.0, tally.last
    finally:
        c.shutdown()


def _redis_worker(target: dict[str, Any], ready: Any, stop: Any, tally: Tally) -> tuple[float, int]:
    """XREADGROUP COUNT 32 (blocking up to 0.5 s), one XACK for what it read; until told to stop."""
    import redis

    r = redis.Redis(host="127.0.0.1", port=target["port"])
    name = f"c{os.getpid()}"
    ready.wait(120)
    ack_cpu = 0.0
    while not stop.is_set():
        resp = r.xreadgroup(GROUP, name, {target["key"]: ">"}, count=RECEIVE, block=500)
        if not resp:
            continue
        rows = resp[0][1]
        t = time.thread_time()
        r.xack(target["key"], GROUP, *[mid for mid, _ in rows])
        ack_cpu += time.thread_time() - t
        tally.add([len(fields[b"b"]) for _, fields in rows])
    r.close()
    return ack_cpu, tally.last


def _job(body: bytes) -> int:
    """The pool's job: as little as the others' listeners do."""
    return len(body)


def figures(kind: str, messages: int, ns: int, server_cpu: float, worker_cpu: float, ack_cpu: float) -> dict:
    """A run's rate and CPU microseconds per message (the ack alone where the workers ack)."""
    us = {"server": server_cpu * 1e6 / messages, "workers": worker_cpu * 1e6 / messages}
    if kind in ("pop", "redis"):
        us["ack"] = ack_cpu * 1e6 / messages
    return {"msgs_s": messages / (ns / 1e9), "cpu_us": us | {"total": us["server"] + us["workers"]}}


class Run:
    """One timed run of a system with its worker processes, on state of its own."""

    def __init__(self, kind: str, workers: int, messages: int, server_pid: int) -> None:
        self.kind, self.workers, self.messages, self.server_pid = kind, workers, messages, server_pid
        self.ready, self.stop = SPAWN.Barrier(workers + 1), SPAWN.Event()
        self.counts, self.out = SPAWN.Array("q", 2), SPAWN.Queue()
        self.procs: list[Any] = []

    def start(self, target: dict[str, Any]) -> None:
        """The workers, released once every one is up (or the first failure's reason raised)."""
        args = (self.kind, target, self.ready, self.stop, self.counts, self.out)
        self.procs = [SPAWN.Process(target=worker, args=args, daemon=True) for _ in range(self.workers)]
        for p in self.procs:
            p.start()
        try:
            self.ready.wait(180)
        except Exception:
            raise RuntimeError(self._first_error()) from None

    def wait_count(self, index: int, n: int, timeout: float) -> None:
        """Until the workers took ``n`` (warm-ups or jobs), or raise."""
        deadline = time.monotonic() + timeout
        while self.counts[index] < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.kind}: the workers took {self.counts[index]:,} of {n:,} in {timeout:.0f} s")
            if any(p.exitcode is not None for p in self.procs):
                raise RuntimeError(self._first_error())
            time.sleep(0.002)

    def timed(self, send: Callable[[], None]) -> dict[str, Any]:
        """``send`` the load and wait until every job is taken: msgs/s and CPU per message."""
        pids = [p.pid for p in self.procs]
        before = [_cpu(self.server_pid), *(_cpu(p) for p in pids)]
        start = time.monotonic_ns()
        send()
        self.wait_count(TAKEN, self.messages, 120 + self.messages / 1000)
        after = [_cpu(self.server_pid), *(_cpu(p) for p in pids)]
        self.stop.set()
        results = [self.out.get(timeout=120) for _ in self.procs]
        errors = [r[1] for r in results if r[0] == "error"]
        if errors:
            raise RuntimeError(errors[0])
        end = max(r[2] for r in results)
        cpu = (after[0] - before[0], sum(after[1:]) - sum(before[1:]), sum(r[1] for r in results))
        return figures(self.kind, self.messages, end - start, *cpu)

    def close(self) -> None:
        self.stop.set()
        for p in self.procs:
            p.join(15)
            if p.is_alive():
                p.kill()
                p.join()

    def _first_error(self) -> str:
        """The failing worker's own reason, not the broken barrier the others then report."""
        seen = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(seen) < len(self.procs):
            try:
                r = self.out.get(timeout=max(deadline - time.monotonic(), 0.01))
            except Exception:
                break
            if "BrokenBarrierError" not in r[1]:
                return r[1]
            seen.append(r[1])
        return seen[0] if seen else f"{self.kind}: a worker exited before it was ready"


def _send_shmq(broker: str, topic: str, messages: int) -> None:
    """The load: batches of 100 bodies of 100 B, 4 in flight."""
    with Producer(f"pb-p{os.getpid()}", broker=broker) as p:
        batch = MessageBatch(topic, [bytes(SIZE)] * BATCH)
        window: list[Any] = []
        for start in range(0, messages, BATCH):
            k = min(BATCH, messages - start)
            window.append(p.send_batch_async(batch if k == BATCH else MessageBatch(topic, [bytes(SIZE)] * k)))
            if len(window) >= IN_FLIGHT:
                window.pop(0).result(60)
        for f in window:
            f.result(60)


def _warm_shmq(broker: str, topic: str) -> None:
    """One small message in each queue of the topic."""
    with Producer("pb-warm", broker=broker) as p:
        for q in range(QUEUES):
            p.send(Message(topic, WARM), selector=lambda qs, m, a: qs[a % len(qs)], arg=q)


def run_shmq(kind: str, broker: shmq.Broker, workers: int, messages: int) -> dict[str, Any]:
    """One pop or push run on a fresh topic and group of ``broker``."""
    topic = f"PopBench{os.getpid()}x{time.monotonic_ns()}"
    _warm_shmq(broker.name, topic)  # the topic exists before the workers subscribe
    run = Run(kind, workers, messages, broker.pid)
    try:
        run.start({"broker": broker.name, "topic": topic, "group": f"pb{kind}{topic}"})
        run.wait_count(WARMED, QUEUES, 120)
        if kind == "push":
            time.sleep(SETTLE)
        return run.timed(lambda: _send_shmq(broker.name, topic, messages))
    finally:
        run.close()


def run_redis(server: tuple[Any, Any, str, int], workers: int, messages: int) -> dict[str, Any]:
    """One Redis Streams run on a fresh stream and consumer group."""
    proc, client, _, port = server
    key = f"popbench:{time.monotonic_ns()}"
    client.xgroup_create(key, GROUP, id="0", mkstream=True)
    for _ in range(QUEUES):
        client.xadd(key, {"b": WARM})
    run = Run("redis", workers, messages, proc.pid)

    def send() -> None:
        pipe = client.pipeline(transaction=False)
        for start in range(0, messages, BATCH):
            for _ in range(min(BATCH, messages - start)):
                pipe.xadd(key, {"b": bytes(SIZE)})
            pipe.execute()

    try:
        run.start({"port": port, "key": key})
        run.wait_count(WARMED, QUEUES, 120)
        return run.timed(send)
    finally:
        run.close()
        client.delete(key)


def run_pool(workers: int, messages: int) -> dict[str, Any]:
    """``Pool.imap_unordered`` of the bodies over ``workers`` processes started beforehand."""
    with SPAWN.Pool(workers) as pool:
        list(pool.imap_unordered(_job, [WARM] * workers * 4))  # every worker up and importing done
        pids = [c.pid for c in psutil.Process().children()]
        before = [_cpu(), *(_cpu(p) for p in pids)]
        start = time.monotonic_ns()
        done = sum(1 for _ in pool.imap_unordered(_job, (bytes(SIZE) for _ in range(messages)), chunksize=RECEIVE))
        ns = time.monotonic_ns() - start
        after = [_cpu(), *(_cpu(p) for p in pids)]
    if done != messages:
        raise RuntimeError(f"pool: {done:,} of {messages:,} jobs came back")
    return figures("pool", messages, ns, after[0] - before[0], sum(after[1:]) - sum(before[1:]), 0.0)


def latency(broker: shmq.Broker, rounds: int) -> dict[str, Any]:
    """receive(1) -> ack -> receive(1) with a backlog of ``rounds`` jobs: the cycle and the ack, µs."""
    topic = f"PopLat{os.getpid()}x{time.monotonic_ns()}"
    _send_shmq(broker.name, topic, rounds + 1)
    cycle, ack = np.empty(rounds, np.int64), np.empty(rounds, np.int64)
    with shmq.SimpleConsumer(
        f"pl{topic}", broker=broker.name, subscriptions={topic: "*"}, await_duration=5.0
    ).start() as sc:
        msgs = sc.receive(1, INVISIBLE)
        for i in range(rounds):
            t0 = time.perf_counter_ns()
            sc.ack(msgs[0])
            t1 = time.perf_counter_ns()
            msgs = sc.receive(1, INVISIBLE)
            cycle[i], ack[i] = time.perf_counter_ns() - t0, t1 - t0
            if not msgs:
                raise RuntimeError(f"latency: receive came back empty after {i + 1:,} of {rounds:,} jobs")
        sc.ack(msgs[0])
    return {"rounds": rounds, "cycle_us": _pcts(cycle), "ack_us": _pcts(ack)}


def _pcts(ns: np.ndarray) -> dict[str, float]:
    return {"p50": float(np.percentile(ns, 50)) / 1e3, "p99": float(np.percentile(ns, 99)) / 1e3}


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure over the runs, and the runs' rates."""
    return {
        "msgs_s": statistics.median(r["msgs_s"] for r in runs),
        "runs": [r["msgs_s"] for r in runs],
        "cpu_us": {k: statistics.median(r["cpu_us"][k] for r in runs) for k in runs[0]["cpu_us"]},
    }


def _redis_server(workdir: str) -> tuple[Any, Any, str, int] | str:
    """A redis-server of its own, or why there is none (redis-py comes with the bench extra,
    installed here when missing, as the suite does: on a fresh machine this may run first)."""
    try:
        from tools.bench.suite import install
        from tools.bench.suite.peers.redisstreams import RedisStreams, serve

        install.ensure_clients(("redis",))
        why = RedisStreams().install()
        return why if why else serve(workdir, "redis-pop.")
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def run(
    messages: int = 100_000,
    reps: int = 3,
    counts: tuple[int, ...] = (1, 4, 16),
    rounds: int = 5_000,
    name: str = "",
    root: str = "",
    systems: tuple[str, ...] = SYSTEMS,
) -> dict:
    """Every row, as the suite's JSON keeps them (``extras.shmq.pop``): a broker ``name``
    (default ``pb<pid>``) and a redis-server of their own under ``root`` (default a temporary
    directory, removed at the end)."""
    from tools.bench.suite.peers.redisstreams import shut

    root = root or tempfile.mkdtemp(prefix="shmq-pop-bench.")
    load = os.getloadavg()[0]
    out: dict[str, Any] = {"messages": messages, "reps": reps, "cores": os.cpu_count(), "workers": {}}
    name = name or f"pb{os.getpid()}"
    broker = shmq.Broker(os.path.join(root, name), name=name, config=CONFIG)
    redis = _redis_server(root)
    try:
        ways: dict[str, Callable[[int], dict[str, Any]]] = {
            "pop": lambda n: run_shmq("pop", broker, n, messages),
            "push": lambda n: run_shmq("push", broker, n, messages),
            "pool": lambda n: run_pool(n, messages),
            "redis": lambda n: run_redis(redis, n, messages),  # type: ignore[arg-type]
        }
        skip = {"redis": redis if isinstance(redis, str) else None}
        raw: dict[str, dict[str, list[dict[str, Any]]]] = {str(n): {k: [] for k in SYSTEMS} for n in counts}
        errors: dict[str, dict[str, str]] = {str(n): {} for n in counts}
        for _ in range(reps):  # interleaved, so a burst of load elsewhere spreads over every row
            for n in counts:
                for kind in systems:
                    if skip.get(kind) or kind in errors[str(n)]:
                        continue
                    try:
                        raw[str(n)][kind].append(ways[kind](n))
                    except Exception as e:
                        errors[str(n)][kind] = f"{type(e).__name__}: {e}"
        for n in map(str, counts):
            why = {k: skip.get(k) or errors[n].get(k) for k in systems}
            out["workers"][n] = {k: {"error": why[k]} if why[k] else _median(raw[n][k]) for k in systems}
        try:
            out["latency"] = latency(broker, rounds)
        except Exception as e:
            out["latency"] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        broker.stop()
        if not isinstance(redis, str):
            shut(*redis[:3])
        shutil.rmtree(root, ignore_errors=True)
    return out | {"load_average_1m": [round(load, 2), round(os.getloadavg()[0], 2)]}


def latency_text(lat: dict[str, Any]) -> str:
    """The latency row in words, or why it was not measured."""
    if "error" in lat:
        return lat["error"]
    c, a = lat["cycle_us"], lat["ack_us"]
    return (
        f"the cycle p50 {c['p50']:.0f} µs, p99 {c['p99']:.0f} µs; the ack alone p50 {a['p50']:.0f} µs, "
        f"p99 {a['p99']:.0f} µs ({lat['rounds']:,} jobs of a backlog)"
    )


def summary(res: dict) -> list[str]:
    """The figures as lines of text."""
    lines = [
        f"load average (1 min) {res['load_average_1m'][0]} at the start, {res['load_average_1m'][1]} at the end, "
        f"{res['cores']} cores; {res['messages']:,} jobs of {SIZE} B per run, medians of {res['reps']}"
    ]
    for n, row in res["workers"].items():
        push = row.get("push", {}).get("msgs_s")
        for kind, r in row.items():
            if "error" in r:
                lines.append(f"{n} worker(s) {kind}: {r['error']}")
                continue
            cpu = ", ".join(f"{k} {v:.1f}" for k, v in r["cpu_us"].items())
            vs = f", {r['msgs_s'] / push:.2f}x push" if push and kind != "push" else ""
            lines.append(f"{n} worker(s) {kind}: {r['msgs_s']:,.0f} msgs/s{vs}; CPU us/msg {cpu}")
    lines.append(f"receive 1 -> ack -> receive 1: {latency_text(res['latency'])}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000, help="jobs per run")
    ap.add_argument("--reps", type=int, default=3, help="runs per row (medians are reported)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 4, 16], help="worker counts")
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS), help="which rows")
    ap.add_argument("--rounds", type=int, default=5_000, help="jobs of the latency row")
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (also QUICK=1)")
    ap.add_argument("--json", help="also write the figures to this file")
    a = ap.parse_args()
    if a.quick or os.environ.get("QUICK") == "1":
        s = settings(quick=True)  # the suite's QUICK sizes
        res = run(s.pop_messages, s.reps, s.pop_workers, s.pop_rounds, systems=tuple(a.systems))
    else:
        res = run(a.messages, a.reps, tuple(a.workers), a.rounds, systems=tuple(a.systems))
    print("\n".join(summary(res)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
