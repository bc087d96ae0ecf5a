"""OpenTelemetry spans across processes: a producer's send span and a consumer's process or
receive span in another process form one trace, through the ``traceparent`` property."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK (the dev extra) is not installed")

import shmq
from tests.process.cluster import running_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def child(tmp_path: Any, scenario: str, env: dict[str, str] | None = None, **args: Any) -> dict[str, Any]:
    """Run one scenario of otel_child.py in a process of its own; what it wrote."""
    out = os.path.join(str(tmp_path), f"{scenario}-{len(os.listdir(str(tmp_path)))}.json")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.process.otel.otel_child", scenario, out, json.dumps(args)],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out) as f:
        return json.load(f)


def by_name(spans: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"].startswith(prefix)]


def test_send_and_process_are_one_trace_across_processes(store_dir, broker_name, config, tmp_path):
    with shmq.Broker(store_dir, broker_name, config):
        sent = child(tmp_path, "produce", broker=broker_name, topic="OT")
        got = child(tmp_path, "push", broker=broker_name, topic="OT", group="otel-cg", expect=5)
    (request,) = by_name(sent["spans"], "request")
    sends = by_name(sent["spans"], "send ")
    assert len(sends) == 3
    for s in sends:  # children of the application's span, kind and attributes by the conventions
        assert (s["name"], s["kind"], s["trace_id"], s["parent"]) == (
            "send OT",
            "PRODUCER",
            request["trace_id"],
            request["span_id"],
        )
        a = s["attributes"]
        assert (a["messaging.system"], a["messaging.operation.name"], a["messaging.destination.name"]) == (
            "rocketmq",
            "send",
            "OT",
        )
        assert a["server.address"] == broker_name and s["status"] == "UNSET"
    one = next(s for s in sends if s["attributes"].get("messaging.message.id") == sent["ids"]["sync"])
    assert one["attributes"]["messaging.rocketmq.message.tag"] == "TagA"
    assert one["attributes"]["messaging.rocketmq.message.keys"] == ["k1", "k2"]
    assert one["attributes"]["messaging.rocketmq.message.type"] == "normal"
    (batch,) = [s for s in sends if s["attributes"].get("messaging.batch.message_count") == 3]

    assert sorted(got["bodies"]) == ["async", "b0", "b1", "b2", "sync"]
    processes = by_name(got["spans"], "process ")
    assert len(processes) == 5
    send_of = {s["attributes"].get("messaging.message.id"): s for s in sends}
    for p in processes:  # each continues its producer's trace: parented by the send span (remote)
        a = p["attributes"]
        assert (p["name"], p["kind"], p["trace_id"], p["parent_remote"]) == (
            "process OT",
            "CONSUMER",
            request["trace_id"],
            True,
        )
        assert (
            a["messaging.consumer.group.name"] == "otel-cg"
            and a["messaging.rocketmq.consumption_model"] == "clustering"
        )
        want = send_of.get(a["messaging.message.id"], batch)  # the batch's messages carry the batch span's context
        assert p["parent"] == want["span_id"], (p, want)
    assert sum(p["parent"] == batch["span_id"] for p in processes) == 3
    # the listener's own span runs inside the process span
    handles = by_name(got["spans"], "handle")
    assert sorted(h["parent"] for h in handles) == sorted(p["span_id"] for p in processes)


def test_batches_are_linked(store_dir, broker_name, config, tmp_path):
    """A listener call over several messages, and a poll, link to each producer's send span."""
    with shmq.Broker(store_dir, broker_name, config):
        sent = child(tmp_path, "produce", broker=broker_name, topic="OB")
        got = child(tmp_path, "push", broker=broker_name, topic="OB", group="otel-bcg", expect=5, batch=8)
        polled = child(tmp_path, "lite", broker=broker_name, topic="OB", group="otel-lcg", expect=5)
    send_ids = {s["span_id"] for s in by_name(sent["spans"], "send ")}
    processes = by_name(got["spans"], "process ")
    assert sum(got["calls"]) == 5 and len(processes) == len(got["calls"])
    for p in processes:
        if p["attributes"].get("messaging.batch.message_count", 1) > 1:
            assert p["parent_remote"] is None and p["links"] and set(p["links"]) <= send_ids
        else:
            assert p["parent"] in send_ids
    linked = {x for p in processes for x in p["links"]} | {p["parent"] for p in processes if p["parent_remote"]}
    assert linked == send_ids
    receives = by_name(polled["spans"], "receive")
    assert sorted(polled["bodies"]) == ["async", "b0", "b1", "b2", "sync"]
    assert receives and all(r["kind"] == "CLIENT" and r["parent"] is None for r in receives)
    assert {x for r in receives for x in r["links"]} == send_ids
    assert sum(r["attributes"].get("messaging.batch.message_count", 1) for r in receives) == 5


