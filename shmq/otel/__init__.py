"""OpenTelemetry traces and client metrics (the ``otel`` extra: ``pip install 'shmq[otel]'``).

With opentelemetry-api importable, ``SHMQ_OTEL`` not ``0``, and a TracerProvider or a
MeterProvider set by the application before a client is made, that client emits spans and
metrics by the OpenTelemetry messaging semantic conventions (see ``shmq.otel.gate``). Otherwise
nothing of OpenTelemetry is imported and the clients run as without this package: no hook is
registered, so their hot paths pay the one test of an empty hook list they always paid.
"""
