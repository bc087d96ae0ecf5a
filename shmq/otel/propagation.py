"""The W3C trace context in message properties: ``traceparent`` and ``tracestate``.

Written and read here directly rather than through OpenTelemetry's global propagator: the
properties are part of the message format (every shmq client, of any configuration, must find
the producer's context in the same place), and formatting one header is a few hundred ns where
the propagator's carrier machinery costs several us per message.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, TraceFlags, TraceState

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"


def inject(span: trace.Span, props: dict[str, str] | None) -> dict[str, str]:
    """A copy of ``props`` with ``span``'s context (the caller's dict is not changed: it may be
    shared by messages or threads)."""
    sc = span.get_span_context()
    out = dict(props) if props else {}
    out[TRACEPARENT] = f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"
    if sc.trace_state:
        out[TRACESTATE] = sc.trace_state.to_header()
    elif TRACESTATE in out:
        del out[TRACESTATE]  # a forwarded message's old state belongs to its old context
    return out


def extract(props: dict[str, str] | None) -> SpanContext | None:
    """The producer's context from a message's properties; None if it has none or a malformed one."""
    if not props:
        return None
    header = props.get(TRACEPARENT)
    if header is None or len(header) < 55:
        return None
    parts = header.split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff" or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    if parts[0] == "00" and len(parts) != 4:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3][:2], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    state = props.get(TRACESTATE)
    return SpanContext(
        trace_id,
        span_id,
        is_remote=True,
        trace_flags=TraceFlags(flags & 1),
        trace_state=TraceState.from_header([state]) if state else None,
    )


def links(props_of: Iterable[dict[str, str] | None]) -> list[Link]:
    """One link per distinct producer context (a batch sent as one carries one context)."""
    out: list[Link] = []
    seen: set[tuple[int, int]] = set()
    for props in props_of:
        sc = extract(props)
        if sc is not None and (sc.trace_id, sc.span_id) not in seen:
            seen.add((sc.trace_id, sc.span_id))
            out.append(Link(sc))
    return out
