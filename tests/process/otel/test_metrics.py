"""The client metrics through the OpenTelemetry metrics API, read with the SDK's in-memory reader."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK (the dev extra) is not installed")

import shmq
from tests.process.otel.test_spans import by_name, child


def points(metrics: list[dict[str, Any]], name: str, **attrs: str) -> list[dict[str, Any]]:
    return [m for m in metrics if m["name"] == name and all(m["attributes"].get(k) == v for k, v in attrs.items())]


def test_send_and_consume_metrics(store_dir, broker_name, config, tmp_path):
    with shmq.Broker(store_dir, broker_name, config):
        sent = child(tmp_path, "produce", broker=broker_name, topic="OM")
        got = child(tmp_path, "push", broker=broker_name, topic="OM", group="otel-mcg", expect=5, give_back=True)
        polled = child(tmp_path, "lite", broker=broker_name, topic="OM", group="otel-mlg", expect=5)
    m = sent["metrics"]
    common = {"messaging.system": "rocketmq", "messaging.destination.name": "OM"}
    (sent_count,) = points(m, "messaging.client.sent.messages", **common, **{"messaging.operation.name": "send"})
    assert (sent_count["value"], sent_count["unit"], sent_count["scope"]) == (5, "{message}", "shmq")
    (send_time,) = points(m, "messaging.client.operation.duration", **common)
    assert (send_time["count"], send_time["unit"]) == (3, "s")  # a sync send, an async one, a batch
    assert send_time["bounds"][0] == 0.005 and send_time["bounds"][-1] == 10.0 and 0 < send_time["sum"] < 30

    m = got["metrics"]
    ok = {**common, "messaging.consumer.group.name": "otel-mcg", "messaging.operation.name": "process"}
    (process_ok,) = [p for p in points(m, "messaging.process.duration", **ok) if "error.type" not in p["attributes"]]
    (process_failed,) = points(m, "messaging.process.duration", **ok, **{"error.type": "RECONSUME_LATER"})
    assert (process_ok["count"], process_failed["count"], process_ok["unit"]) == (5, 1, "s")
    consumed = points(m, "messaging.client.consumed.messages", **ok)
    assert sum(p["value"] for p in consumed if "error.type" not in p["attributes"]) == 5
    # the given-back call's span says so
    failed = [s for s in by_name(got["spans"], "process OM") if s["status"] == "ERROR"]
    assert len(failed) == 1 and failed[0]["attributes"]["error.type"] == "RECONSUME_LATER"

    m = polled["metrics"]
    received = {"messaging.consumer.group.name": "otel-mlg", "messaging.operation.name": "receive"}
    assert sum(p["value"] for p in points(m, "messaging.client.consumed.messages", **received)) == 5
    assert sum(p["count"] for p in points(m, "messaging.client.operation.duration", **received)) >= 1
