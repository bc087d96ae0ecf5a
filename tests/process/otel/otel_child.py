"""A client process for the OpenTelemetry tests: sets a TracerProvider with the SDK's in-memory
span exporter and a MeterProvider with its in-memory reader (unless the scenario runs without
them), runs one scenario against a broker or a cluster, and writes what it saw as JSON.

    python -m tests.process.otel.otel_child SCENARIO OUT.json '{"broker": ..., ...}'
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import shmq
from shmq import ConsumeFrom, ConsumeResult, Message

WAIT_S = 30.0
# shmq's modules that import OpenTelemetry (shmq.otel.gate, which the clients import, does not)
OTEL_MODULES = {"shmq.otel.hooks", "shmq.otel.instruments", "shmq.otel.propagation", "shmq.otel.attributes"}


def where(args: dict[str, Any]) -> dict[str, str]:
    """The client's target: one broker or a cluster's name server."""
    return {"namesrv": args["namesrv"]} if "namesrv" in args else {"broker": args["broker"]}


def providers() -> tuple[Any, Any]:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(tp)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return exporter, reader


def span_rows(exporter: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "kind": s.kind.name,
            "trace_id": f"{s.context.trace_id:032x}",
            "span_id": f"{s.context.span_id:016x}",
            "parent": f"{s.parent.span_id:016x}" if s.parent is not None else None,
            "parent_remote": s.parent.is_remote if s.parent is not None else None,
            "links": [f"{link.context.span_id:016x}" for link in s.links],
            "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in s.attributes.items()},
            "status": s.status.status_code.name,
            "start": s.start_time,
            "end": s.end_time,
        }
        for s in exporter.get_finished_spans()
    ]


def metric_rows(reader: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    data = reader.get_metrics_data()  # None when no instrument was made
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for dp in m.data.data_points:
                    row = {"name": m.name, "unit": m.unit, "scope": sm.scope.name, "attributes": dict(dp.attributes)}
                    if hasattr(dp, "bucket_counts"):
                        row.update(count=dp.count, sum=dp.sum, bounds=list(dp.explicit_bounds))
                    else:
                        row["value"] = dp.value
                    out.append(row)
    return out


# ---------------------------------------------------------------------- scenarios


def produce(args: dict[str, Any]) -> dict[str, Any]:
    """Inside an application span: a sync send, an async one and a batch of three."""
    from opentelemetry import trace

    topic = args["topic"]
    with trace.get_tracer("app").start_as_current_span("request"), shmq.Producer("otel-pg", **where(args)) as p:
        one = p.send(Message(topic, b"sync", tags="TagA", keys="k1 k2"))
        two = p.send_async(Message(topic, b"async")).result(WAIT_S)
        batch = p.send_batch([Message(topic, b"b%d" % i) for i in range(3)])
    return {"ids": {"sync": one.msg_id, "async": two.msg_id}, "batch_count": batch.count}


def push(args: dict[str, Any]) -> dict[str, Any]:
    """A push consumer until ``expect`` messages; the listener makes a span of its own per call
    (``plain``: not, and nothing of OpenTelemetry imported here)."""
    handle: Callable[[], AbstractContextManager[object]] = nullcontext
    if not args.get("plain"):
        from opentelemetry import trace

        handle = functools.partial(trace.get_tracer("app").start_as_current_span, "handle")
    got: list[str] = []
    calls: list[int] = []
    done = threading.Event()
    lock = threading.Lock()

    def listener(msgs: list[shmq.MessageExt], _ctx: shmq.ConsumeContext) -> ConsumeResult:
        with handle(), lock:
            if args.get("give_back") and not calls:  # the first call fails: RECONSUME_LATER
                calls.append(0)
                return ConsumeResult.RECONSUME_LATER
            got.extend(m.body.decode() for m in msgs)
            calls.append(len(msgs))
            if len(got) >= args["expect"]:
                done.set()
        return ConsumeResult.SUCCESS

    c = shmq.PushConsumer(
        args["group"],
        consume_from=ConsumeFrom.FIRST_OFFSET,
        consume_message_batch_max_size=args.get("batch", 1),
        **where(args),
    )
    c.subscribe(args["topic"])
    c.register_listener(listener)
    c.start()
    try:
        assert done.wait(WAIT_S), got
    finally:
        c.shutdown()
    return {"bodies": got, "calls": calls}


def lite(args: dict[str, Any]) -> dict[str, Any]:
    """A lite pull consumer polling until ``expect`` messages."""
    got: list[str] = []
    c = shmq.LitePullConsumer(args["group"], consume_from=ConsumeFrom.FIRST_OFFSET, **where(args))
    c.subscribe(args["topic"])
    c.start()
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < args["expect"] and time.monotonic() < deadline:
            got += [m.body.decode() for m in c.poll(1.0)]
    finally:
        c.shutdown()
    return {"bodies": got}


def simple(args: dict[str, Any]) -> dict[str, Any]:
    """A SimpleConsumer receiving (and acking) until ``expect`` messages."""
    got: list[str] = []
    c = shmq.SimpleConsumer(args["group"], subscriptions={args["topic"]: "*"}, await_duration=1.0, **where(args))
    c.start()
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < args["expect"] and time.monotonic() < deadline:
            for m in c.receive(16, 30.0):
                got.append(m.body.decode())
                c.ack(m)
    finally:
        c.shutdown()
    return {"bodies": got}


def pull(args: dict[str, Any]) -> dict[str, Any]:
    """A PullConsumer reading every queue of the topic from offset 0."""
    got: list[str] = []
    with shmq.PullConsumer(args["group"], **where(args)) as c:
        for mq in c.fetch_queues(args["topic"]):
            offset = 0
            while True:
                r = c.pull(mq, offset=offset, max_nums=32, timeout=0.0)
                if not r.messages:
                    break
                got += [m.body.decode() for m in r.messages]
                offset = r.next_begin_offset
    return {"bodies": got}


def aio(args: dict[str, Any]) -> dict[str, Any]:
    """shmq.aio: three tasks, each in a span of its own, send at once; then an aio push consumer,
    an aio lite pull consumer and an aio SimpleConsumer read them."""
    from opentelemetry import trace

    tracer = trace.get_tracer("app")
    topic = args["topic"]

    async def run() -> dict[str, Any]:
        async with shmq.aio.Producer("otel-aio-pg", **where(args)) as p:

            async def task(i: int) -> str:
                with tracer.start_as_current_span(f"task-{i}"):
                    return (await p.send(Message(topic, b"t%d" % i))).msg_id

            ids = await asyncio.gather(*(task(i) for i in range(3)))
        got: list[str] = []
        c = shmq.aio.PushConsumer("otel-aio-cg", consume_from=ConsumeFrom.FIRST_OFFSET, **where(args))
        async with c:

            async def loop() -> None:
                async for m in c.messages(topic):
                    got.append(m.body.decode())
                    if len(got) == 3:
                        break

            await asyncio.wait_for(loop(), WAIT_S)
        polled: list[str] = []
        async with shmq.aio.LitePullConsumer("otel-aio-lg", consume_from=ConsumeFrom.FIRST_OFFSET, **where(args)) as lp:
            lp.subscribe(topic)
            deadline = time.monotonic() + WAIT_S
            while len(polled) < 3 and time.monotonic() < deadline:
                polled += [m.body.decode() for m in await lp.poll(1.0)]
        popped: list[str] = []
        async with shmq.aio.SimpleConsumer(
            "otel-aio-sg", subscriptions={topic: "*"}, await_duration=1.0, **where(args)
        ) as sc:
            deadline = time.monotonic() + WAIT_S
            while len(popped) < 3 and time.monotonic() < deadline:
                for m in await sc.receive(16, 30.0):
                    popped.append(m.body.decode())
                    await sc.ack(m)
        return {"ids": list(ids), "bodies": got, "polled": polled, "popped": popped}

    return asyncio.run(run())


def untraced(args: dict[str, Any]) -> dict[str, Any]:
    """Send and consume without asking for OpenTelemetry; report which of its modules got loaded.
    ``block``: make that package unimportable first (``opentelemetry``: as where the extra is
    not installed; one of its modules: as a broken install)."""
    blocked = args.get("block")
    if blocked:

        class Blocker:
            def find_spec(self, name: str, *_: object) -> None:
                if name == blocked or name.startswith(blocked + "."):
                    raise ModuleNotFoundError(f"No module named {name!r}")

        sys.meta_path.insert(0, Blocker())  # type: ignore[arg-type]
    with shmq.Producer("otel-plain-pg", **where(args)) as p:
        p.send(Message(args["topic"], b"x"))
        p.send_async(Message(args["topic"], b"y")).result(WAIT_S)
        otel = p.otel
    out = push({**args, "expect": 2, "group": "otel-plain-cg", "plain": True})
    loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry") or m in OTEL_MODULES)
    return {**out, "producer_otel": otel is not None, "loaded": loaded}


SCENARIOS = {"produce": produce, "push": push, "lite": lite, "simple": simple, "pull": pull, "aio": aio}


def main() -> None:
    scenario, out_path, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    if scenario == "untraced":
        result = untraced(args)
    else:
        exporter, reader = providers()
        result = SCENARIOS[scenario](args)
        result["spans"] = span_rows(exporter)
        result["metrics"] = metric_rows(reader)
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
