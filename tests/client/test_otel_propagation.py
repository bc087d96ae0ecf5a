"""The W3C trace context in message properties: written and read back, malformed headers ignored."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.trace", reason="the OpenTelemetry API (the dev extra) is not installed")

from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from shmq.otel.propagation import TRACEPARENT, TRACESTATE, extract, inject, links

TRACE_ID, SPAN_ID = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331


def span(state: TraceState | None = None, sampled: bool = True) -> NonRecordingSpan:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    return NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=flags, trace_state=state))


def test_inject_writes_the_w3c_header_and_leaves_the_callers_dict_alone():
    mine = {"a": "1", TRACESTATE: "old=1"}
    out = inject(span(), mine)
    assert out[TRACEPARENT] == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert TRACESTATE not in out  # the old context's state does not travel with the new one
    assert mine == {"a": "1", TRACESTATE: "old=1"} and out["a"] == "1"
    assert inject(span(sampled=False), None)[TRACEPARENT].endswith("-00")


def test_extract_reads_back_what_inject_wrote():
    props = inject(span(TraceState([("vendor", "x1")])), None)
    assert props[TRACESTATE] == "vendor=x1"
    sc = extract(props)
    assert sc is not None and sc.is_remote
    assert (sc.trace_id, sc.span_id, sc.trace_flags.sampled) == (TRACE_ID, SPAN_ID, True)
    assert sc.trace_state.get("vendor") == "x1"


@pytest.mark.parametrize(
    "header",
    [
        "",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",  # no flags
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",  # version 00 has four fields
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # version ff is invalid
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # zero span id
        "00-0af7651916cd43dd8448eb211c80319z-b7ad6b7169203331-01",  # not hex
        "00-0af7651916cd43dd8448eb211c8031-9cb7ad6b7169203331-01",  # field lengths
    ],
)
def test_a_malformed_traceparent_is_no_context(header):
    assert extract({TRACEPARENT: header}) is None


def test_no_properties_no_context_and_links_are_distinct():
    assert extract(None) is None and extract({}) is None
    props = inject(span(), None)
    other = {TRACEPARENT: "00-0af7651916cd43dd8448eb211c80319c-00000000000000aa-01"}
    assert [link.context.span_id for link in links([props, props, None, other, {}])] == [SPAN_ID, 0xAA]