def test_simple_and_pull_consumers_make_receive_spans(store_dir, broker_name, config, tmp_path):
    with shmq.Broker(store_dir, broker_name, config):
        sent = child(tmp_path, "produce", broker=broker_name, topic="OS")
        popped = child(tmp_path, "simple", broker=broker_name, topic="OS", group="otel-scg", expect=5)
        pulled = child(tmp_path, "pull", broker=broker_name, topic="OS", group="otel-pcg")
    send_ids = {s["span_id"] for s in by_name(sent["spans"], "send ")}
    for out, model in ((popped, None), (pulled, None)):
        assert sorted(out["bodies"]) == ["async", "b0", "b1", "b2", "sync"]
        receives = by_name(out["spans"], "receive OS")
        assert receives and {x for r in receives for x in r["links"]} == send_ids
        assert all(r["attributes"].get("messaging.rocketmq.consumption_model") == model for r in receives)


def test_aio_twins(store_dir, broker_name, config, tmp_path):
    """Concurrent aio sends each get their own task's span as parent; the aio consumers continue them."""
    with shmq.Broker(store_dir, broker_name, config):
        got = child(tmp_path, "aio", broker=broker_name, topic="OA")
    spans = got["spans"]
    tasks = {s["span_id"]: s["name"] for s in by_name(spans, "task-")}
    sends = by_name(spans, "send OA")
    assert len(sends) == 3 and sorted(tasks[s["parent"]] for s in sends) == ["task-0", "task-1", "task-2"]
    send_of = {s["attributes"]["messaging.message.id"]: s["span_id"] for s in sends}
    assert set(send_of) == set(got["ids"])
    processes = by_name(spans, "process OA")
    assert sorted(got["bodies"]) == ["t0", "t1", "t2"] and len(processes) == 3
    assert {p["parent"] for p in processes} == set(send_of.values())
    assert all(send_of[p["attributes"]["messaging.message.id"]] == p["parent"] for p in processes)
    assert sorted(got["polled"]) == sorted(got["popped"]) == ["t0", "t1", "t2"]
    for group in ("otel-aio-lg", "otel-aio-sg"):
        receives = [
            r for r in by_name(spans, "receive OA") if r["attributes"]["messaging.consumer.group.name"] == group
        ]
        assert {x for r in receives for x in r["links"]} == set(send_of.values()), group


def test_a_cluster_carries_the_trace(ipc_tracker, tmp_path):
    """Producer and consumers over a name server: sends to several brokers, one trace each."""
    with running_cluster(ipc_tracker, tmp_path) as c:
        for b in c.brokers:
            shmq.Admin(b.name).create_topic("OC", 2)
        c.wait_route("OC")
        sent = child(tmp_path, "produce", namesrv=c.namesrv, topic="OC")
        got = child(tmp_path, "push", namesrv=c.namesrv, topic="OC", group="otel-ccg", expect=5)
        popped = child(tmp_path, "simple", namesrv=c.namesrv, topic="OC", group="otel-cscg", expect=5)
    sends = by_name(sent["spans"], "send OC")
    assert len(sends) == 3
    send_ids = {s["span_id"] for s in sends}
    processes = by_name(got["spans"], "process OC")
    assert len(processes) == 5 and {p["parent"] for p in processes} == send_ids
    receives = by_name(popped["spans"], "receive OC")
    assert {x for r in receives for x in r["links"]} == send_ids
    (request,) = by_name(sent["spans"], "request")
    assert all(s["parent"] == request["span_id"] for s in sends)
    ids = {s["attributes"].get("messaging.message.id") for s in sends}
    assert set(sent["ids"].values()) < ids  # the async send too went on its own (no auto batch)
    assert all(s["attributes"]["server.address"] for s in sends)
