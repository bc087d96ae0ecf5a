"""Cost of OpenTelemetry (shmq.otel) per message: sends and push listener calls.

One broker in this process; each run is a child process of its own (OpenTelemetry's providers
are global to a process), 100-byte bodies, a fresh store per run. Modes:

- ``off``: ``SHMQ_OTEL=0`` (nothing of OpenTelemetry imported: the extra absent);
- ``unset``: the extra installed, no provider set (the clients are not instrumented);
- ``hook``: a no-op send hook (the hook machinery alone: hooked sends go one by one);
- ``traced``: a TracerProvider with a BatchSpanProcessor and an exporter that drops every span;
- ``metered``: ``traced`` plus a MeterProvider (an in-memory reader, read once at the end).

Kinds: ``sync`` (``send``), ``async`` (``send_async``, 256 in flight, auto-batched where no
hook), ``push`` (a backlog sent beforehand by a producer of the same mode, drained by a
PushConsumer with a per-message listener: the consumer's process spans), ``span`` (modes
traced and metered only, no broker: the send hook's before and after per send, in-process,
next to the OpenTelemetry SDK's bare span: shmq's part of a traced send). Reported per kind
and mode, medians of ``--rounds``: the rate and the child's CPU per message (all its threads),
and the CPU over ``off``: what each message pays for the mode.

    .venv/bin/python /path/to/otel_bench.py [--seconds S] [--messages N] [--rounds R] [--modes ...] [--kinds ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(
    0, os.getcwd()
)  # the tree to measure: run it from there (mode off also runs on a tree without shmq.otel)

import shmq
from shmq import ConsumeFrom, ConsumeResult, Message, MessageBatch, Producer, PushConsumer
from tools.bench.windowed import send_async_for

BODY = b"x" * 100
TOPIC = "Bench"
CONFIG = {"mappedFileSizeCommitLog": 256 * 1024 * 1024}
MODES = ("off", "unset", "hook", "traced", "metered")


class NoopHook:
    def send_message_before(self, ctx: Any) -> None:
        pass

    def send_message_after(self, ctx: Any) -> None:
        pass


def _providers(mode: str) -> None:
    """The child's providers (before any client is made, as shmq.otel asks)."""
    if mode not in ("traced", "metered"):
        return
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(tp)
    if mode == "metered":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def _producer(broker: str, mode: str) -> Producer:
    p = Producer("bench", broker=broker)
    if mode == "hook":
        p.register_send_hook(NoopHook())
    return p.start()


def _sends(broker: str, mode: str, kind: str, seconds: float) -> tuple[float, float]:
    with _producer(broker, mode) as p:
        msg = Message(TOPIC, BODY)

        def run(s: float) -> int:
            if kind == "async":
                return send_async_for(p, msg, s)
            n, end = 0, time.perf_counter() + s
            while time.perf_counter() < end:
                p.send(msg)
                n += 1
            return n

        run(0.3)  # warm up: attach, first segment, topic creation
        cpu, start = time.process_time(), time.perf_counter()
        n = run(seconds)
        return n / (time.perf_counter() - start), (time.process_time() - cpu) / n * 1e6


def _push(broker: str, mode: str, count: int) -> tuple[float, float]:
    with _producer(broker, mode) as p:
        for i in range(0, count, 1000):
            p.send_batch(MessageBatch(TOPIC, [BODY] * min(1000, count - i)))
    got = [0]
    done = threading.Event()

    def listener(msgs: list[shmq.MessageExt], _ctx: shmq.ConsumeContext) -> ConsumeResult:
        got[0] += len(msgs)
        if got[0] >= count:
            done.set()
        return ConsumeResult.SUCCESS

    c = PushConsumer("bench-cg", broker=broker, consume_from=ConsumeFrom.FIRST_OFFSET)
    c.subscribe(TOPIC)
    c.register_listener(listener)
    cpu, start = time.process_time(), time.perf_counter()
    c.start()
    try:
        if not done.wait(120):
            raise TimeoutError(f"{got[0]} of {count} messages consumed in 120 s")
        return count / (time.perf_counter() - start), (time.process_time() - cpu) / count * 1e6
    finally:
        c.shutdown()


def _span_cost(count: int) -> tuple[float, float]:
    """In this process, no broker: CPU per send of the send hook's before and after (span,
    attributes, traceparent, end), and of the SDK's span alone (start with no attributes, end).
    Mode traced or metered only (the hook exists only with a provider)."""
    from opentelemetry import trace

    from shmq.client.hooks import SYNC, SendMessageContext
    from shmq.otel.gate import send_hook

    hook = send_hook("bench")
    if hook is None:
        raise SystemExit("kind span needs mode traced or metered")
    tracer = trace.get_tracer("bench")
    msg = Message(TOPIC, BODY, tags="TagA", keys="k1")

    def hooked() -> None:
        ctx = SendMessageContext("bench", msg, SYNC)
        hook.send_message_before(ctx)
        hook.send_message_after(ctx)

    def bare() -> None:
        tracer.start_span("send").end()

    out = []
    for f in (hooked, bare):
        for _ in range(count // 10):
            f()  # warm up
        cpu = time.process_time()
        for _ in range(count):
            f()
        out.append((time.process_time() - cpu) / count * 1e6)
    return out[0], out[1]


def child(argv: list[str]) -> None:
    mode, kind, broker, seconds, count = argv[0], argv[1], argv[2], float(argv[3]), int(argv[4])
    _providers(mode)
    if kind == "span":
        hooked, bare = _span_cost(count)
        print(json.dumps({"rate": 1e6 / hooked, "cpu_us": hooked, "sdk_span_us": bare}))
        return
    rate, cpu = _push(broker, mode, count) if kind == "push" else _sends(broker, mode, kind, seconds)
    print(json.dumps({"rate": rate, "cpu_us": cpu}))


def run(mode: str, kind: str, seconds: float, count: int) -> dict[str, float]:
    """One run on a fresh store, in a child process."""
    env = {**os.environ}
    if mode == "off":
        env["SHMQ_OTEL"] = "0"
    else:
        env.pop("SHMQ_OTEL", None)
    with tempfile.TemporaryDirectory() as d, shmq.Broker(d + "/store", f"otelb{os.getpid()}", CONFIG) as b:
        out = subprocess.run(
            [sys.executable, __file__, "--child", mode, kind, b.name, str(seconds), str(count)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="length of a send run")
    ap.add_argument("--messages", type=int, default=50_000, help="backlog a push run drains")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kinds", default="sync,async,push")
    ap.add_argument("--modes", default=",".join(MODES))
    a = ap.parse_args()
    print(f"{'kind':6} {'mode':8} {'msgs/s (median)':>16} {'CPU us/msg':>10} {'over off':>9}")
    for kind in a.kinds.split(","):
        base = None
        for mode in a.modes.split(","):
            runs = [run(mode, kind, a.seconds, a.messages) for _ in range(a.rounds)]
            rate = statistics.median(r["rate"] for r in runs)
            cpu = statistics.median(r["cpu_us"] for r in runs)
            base = cpu if base is None else base
            sdk = (
                f"  (the SDK's bare span: {statistics.median(r['sdk_span_us'] for r in runs):.1f})"
                if kind == "span"
                else ""
            )
            print(f"{kind:6} {mode:8} {rate:16,.0f} {cpu:10.1f} {cpu - base:+9.1f}{sdk}", flush=True)


if __name__ == "__main__":
    main()
