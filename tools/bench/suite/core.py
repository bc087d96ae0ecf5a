"""What every peer adapter implements (``System``) and how a run's processes are driven.

A run spawns fresh producer and consumer processes (multiprocessing, spawn), waits until
each has connected, releases them together, and measures from the first producer's start
to the last consumer's last message (received and, where the peer acks, acked). Producers
stop at their count or at the run's deadline, whichever comes first; consumers stop once
every producer is done and everything sent was received.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import time
import traceback
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

SPAWN = mp.get_context("spawn")
POLL = 0.05  # seconds a consumer waits for more before it checks whether the run is over


@dataclass(frozen=True)
class TputSpec:
    producers: int
    consumers: int
    size: int
    api: str  # "msg" (per-message API) or "batch" (batch API)
    count: int  # messages, all producers together
    batch: int
    deadline: float  # seconds
    run_id: str

    @property
    def key(self) -> str:
        return f"tput {self.producers}->{self.consumers} {self.size}B {self.api}"


@dataclass(frozen=True)
class LatencySpec:
    size: int
    rounds: int
    deadline: float
    run_id: str


@dataclass(frozen=True)
class DurableSpec:
    senders: int
    size: int
    count: int  # per sender
    deadline: float
    run_id: str


@dataclass(frozen=True)
class ReplicatedSpec:
    senders: int
    size: int
    count: int  # per sender
    deadline: float
    run_id: str
    sync: bool  # acked once a replica has it (shmq SYNC_MASTER, Redis WAIT 1 0) or once the master has it

    @property
    def mode(self) -> str:
        return "sync" if self.sync else "async"


class Sync:
    """The worker's side of a run: start together, count what was sent and received."""

    def __init__(self, parties: int, producers: int, deadline: float) -> None:
        self.barrier = SPAWN.Barrier(parties)
        self.counts = SPAWN.Array("q", 3)  # sent, producers done, received
        self.results = SPAWN.Queue()
        self.producers = producers
        self.deadline = deadline
        self.t0 = 0.0
        self._local = 0
        self._flushed_at = 0
        self.last = 0.0
        self.received = 0

    def ready(self) -> float:
        """Block until every process of the run has connected; return the start time."""
        self.barrier.wait(120)
        self.t0 = time.perf_counter()
        return self.t0

    def expired(self) -> bool:
        return time.perf_counter() - self.t0 > self.deadline

    def sent(self, n: int) -> None:
        """Report this producer done with ``n`` messages (once; later calls do nothing)."""
        if getattr(self, "_reported", False):
            return
        self._reported = True
        with self.counts.get_lock():
            self.counts[0] += n
            self.counts[1] += 1

    def wait_consumed(self, timeout: float = 30.0) -> None:
        """After ``sent()``: wait until the consumers have everything (for peers that drop
        what is in flight when the sender closes)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.counts.get_lock():
                if self.counts[1] == self.producers and self.counts[2] >= self.counts[0]:
                    return
            time.sleep(0.005)

    def got(self, n: int) -> bool:
        """Count ``n`` messages received (and acked); True when the run is complete."""
        self.last = time.perf_counter()
        self.received += n
        self._local += n
        if self._local >= 256:
            return self._flush()
        return False

    def idle(self) -> bool:
        """Nothing arrived within a poll: True when the run is complete."""
        return self._flush()

    def _flush(self) -> bool:
        with self.counts.get_lock():
            self.counts[2] += self._local
            self._local = 0
            return self.counts[1] == self.producers and self.counts[2] >= self.counts[0]


class System:
    """A peer: how to install and start it, and its workload code (module-level functions).

    The worker functions live in the peer's module so spawned processes import only it:
    ``tput_producer(ctx, spec, idx, n, sync) -> sent``, ``tput_consumer(ctx, spec, idx, sync)``,
    ``latency_client(ctx, spec, sync) -> ns array``, optional ``latency_server(ctx, spec, sync)``,
    ``durable_sender(ctx, spec, idx, sync) -> ns array``, ``replicated_sender`` likewise.
    """

    name = "?"
    title = "?"
    how = ""
    persistence = "none"
    broker = True
    note = ""
    apis: tuple[str, ...] = ("msg", "batch")
    api_notes: ClassVar[dict[str, str]] = {}
    latency = True
    latency_server = False
    durable = False
    durable_note = ""
    replicated = False
    replicated_note = ""

    def install(self) -> str | None:
        """Make the peer usable; return why it cannot be, or None."""
        return None

    def why_not(self, kind: str, spec: Any) -> str | None:
        """Why this system cannot run a workload it otherwise supports (a missing piece), or None."""
        return None

    def versions(self) -> dict[str, str]:
        return {}

    def start(self, workdir: str) -> None:
        pass

    def stop(self) -> None:
        pass

    def tput_context(self, spec: TputSpec) -> Any:
        return None

    def tput_cleanup(self, spec: TputSpec, ctx: Any) -> None:
        pass

    def latency_context(self, spec: LatencySpec) -> Any:
        return None

    def latency_cleanup(self, spec: LatencySpec, ctx: Any) -> None:
        pass

    def durable_context(self, spec: DurableSpec) -> Any:
        return None

    def durable_cleanup(self, spec: DurableSpec, ctx: Any) -> None:
        pass

    def replicated_context(self, spec: ReplicatedSpec) -> Any:
        return None

    def replicated_cleanup(self, spec: ReplicatedSpec, ctx: Any) -> None:
        pass

    def extra_workloads(self, settings: Any) -> dict[str, Any]:
        """Workloads only this system runs (shmq: queue scaling, backlog)."""
        return {}


class RunError(RuntimeError):
    pass


def _worker(module: str, func: str, args: tuple, role: tuple, sync: Sync) -> None:
    try:
        fn = getattr(importlib.import_module(module), func)
        out = fn(*args, sync)
        if func == "tput_producer":
            sync.sent(out)
            sync.results.put((role, "ok", (sync.t0, time.perf_counter(), out)))
        elif func == "tput_consumer":
            sync.results.put((role, "ok", (sync.last, sync.received)))
        else:
            sync.results.put((role, "ok", out))
    except BaseException as e:  # report it to the parent, whatever it is
        try:
            sync.barrier.abort()
        except Exception:
            pass
        sync.results.put((role, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"))


def _collect(procs: list, sync: Sync, expect: int, timeout: float) -> dict:
    out: dict = {}
    end = time.monotonic() + timeout
    try:
        while len(out) < expect:
            left = end - time.monotonic()
            if left <= 0:
                missing = sorted({p.name for p in procs} - {f"{r[0]}{r[1]}" for r in out})
                raise RunError(
                    f"timed out waiting for {', '.join(missing)}; sent {sync.counts[0]} by "
                    f"{sync.counts[1]} producers done, received {sync.counts[2]}"
                )
            try:
                role, status, value = sync.results.get(timeout=min(left, 1.0))
            except Exception:
                dead = [p.exitcode for p in procs if not p.is_alive() and p.exitcode]
                if dead and sync.results.empty():
                    try:
                        sync.barrier.abort()
                    except Exception:
                        pass
                    raise RunError(f"a process died without reporting (exit codes {dead})") from None
                continue
            if status == "error":
                raise RunError(f"{role[0]} {role[1]}: {value}")
            out[role] = value
    finally:
        for p in procs:
            p.join(timeout=5)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    return out


def _start(procs: list, sync: Sync) -> None:
    for p in procs:
        p.start()


def run_tput(system: System, spec: TputSpec) -> dict:
    """One throughput run: messages/s and MB/s, end to end."""
    ctx = system.tput_context(spec)
    mod = type(system).__module__
    try:
        sync = Sync(spec.producers + spec.consumers, spec.producers, spec.deadline)
        share = [
            spec.count // spec.producers + (1 if i < spec.count % spec.producers else 0) for i in range(spec.producers)
        ]
        procs = [
            SPAWN.Process(
                target=_worker,
                args=(mod, "tput_consumer", (ctx, spec, i), ("consumer", i), sync),
                daemon=True,
                name=f"consumer{i}",
            )
            for i in range(spec.consumers)
        ]
        procs += [
            SPAWN.Process(
                target=_worker,
                args=(mod, "tput_producer", (ctx, spec, i, share[i]), ("producer", i), sync),
                daemon=True,
                name=f"producer{i}",
            )
            for i in range(spec.producers)
        ]
        _start(procs, sync)
        out = _collect(procs, sync, len(procs), spec.deadline + 30)
    finally:
        system.tput_cleanup(spec, ctx)
    starts = [v[0] for k, v in out.items() if k[0] == "producer"]
    sent = sum(v[2] for k, v in out.items() if k[0] == "producer")
    received = sum(v[1] for k, v in out.items() if k[0] == "consumer")
    last = max(v[0] for k, v in out.items() if k[0] == "consumer")
    if received != sent:
        raise RunError(f"sent {sent} but consumers received {received}")
    elapsed = last - min(starts)
    if sent == 0 or elapsed <= 0:
        raise RunError("nothing was sent")
    return {
        "msgs_s": sent / elapsed,
        "mb_s": sent * spec.size / elapsed / 1e6,
        "messages": sent,
        "seconds": elapsed,
        "capped": sent < spec.count,
    }


def percentiles(ns: np.ndarray) -> dict:
    us = np.asarray(ns, dtype=np.float64) / 1e3
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "p999_us": float(np.percentile(us, 99.9)),
        "rounds": len(us),
    }


def run_latency(system: System, spec: LatencySpec) -> dict:
    """Round trips of one synchronous send, one at a time: p50, p99, p99.9 in microseconds."""
    ctx = system.latency_context(spec)
    mod = type(system).__module__
    try:
        server = system.latency_server
        sync = Sync(1 + (1 if server else 0), 0, spec.deadline)
        procs = [
            SPAWN.Process(target=_worker, args=(mod, "latency_client", (ctx, spec), ("client", 0), sync), daemon=True)
        ]
        if server:
            procs.append(
                SPAWN.Process(
                    target=_worker, args=(mod, "latency_server", (ctx, spec), ("server", 0), sync), daemon=True
                )
            )
        _start(procs, sync)
        out = _collect(procs, sync, len(procs), spec.deadline + 30)
    finally:
        system.latency_cleanup(spec, ctx)
    return percentiles(out[("client", 0)])


def run_durable(system: System, spec: DurableSpec) -> dict:
    """``senders`` processes each sending one message at a time, acked only once on disk."""
    ctx = system.durable_context(spec)
    try:
        return _run_senders(system, "durable_sender", ctx, spec)
    finally:
        system.durable_cleanup(spec, ctx)


def run_replicated(system: System, spec: ReplicatedSpec) -> dict:
    """``senders`` processes each sending one message at a time to a master that has a replica,
    acked once the replica has it (``spec.sync``) or once the master has it."""
    ctx = system.replicated_context(spec)
    try:
        return _run_senders(system, "replicated_sender", ctx, spec)
    finally:
        system.replicated_cleanup(spec, ctx)


def _run_senders(system: System, func: str, ctx: Any, spec: DurableSpec | ReplicatedSpec) -> dict:
    mod = type(system).__module__
    sync = Sync(spec.senders, 0, spec.deadline)
    procs = [
        SPAWN.Process(target=_worker, args=(mod, func, (ctx, spec, i), ("sender", i), sync), daemon=True)
        for i in range(spec.senders)
    ]
    _start(procs, sync)
    out = _collect(procs, sync, len(procs), spec.deadline + 30)
    lat = np.concatenate([v[2] for v in out.values()])
    start = min(v[0] for v in out.values())
    end = max(v[1] for v in out.values())
    res = percentiles(lat)
    res.update(msgs_s=len(lat) / (end - start), messages=len(lat), seconds=end - start)
    return res


def timed_loop(sync: Sync, send, count: int, check_every: int = 64) -> np.ndarray:
    """Call ``send()`` up to ``count`` times (or until the deadline); return each call's ns."""
    lat = np.empty(count, dtype=np.int64)
    clock = time.perf_counter_ns
    i = 0
    start = time.perf_counter()
    while i < count:
        t = clock()
        send()
        lat[i] = clock() - t
        i += 1
        if i % check_every == 0 and time.perf_counter() - start > sync.deadline:
            break
    sync.t_end = time.perf_counter()
    return lat[:i]


