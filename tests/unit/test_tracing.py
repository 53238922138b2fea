"""Trace propagation: a stored traceparent is a parent when valid and ignored when not
(rule 14 (trace-never-fails))."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from django_ultjobs.observability.tracing import (
    acting_as,
    capture_trace_context,
    current_actor,
    job_span,
    parent_context,
)

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7
VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _span_context(ctx: Any) -> SpanContext:
    return trace.get_current_span(ctx).get_span_context()


def test_a_valid_traceparent_is_the_parent() -> None:  # rule 14 (trace-never-fails)
    ctx = parent_context(VALID, "")
    assert ctx is not None
    span_context = _span_context(ctx)
    assert (span_context.trace_id, span_context.span_id, span_context.is_remote) == (
        TRACE_ID, SPAN_ID, True)
    assert span_context.trace_flags.sampled


def test_a_valid_traceparent_with_a_tracestate_keeps_it() -> None:  # rule 14 (trace-never-fails)
    ctx = parent_context(VALID, "vendor=value,other=x")
    assert ctx is not None
    assert _span_context(ctx).trace_state.get("vendor") == "value"


def test_a_garbage_tracestate_does_not_lose_a_valid_parent() -> None:  # rule 14 (trace-never-fails)
    for tracestate in ["=", ",,,", "\x00", "é" * 600, "a=" + "b" * 300]:
        ctx = parent_context(VALID, tracestate)
        assert ctx is not None and _span_context(ctx).trace_id == TRACE_ID


@pytest.mark.parametrize("traceparent", [
    None, "", " ", "00", "garbage",
    VALID.upper(),                                                    # W3C: lowercase hex only
    VALID + "-extra", " " + VALID,
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",     # all-zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",     # all-zero span id
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",     # version ff is invalid
    "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
    VALID * 20,
])
# rule 14 (trace-never-fails)
def test_a_malformed_traceparent_is_ignored(traceparent: str | None) -> None:
    assert parent_context(traceparent, "vendor=value") is None


# rule 14 (trace-never-fails)
@settings(deadline=None)  # a loaded CI machine must not turn slowness into a failure
@given(st.text(), st.text())
def test_parent_context_never_raises_on_any_text(traceparent: str,
                                                 tracestate: str) -> None:
    ctx = parent_context(traceparent, tracestate)
    assert ctx is None or _span_context(ctx).is_valid


@settings(deadline=None)  # a loaded CI machine must not turn slowness into a failure
@given(st.binary(), st.sampled_from(["utf-8", "latin-1", "utf-16"]))
def test_parent_context_never_raises_on_decoded_bytes(raw: bytes, encoding: str) -> None:
    text = raw.decode(encoding, errors="surrogateescape" if encoding == "utf-8" else "replace")
    ctx = parent_context(text, text)
    assert ctx is None or _span_context(ctx).is_valid


@settings(deadline=None)  # a loaded CI machine must not turn slowness into a failure
@given(st.from_regex(r"\A[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}\Z"))
def test_parent_context_never_raises_on_well_shaped_headers(traceparent: str) -> None:
    ctx = parent_context(traceparent, None)
    assert ctx is None or _span_context(ctx).is_valid


# rule 14 (trace-never-fails)
@pytest.mark.parametrize("traceparent", ["garbage", "\x00\ud800", VALID.upper(), VALID])
def test_the_job_span_opens_whatever_the_row_holds(traceparent: str) -> None:
    with job_span("unit", {"job.name": "unit", "job.id": 1}, traceparent, "\x00") as span:
        assert span is not None


def test_capture_without_a_span_is_empty() -> None:
    assert capture_trace_context() == ("", "")


def test_capture_then_parent_round_trips_the_current_span() -> None:  # rule 14 (trace-never-fails)
    span = NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, is_remote=False,
                                        trace_flags=TraceFlags(TraceFlags.SAMPLED)))
    with trace.use_span(span):
        traceparent, tracestate = capture_trace_context()
    assert traceparent == VALID
    ctx = parent_context(traceparent, tracestate)
    assert ctx is not None and _span_context(ctx).span_id == SPAN_ID


def test_the_actor_is_the_innermost_acting_as() -> None:
    outside = current_actor()
    assert outside
    with acting_as("user:1"):
        assert current_actor() == "user:1"
        with acting_as("job:7"):
            assert current_actor() == "job:7"
        assert current_actor() == "user:1"
    assert current_actor() == outside


def test_acting_as_decorates_a_function_and_may_be_entered_again_inside_itself() -> None:
    outside = current_actor()

    @acting_as("webhook")
    def handler(depth: int) -> list[str]:
        seen = [current_actor()]
        if depth:
            seen += handler(depth - 1)
        return seen

    assert handler(2) == ["webhook"] * 3
    assert current_actor() == outside
    block = acting_as("user:2")
    with block:
        with acting_as("job:3"):
            with block:
                assert current_actor() == "user:2"
            assert current_actor() == "job:3"
        assert current_actor() == "user:2"
    assert current_actor() == outside
