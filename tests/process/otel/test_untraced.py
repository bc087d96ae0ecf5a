"""Without the extra, with SHMQ_OTEL=0, or with no provider set, a client is not instrumented:
no hook, no auto-batch lost, and (extra absent or switched off) nothing of OpenTelemetry imported."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK (the dev extra) is not installed")

import shmq
from tests.process.otel.test_spans import child


def test_switched_off_or_absent_imports_nothing(store_dir, broker_name, config, tmp_path):
    with shmq.Broker(store_dir, broker_name, config):
        off = child(tmp_path, "untraced", env={"SHMQ_OTEL": "0"}, broker=broker_name, topic="ON", group="g")
        absent = child(tmp_path, "untraced", broker=broker_name, topic="ON", block="opentelemetry")
        unset = child(tmp_path, "untraced", broker=broker_name, topic="ON")
        broken = child(tmp_path, "untraced", broker=broker_name, topic="ON", block="opentelemetry.metrics")
    for out in (off, absent):
        assert sorted(out["bodies"]) == ["x", "y"] and not out["producer_otel"]
        assert out["loaded"] == []
    # the extra installed but no provider set: OpenTelemetry's API is asked, no hook is made
    assert sorted(unset["bodies"]) == ["x", "y"] and not unset["producer_otel"]
    assert "opentelemetry.trace" in unset["loaded"]
    assert not {"shmq.otel.hooks", "shmq.otel.propagation"} & set(unset["loaded"])
    # a half-installed OpenTelemetry (the metrics API missing): the clients run without it
    assert sorted(broken["bodies"]) == ["x", "y"] and not broken["producer_otel"]
    assert "shmq.otel.hooks" not in broken["loaded"]


def test_switched_off_with_a_provider_set(store_dir, broker_name, config, tmp_path):
    """SHMQ_OTEL=0 wins over an application's providers: no spans of shmq, no traceparent."""
    with shmq.Broker(store_dir, broker_name, config):
        sent = child(tmp_path, "produce", env={"SHMQ_OTEL": "0"}, broker=broker_name, topic="OF")
        got = child(tmp_path, "push", broker=broker_name, topic="OF", group="otel-fcg", expect=5)
    assert [s["name"] for s in sent["spans"]] == ["request"] and sent["metrics"] == []
    processes = [s for s in got["spans"] if s["name"] == "process OF"]
    assert len(processes) == 5 and all(p["parent"] is None for p in processes)  # roots: nothing to continue