def durable_result(sync: Sync, lat: np.ndarray) -> tuple:
    return (sync.t0, getattr(sync, "t_end", time.perf_counter()), lat)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def body(size: int) -> bytes:
    return os.urandom(size)


PUSH_RATE = 1000  # msgs/s of the send -> listener latency workload
PUSH_SETTLE_S = 0.5  # receivers are subscribed and parked before the first send


def paced_stamped(sync: Sync, count: int, size: int, send) -> int:
    """After the start: ``send(body)`` ``count`` times at ``PUSH_RATE``, each ``size``-byte body
    led by the monotonic clock (shared by the processes of one host) read just before the call.
    The sender sleeps between sends (a spinning one would keep the GIL from a producer's own
    threads) so the receiver finds nothing waiting and parks: what is measured is its wake-up."""
    pad = body(size - 8)
    sync.ready()
    time.sleep(PUSH_SETTLE_S)
    start = time.perf_counter()
    for i in range(count):
        left = start + i / PUSH_RATE - time.perf_counter()
        if left > 0:
            time.sleep(left)
        send(time.monotonic_ns().to_bytes(8, "little") + pad)
    return count


def stamp_age(payload: bytes) -> int:
    """Nanoseconds since ``paced_stamped`` stamped ``payload``."""
    return time.monotonic_ns() - int.from_bytes(payload[:8], "little")


