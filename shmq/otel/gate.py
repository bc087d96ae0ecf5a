"""Whether a client is instrumented, decided once when the client is made.

The clients ask here for their hook (``send_hook``, ``process_hook``) or receive observer
(``receive_observer``); None means "not instrumented", and then nothing of OpenTelemetry is
imported. Instrumented: ``SHMQ_OTEL`` is not ``0``, opentelemetry-api is importable, and the
application set a TracerProvider (spans) or a MeterProvider (metrics) before making the client.

Why the provider must be set first: with no provider, OpenTelemetry's API hands out no-op
proxies, and a client that registered its hooks anyway would pay them on every send and
listener call for spans nobody records (and a cluster producer's sends would leave its
cluster-wide auto batches, see shmq.client.producer.cluster). A client made
before the providers is not instrumented; make it after ``set_tracer_provider`` /
``set_meter_provider``, as OpenTelemetry's own instrumentations expect their providers first.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import TYPE_CHECKING

from shmq.model.consumer_types import MessageModel
from shmq.trace.dispatcher import INNER_PRODUCER_PREFIX

if TYPE_CHECKING:
    from shmq.otel.hooks import ProcessSpanHook, ReceiveObserver, SendSpanHook
    from shmq.otel.instruments import Instruments

log = logging.getLogger(__name__)

ENV = "SHMQ_OTEL"  # "0": never instrument, and never import opentelemetry

_installed: bool | None = None  # opentelemetry-api importable (looked up once, without importing it)


def installed() -> bool:
    """The extra is there and not switched off by ``SHMQ_OTEL=0`` (the environment is read each
    time: a test or a launcher may set it after shmq was imported)."""
    global _installed
    if os.environ.get(ENV, "1").strip() == "0":
        return False
    if _installed is None:
        try:
            _installed = importlib.util.find_spec("opentelemetry.trace") is not None
        except (ImportError, ValueError):  # a broken or blocked namespace package: not installed
            _installed = False
    return _installed


def _instruments(group: str) -> Instruments | None:
    """The process's tracer and meters if a provider is set; None for shmq's own trace producer
    (its sends carry trace records of other sends: spans of them would only be noise)."""
    global _installed
    if group.startswith(INNER_PRODUCER_PREFIX) or not installed():
        return None
    try:
        from shmq.otel.instruments import current
    except ImportError as e:  # an opentelemetry too old or half installed: say so once, run without it
        _installed = False
        log.warning("OpenTelemetry is installed but cannot be used (%s): shmq's clients are not instrumented", e)
        return None
    return current()


def send_hook(group: str) -> SendSpanHook | None:
    """A producer's send hook: ``send`` spans and the send metrics."""
    inst = _instruments(group)
    if inst is None:
        return None
    from shmq.otel.hooks import SendSpanHook

    return SendSpanHook(inst)


def process_hook(group: str, model: MessageModel) -> ProcessSpanHook | None:
    """A push consumer's consume hook: a ``process`` span around each listener call."""
    inst = _instruments(group)
    if inst is None:
        return None
    from shmq.otel.hooks import ProcessSpanHook

    return ProcessSpanHook(inst, group, model)


def receive_observer(group: str, model: MessageModel | None) -> ReceiveObserver | None:
    """A pull-style consumer's observer: a ``receive`` span per poll, pull or receive that got messages.
    ``model`` None: the SimpleConsumer's (RocketMQ 5's POP consumption, no consumption model)."""
    inst = _instruments(group)
    if inst is None:
        return None
    from shmq.otel.hooks import ReceiveObserver

    return ReceiveObserver(inst, group, model)
