"""The process's tracer and client metric instruments (imported only when instrumenting).

The four client metrics of the messaging semantic conventions, seconds and messages:
``messaging.client.operation.duration`` (send and receive calls), ``messaging.process.duration``
(listener calls), ``messaging.client.sent.messages`` and ``messaging.client.consumed.messages``.
The histograms carry the conventions' advised buckets (5 ms to 10 s).
"""

from __future__ import annotations

from opentelemetry import metrics, trace

SCOPE = "shmq"  # the instrumentation scope's name
# the conventions' advice for messaging durations, seconds
DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]


class Instruments:
    """A tracer (None: no TracerProvider was set) and the metric instruments (None: no
    MeterProvider was set); one per pair of providers, shared by the process's clients."""

    def __init__(self, tracer: trace.Tracer | None, meter: metrics.Meter | None) -> None:
        self.tracer = tracer
        self.metered = meter is not None
        if meter is None:
            return
        self.operation_duration = meter.create_histogram(
            "messaging.client.operation.duration",
            unit="s",
            description="Duration of a messaging operation initiated by a producer or consumer client.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.process_duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Duration of processing operation.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.sent = meter.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Number of messages producer attempted to send to the broker.",
        )
        self.consumed = meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Number of messages that were delivered to the application.",
        )


_current: tuple[object, object, Instruments | None] | None = None  # (tracer provider, meter provider, instruments)


def _meter_provider_set(mp: metrics.MeterProvider) -> bool:
    """Whether the application set a MeterProvider: the API's default is a proxy whose class is
    private (``_ProxyMeterProvider``), so it is told by name, not imported."""
    return not isinstance(mp, metrics.NoOpMeterProvider) and type(mp).__name__ != "_ProxyMeterProvider"


def current() -> Instruments | None:
    """The instruments of the providers set now; None when neither is set."""
    global _current
    tp, mp = trace.get_tracer_provider(), metrics.get_meter_provider()
    if _current is not None and _current[0] is tp and _current[1] is mp:
        return _current[2]
    traced = not isinstance(tp, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    metered = _meter_provider_set(mp)
    inst = None
    if traced or metered:
        inst = Instruments(
            tp.get_tracer(SCOPE) if traced else None,
            mp.get_meter(SCOPE) if metered else None,
        )
    _current = (tp, mp, inst)
    return inst