def run_push(system: System, ctx: Any, count: int, reps: int) -> dict:
    """The send -> listener latency workload of one system: the module's ``push_listener(ctx,
    sync) -> percentiles`` and ``push_sender(ctx, sync)``, ``reps`` times; medians of each run's
    p50/p99/p99.9."""
    runs = []
    for _ in range(reps):
        listener, _sent = run_roles(
            system, [("push_listener", (ctx,)), ("push_sender", (ctx,))], count / PUSH_RATE + 5, count / PUSH_RATE + 60
        )
        runs.append(listener)
    return {
        "runs": runs,
        "rate": PUSH_RATE,
        **{p: float(np.median([r[p] for r in runs])) for p in ("p50_us", "p99_us", "p999_us")},
    }


def run_roles(system: System, roles: list[tuple[str, tuple]], deadline: float, timeout: float) -> list:
    """Run module-level functions of ``system``'s module, one process each, released together."""
    mod = type(system).__module__
    sync = Sync(len(roles), 0, deadline)
    procs = [
        SPAWN.Process(target=_worker, args=(mod, func, args, ("role", i), sync), daemon=True)
        for i, (func, args) in enumerate(roles)
    ]
    _start(procs, sync)
    out = _collect(procs, sync, len(procs), timeout)
    return [out[("role", i)] for i in range(len(roles))]
