"""Cluster benchmark: aggregate throughput of 1, 2 and 4 brokers on one host, and the CPU each
kind of process spends per message.

One broker process is one core's worth of Python whatever the machine has; several brokers
are how shmq uses more cores. For each broker count N this starts (per run, interleaved, a
fresh topic each time):

- **end to end**: N producers sending MessageBatch batches of 100 bodies of 100 B, 4 batches
  in flight (the suite's batch row), and N pull consumers reading columns (``pull_batch``), a
  topic of 8 queues on each of the N brokers; producers send for ``--seconds``, the rate is
  every message sent over the time from the start to the last one consumed. With a name
  server (``shmq.Cluster``) and clients that take ``namesrv=``, every client attaches through
  it (producers go round robin over the brokers, each consumer reads a share of every
  broker's queues); without, each broker gets a producer and a consumer given ``broker=``;
- **producer only**: the same producers, no consumers: the broker's write path alone;
- the **CPU seconds per message** of each kind of process (broker, producer, consumer): psutil
  ``cpu_times`` (user + system, every thread) of each process over the timed phase, summed over
  the processes of that kind and divided by the messages of the run.

With a name server (``shmq.Cluster``) it also compares sends given ``namesrv=`` with sends
given ``broker=`` on a one-broker cluster, producer only: the route lookup must cost nothing
on the send path. Without one, that row says why it did not run.

The model: every message passes one producer, one broker and one consumer, each a process of
its own that runs on some core, so a host of C cores moves at most

    messages/s = C / (broker + producer + consumer CPU seconds per message)

as long as there are enough brokers: each broker is one Python thread, so N brokers carry at
most N / (broker CPU s per message). The CPU per message is measured here; what it predicts
for 16 and 64 cores is printed (and shown on the benchmarks page). On a shared or small
machine the measured rate is below the model: other work takes cores, and with more
processes than cores the kernel's switching costs CPU too, which is why the CPU per message
is the figure to compare across broker counts (a cluster may cost at most 10 % more per
message than one broker), not the rate.

    .venv/bin/python tools/bench/cluster_bench.py [--seconds S] [--reps N] [--brokers 1 2 4]
"""

from __future__ import annotations

import argparse
import inspect
import json
import multiprocessing as mp
import os
import queue
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any

import numpy as np
import psutil

import shmq
from shmq import MessageBatch, Producer, PullConsumer
from shmq.cli.demo_cluster import wait_routed

SIZE = 100
BATCH = 100  # bodies per MessageBatch, as the suite's batch rows
IN_FLIGHT = 4
QUEUES = 8
PULL = 1024
WARMUP = b"w"  # one per queue before the clock starts; consumers skip it by its size
KINDS = ("broker", "producer", "consumer")
CONFIG = {
    "mapped_file_size_commit_log": 256 << 20,
    "warm_ahead_size": 256 << 20,
    "default_topic_queue_nums": QUEUES,
    "ha_listen_port": 0,  # no HA sender (no replica here): the ports of a cluster's senders may be taken
}
SPAWN = mp.get_context("spawn")
VIA = {
    "namesrv": "a cluster (a name server and the brokers); every producer and consumer given namesrv=",
    "broker": "standalone brokers; a producer and a consumer given broker= per broker",
}
# counts shared by the processes of one run: messages sent, producers done, messages consumed
SENT, DONE, RECEIVED = 0, 1, 2


def _cpu(pid: int | None = None) -> float:
    """CPU seconds (user + system, all threads) of a process so far."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def producer(*args: Any) -> None:
    """A producer process (``_producer``'s arguments)."""
    _guarded(_producer, args)


def consumer(*args: Any) -> None:
    """A consumer process (``_consumer``'s arguments)."""
    _guarded(_consumer, args)


def _guarded(role: Any, args: tuple) -> None:
    """Run a worker; when it fails, break the start barrier and say why, so the run stops at
    once instead of waiting for it."""
    ready, out = args[-3], args[-1]
    try:
        role(*args)
    except BaseException as e:
        ready.abort()
        out.put(("error", f"{role.__name__.strip('_')}: {type(e).__name__}: {e}", 0.0, 0))


def _producer(target: dict[str, str], topic: str, seconds: float, ready: Any, counts: Any, out: Any) -> None:
    """Batches for ``seconds`` after the start; reports (messages, CPU s, end ns)."""
    p = Producer(f"cb-p{os.getpid()}", **target).start()
    try:
        batch = MessageBatch(topic, [bytes(SIZE)] * BATCH)
        window: list[Any] = []
        ready.wait(120)
        cpu, end = _cpu(), time.perf_counter() + seconds
        sent = 0
        while time.perf_counter() < end:
            window.append(p.send_batch_async(batch))
            if len(window) >= IN_FLIGHT:
                window.pop(0).result(60)
                sent += BATCH
        for f in window:
            f.result(60)
            sent += BATCH
        done = time.monotonic_ns()
        with counts.get_lock():
            counts[SENT] += sent
            counts[DONE] += 1
        out.put(("producer", sent, _cpu() - cpu, done))
    finally:
        p.shutdown()


def _consumer(
    target: dict[str, str], share: tuple[int, int], topic: str, producers: int, ready: Any, counts: Any, out: Any
) -> None:
    """Columns of its ``share`` (i of k) of the topic's queues, sorted by (broker, queue id),
    until all producers are done and all they sent is consumed (by every consumer together);
    reports (messages, CPU s, last message ns)."""
    pc = PullConsumer(f"cb-c{topic}", **target).start()
    try:
        queues = sorted(pc.fetch_queues(topic), key=lambda mq: (mq.broker_name, mq.queue_id))[share[0] :: share[1]]
        offsets = dict.fromkeys(queues, 0)
        got = last = 0
        ready.wait(120)
        cpu = _cpu()
        while True:
            k = 0
            for i, mq in enumerate(queues):
                res = pc.pull_batch(mq, offset=offsets[mq], max_nums=PULL, timeout=0.05 if i == 0 and not k else 0)
                if res.next_offset != offsets[mq]:
                    offsets[mq] = res.next_offset
                    pc.commit(mq, res.next_offset)
                if res.batch is not None and len(res.batch):
                    k += int(np.count_nonzero(res.batch.body_len == SIZE))
            with counts.get_lock():
                counts[RECEIVED] += k
                finished = counts[DONE] == producers and counts[RECEIVED] >= counts[SENT]
            if k:
                got, last = got + k, time.monotonic_ns()
            if finished:
                break
        out.put(("consumer", got, _cpu() - cpu, last))
    finally:
        pc.shutdown()


def run_once(
    brokers: list[shmq.Broker], targets: list[dict[str, str]], seconds: float, consume: bool, namesrv: str = ""
) -> dict:
    """One run on a fresh topic made on ``brokers`` alone: a producer per target, and when
    ``consume`` as many consumers as brokers (through ``namesrv`` each with a share of every
    broker's queues, else one per broker), released together; msgs/s and CPU us per message
    of each kind of process."""
    topic = f"ClusterBench{os.getpid()}x{time.monotonic_ns()}"
    _warm(brokers, topic)
    if namesrv:
        wait_routed(namesrv, [topic], {b.name for b in brokers}, exact=True)
        readers = [({"namesrv": namesrv}, (i, len(brokers))) for i in range(len(brokers))]
    else:
        readers = [({"broker": b.name}, (0, 1)) for b in brokers]
    workers = len(targets) + (len(readers) if consume else 0)
    ready, counts, out = SPAWN.Barrier(workers + 1), SPAWN.Array("q", 3), SPAWN.Queue()
    procs = [SPAWN.Process(target=producer, args=(t, topic, seconds, ready, counts, out), daemon=True) for t in targets]
    if consume:
        procs += [
            SPAWN.Process(target=consumer, args=(t, share, topic, len(targets), ready, counts, out), daemon=True)
            for t, share in readers
        ]
    for p in procs:
        p.start()
    try:
        before = [_cpu(b.pid) for b in brokers]
        try:
            ready.wait(120)
        except threading.BrokenBarrierError:
            raise RuntimeError(_first_cause(out, len(procs))) from None
        start = time.monotonic_ns()
        results = []
        for _ in procs:
            results.append(out.get(timeout=seconds + 120))
            if results[-1][0] == "error":
                raise RuntimeError(results[-1][1])
        broker_cpu = sum(_cpu(b.pid) for b in brokers) - sum(before)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
    sent = sum(r[1] for r in results if r[0] == "producer")
    received = sum(r[1] for r in results if r[0] == "consumer")
    if consume and received != sent:
        raise RuntimeError(f"sent {sent:,} but the consumers got {received:,}")
    end = max(r[3] for r in results if r[0] == ("consumer" if consume else "producer"))
    cpu = {"broker": broker_cpu} | {k: sum(r[2] for r in results if r[0] == k) for k in KINDS[1:]}
    us = {k: v * 1e6 / max(sent, 1) for k, v in cpu.items() if k != "consumer" or consume}
    return {"msgs_s": sent / ((end - start) / 1e9), "cpu_us": us | {"total": sum(us.values())}, "messages": sent}


def _first_cause(out: Any, workers: int) -> str:
    """Why the start barrier broke: the failing worker's own error, not the BrokenBarrierError
    the others then report (whichever comes first)."""
    broken = []
    deadline = time.monotonic() + 10
    while len(broken) < workers:
        try:
            r = out.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            break
        if "BrokenBarrierError" not in r[1]:
            return r[1]
        broken.append(r[1])
    return broken[0] if broken else "a worker broke the start barrier and said nothing"


def _warm(brokers: list[shmq.Broker], topic: str) -> None:
    """The topic on every broker with a message in each queue, before the clock starts."""
    for b in brokers:
        with Producer("cb-warm", broker=b.name) as p:
            for q in range(QUEUES):
                p.send(shmq.Message(topic, WARMUP), selector=lambda qs, m, a: qs[a % len(qs)], arg=q)


def _median(runs: list[dict]) -> dict:
    """The median of each figure over the runs, and the runs' rates."""
    return {
        "msgs_s": statistics.median(r["msgs_s"] for r in runs),
        "runs": [r["msgs_s"] for r in runs],
        "cpu_us": {k: statistics.median(r["cpu_us"][k] for r in runs) for k in runs[0]["cpu_us"]},
    }


def scaling(root: str, counts: tuple[int, ...], seconds: float, reps: int, prefix: str) -> dict:
    """The end-to-end and producer-only rows of each broker count, on max(counts) brokers
    started once (the first N hold a row's topic; the idle ones park). With the cluster clients
    a ``shmq.Cluster`` named ``prefix`` (brokers ``<prefix>-b<i>``) and every client given
    ``namesrv=``; without, standalone brokers ``<prefix>b<i>`` and a producer and a consumer
    given ``broker=`` per broker. Stores on ``root/<broker name>``."""
    via = "broker" if cluster_clients() else "namesrv"
    cluster = shmq.Cluster(root, brokers=max(counts), namesrv=prefix, config=CONFIG) if via == "namesrv" else None
    brokers: list[shmq.Broker] = cluster.brokers if cluster else []
    raw: dict[str, dict[str, list[dict]]] = {str(n): {"e2e": [], "producer": []} for n in counts}

    def timed(n: int, seconds: float, consume: bool) -> dict:
        mine = brokers[:n]
        targets = [{"namesrv": prefix} if cluster else {"broker": b.name} for b in mine]
        return run_once(mine, targets, seconds, consume, prefix if cluster else "")

    try:
        for i in range(0 if cluster else max(counts)):
            name = f"{prefix}b{i}"
            brokers.append(shmq.Broker(os.path.join(root, name), name=name, config=CONFIG))
        timed(len(brokers), min(seconds, 0.5), True)  # untimed: first pages, first connections
        for _ in range(reps):  # interleaved, so a burst of load elsewhere spreads over every row
            for n in counts:
                raw[str(n)]["e2e"].append(timed(n, seconds, True))
                raw[str(n)]["producer"].append(timed(n, seconds, False))
    finally:
        if cluster:
            cluster.stop()
        for b in [] if cluster else reversed(brokers):
            b.stop()
    return {n: {"end_to_end": _median(r["e2e"]), "producer_only": _median(r["producer"])} for n, r in raw.items()}


def cluster_clients() -> str | None:
    """Why this shmq cannot run a cluster with ``namesrv=`` clients, or None."""
    if not hasattr(shmq, "Cluster"):
        return "not available yet: shmq.Cluster not importable"
    for client in (Producer, PullConsumer):
        if "namesrv" not in inspect.signature(client).parameters:
            return f"not available yet: {client.__name__} takes no namesrv="
    return None


def namesrv_vs_broker(root: str, seconds: float, reps: int, prefix: str) -> dict:
    """Producer-only batch sends through ``namesrv=`` and ``broker=`` on a one-broker cluster,
    alternating; the ratio of their medians (1.0: the route lookup costs nothing)."""
    why = cluster_clients()
    if why:
        return {"error": why}
    ns = f"{prefix}ns"
    cluster = shmq.Cluster(os.path.join(root, "cluster"), brokers=1, namesrv=ns, config=CONFIG)
    try:
        b = cluster.brokers[0]
        ways = {"broker": {"broker": b.name}, "namesrv": {"namesrv": ns}}
        runs: dict[str, list[dict]] = {"broker": [], "namesrv": []}
        run_once([b], [ways["broker"]], min(seconds, 0.5), consume=False)  # untimed: first pages
        for rep in range(reps):
            for way in sorted(ways, reverse=bool(rep % 2)):  # each goes first in every other repetition
                runs[way].append(run_once([b], [ways[way]], seconds, consume=False))
    finally:
        cluster.stop()
    out = {k: _median(v) for k, v in runs.items()}
    return out | {"ratio": out["namesrv"]["msgs_s"] / out["broker"]["msgs_s"]}


def run(seconds: float = 2.0, reps: int = 3, counts: tuple[int, ...] = (1, 2, 4), namesrv: bool = True) -> dict:
    """Every row, as the suite's JSON keeps them (``extras.shmq.cluster``); ``namesrv`` False
    leaves out the `namesrv=` against `broker=` comparison (one more cluster started)."""
    root = tempfile.mkdtemp(prefix="shmq-cluster-bench.")
    load = os.getloadavg()[0]
    try:
        via = "broker" if cluster_clients() else "namesrv"  # what scaling() attaches the clients with
        out: dict[str, Any] = {"seconds": seconds, "reps": reps, "cores": os.cpu_count(), "via": via}
        prefix = f"cb{os.getpid()}"
        try:
            out["brokers"] = scaling(root, counts, seconds, reps, prefix)
        except Exception as e:
            out["brokers"] = {"error": f"{type(e).__name__}: {e}"}
        try:
            out["namesrv"] = namesrv_vs_broker(root, seconds, reps, prefix) if namesrv else {"error": "not run"}
        except Exception as e:
            out["namesrv"] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out | {"load_average_1m": [round(load, 2), round(os.getloadavg()[0], 2)]}


def predict(cpu_us: dict[str, float], cores: int) -> tuple[float, int]:
    """The model's msgs/s on ``cores`` cores and the brokers it takes (each broker one core at most)."""
    rate = cores / (cpu_us["total"] / 1e6)
    return rate, max(1, -(-int(rate * cpu_us["broker"]) // 1_000_000))


def summary(res: dict) -> list[str]:
    """The figures as lines of text, with the model's predictions for 16 and 64 cores."""
    lines = [f"load average (1 min) {res['load_average_1m'][0]} at the start, {res['load_average_1m'][1]} at the end"]
    lines.append(VIA[res.get("via", "broker")])
    rows = res["brokers"]
    if "error" in rows:
        return [*lines, f"brokers: {rows['error']}"]
    base = rows[min(rows, key=int)]
    for n, r in rows.items():
        e, p = r["end_to_end"], r["producer_only"]
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in e["cpu_us"].items())
        lines.append(
            f"{n} broker(s): end to end {e['msgs_s']:,.0f} msgs/s (runs {', '.join(f'{x:,.0f}' for x in e['runs'])}), "
            f"CPU us/msg {cpu} ({e['cpu_us']['total'] / base['end_to_end']['cpu_us']['total']:.2f}x one broker's); "
            f"producer only {p['msgs_s']:,.0f} msgs/s ({p['msgs_s'] / base['producer_only']['msgs_s']:.2f}x one broker)"
        )
    for cores in (16, 64):
        rate, brokers = predict(base["end_to_end"]["cpu_us"], cores)
        lines.append(f"model, {cores} cores: {rate:,.0f} msgs/s end to end with {brokers}+ brokers")
    ns = res["namesrv"]
    lines.append(
        f"namesrv= vs broker= sends: {ns['error']}"
        if "error" in ns
        else f"namesrv= sends {ns['namesrv']['msgs_s']:,.0f} msgs/s, broker= {ns['broker']['msgs_s']:,.0f} "
        f"({ns['ratio']:.3f}x)"
    )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="how long the producers of one run send")
    ap.add_argument("--reps", type=int, default=3, help="runs per row (medians are reported)")
    ap.add_argument("--brokers", type=int, nargs="+", default=[1, 2, 4], help="broker counts")
    ap.add_argument("--json", help="also write the figures to this file")
    a = ap.parse_args()
    res = run(a.seconds, a.reps, tuple(a.brokers))
    print("\n".join(summary(res)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
