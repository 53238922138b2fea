"""Rule 14 (trace-never-fails): a malformed, oversized or hostile traceparent is ignored, never
fatal.

A job row's ``traceparent``/``tracestate`` may have been written by anybody (a script, a bad
migration, an attacker with SQL access): the worker must run the job whatever they hold, as a root
span when they do not name a valid parent. Property-based over arbitrary text (hypothesis), plus
crafted cases, both in-process and through real rows and a real worker.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from django_ultjobs.models import Job
from django_ultjobs.observability.tracing import job_span, parent_context
from tests.tracing import jobs
from tests.tracing.conftest import Spans, is_root, parent_id


def _expected(traceparent: str | None, tracestate: str | None) -> str:
    """What a run's span must be for these headers: a root span when they name no parent; a
    child when they name a sampled one; unrecorded when the parent was not sampled (the SDK's
    default sampler follows the caller's decision, as it should)."""
    ctx = parent_context(traceparent, tracestate)
    if ctx is None:
        return "root"
    return "child" if trace.get_current_span(ctx).get_span_context().trace_flags.sampled \
        else "unsampled"


def _actual(spans: list[ReadableSpan]) -> str:
    if not spans:
        return "unsampled"
    (span,) = spans
    return "root" if is_root(span) else "child"

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{SPAN_ID}-01"

#: Crafted headers, none of which names a parent. The column holds 512 characters on PostgreSQL
#: (and no NUL): the oversized and NUL cases reach the worker only on SQLite.
HOSTILE: dict[str, str] = {
    "empty": "",
    "blank": "   ",
    "version ff": f"ff-{TRACE_ID}-{SPAN_ID}-01",
    "zero trace id": f"00-{'0' * 32}-{SPAN_ID}-01",
    "zero span id": f"00-{TRACE_ID}-{'0' * 16}-01",
    "upper-case hex": VALID.upper(),
    "short": "00-abc",
    "extra field on version 00": f"{VALID}-ffff",
    "leading space": f" {VALID}",
    "trailing newline": f"{VALID}\n",
    "header injection": f"{VALID}\r\ntraceparent: {VALID}",
    "control chars": "\x01\x02\x1b[31m\x7f",
    "unicode digits": f"00-{'٣' * 32}-{'٣' * 16}-01",
    "unicode": "00-☃️-🐍-ü",
    "dashes": "-" * 55,
    "oversized": "0" * 10_000,
    "oversized, valid prefix": VALID + "-" + "a" * 10_000,
    "NUL": f"00-{TRACE_ID}\x00-{SPAN_ID}-01",
}
_POSTGRES_CANNOT_HOLD = {"oversized", "oversized, valid prefix", "NUL"}


def _storable(alias: str, value: str) -> bool:
    return alias == "default" or ("\x00" not in value and len(value) <= 512)


# -- the parser, in-process -----------------------------------------------------------------


@pytest.mark.parametrize("header", list(HOSTILE.values()), ids=list(HOSTILE))
def test_crafted_headers_name_no_parent(header: str) -> None:
    # rule 14 (trace-never-fails)
    assert parent_context(header, None) is None
    assert parent_context(header, header) is None


def test_a_valid_header_names_its_parent() -> None:
    ctx = parent_context(VALID, "vendor=value")
    assert ctx is not None
    span_context = trace.get_current_span(ctx).get_span_context()
    assert (f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}") == (TRACE_ID, SPAN_ID)
    assert span_context.is_remote and span_context.trace_flags.sampled
    assert span_context.trace_state.get("vendor") == "value"


# Near misses: the right shape and alphabet (including the invalid ones) as well as anything.
_NEAR = st.from_regex(r"[0-9a-fA-F]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}", fullmatch=True)
_ANY = st.one_of(st.text(), st.text(min_size=400, max_size=12_000), _NEAR, st.none())


@settings(max_examples=400, deadline=None)
@given(traceparent=_ANY, tracestate=_ANY)
def test_parent_context_never_raises_and_accepts_only_valid_headers(
        traceparent: str | None, tracestate: str | None) -> None:
    # rule 14 (trace-never-fails), as a property: never raises; a context only for a valid W3C
    # header (a later version than 00 is read as 00, as the W3C spec asks; ff is invalid).
    ctx = parent_context(traceparent, tracestate)
    if ctx is None:
        return
    assert traceparent is not None
    version, trace_id, span_id, _flags = traceparent.split("-")
    assert version != "ff" and int(trace_id, 16) and int(span_id, 16)
    span_context = trace.get_current_span(ctx).get_span_context()
    assert span_context.is_valid and span_context.is_remote
    assert (f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}") == (trace_id,
                                                                               span_id)


@settings(max_examples=200, deadline=None)
@given(tracestate=_ANY)
def test_a_hostile_tracestate_never_costs_the_valid_parent(tracestate: str | None) -> None:
    # rule 14 (trace-never-fails), as a property: the tracestate is the vendors' business; garbage
    # there is dropped.
    ctx = parent_context(VALID, tracestate)
    assert ctx is not None
    assert f"{trace.get_current_span(ctx).get_span_context().span_id:016x}" == SPAN_ID


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(traceparent=_ANY, tracestate=_ANY)
def test_job_span_opens_a_root_span_for_whatever_the_row_holds(
        spans: Spans, traceparent: str | None, tracestate: str | None) -> None:
    # rule 14 (trace-never-fails), as a property: the span opens, and is a root span unless the
    # header is valid.
    spans.clear()
    with job_span("hostile", {"job.id": 1}, traceparent or "", tracestate or "") as span:
        assert trace.get_current_span() is span
    assert _actual(spans.all()) == _expected(traceparent, tracestate)


# -- real rows, real worker ---------------------------------------------------------------------


def _run_with_headers(alias: str, headers: list[tuple[str, str]]) -> list[Job]:
    """Enqueue one job per ``(traceparent, tracestate)``, overwrite its row's headers through
    the ORM, drain the queue with a burst worker; return the rows."""
    ids = []
    for traceparent, tracestate in headers:
        job = jobs.noop.enqueue()
        Job.objects.using(alias).filter(pk=job.id).update(traceparent=traceparent,
                                                          tracestate=tracestate)
        ids.append(job.id)
    call_command("runjobworker", database=alias, burst=True, threads=2, poll_interval=0.01,
                 no_listen=True)
    rows = Job.objects.using(alias).in_bulk(ids)
    return [rows[i] for i in ids]


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_hostile_rows_run_and_succeed_as_root_spans(alias: str, spans: Spans) -> None:
    # rule 14 (trace-never-fails): written straight into the rows, the crafted headers break
    # nothing.
    cases: list[tuple[str, str, str]] = [
        (name, value, "") for name, value in HOSTILE.items() if _storable(alias, value)]
    cases += [(f"tracestate {name}", "", value) for name, value in HOSTILE.items()
              if _storable(alias, value)]
    assert alias == "default" or not any(n in _POSTGRES_CANNOT_HOLD for n, _, _ in cases)
    hostile_state = [(f"valid, tracestate {name}", VALID, value)
                     for name, value in HOSTILE.items() if _storable(alias, value)]

    rows = _run_with_headers(alias, [(tp, ts) for _, tp, ts in cases + hostile_state])
    for (name, _, _), row in zip(cases + hostile_state, rows, strict=True):
        assert row.status == "succeeded", f"{name}: {row.status} {row.last_error}"
        (span,) = spans.of_job(row.id)
        if name.startswith("valid"):
            assert f"{parent_id(span):016x}" == SPAN_ID, name
        else:
            assert is_root(span), name


@pytest.mark.django_db(transaction=True, databases="__all__")
@settings(max_examples=3, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_arbitrary_rows_run_and_succeed(alias: str, spans: Spans, data: Any) -> None:
    # rule 14 (trace-never-fails), as a property through the database: eight arbitrary headers per
    # example.
    text = st.text(max_size=512 if alias != "default" else 12_000)
    if alias != "default":
        text = text.filter(lambda s: "\x00" not in s)
    headers = data.draw(st.lists(st.tuples(st.one_of(text, _NEAR), text), min_size=8,
                                 max_size=8))
    spans.clear()
    rows = _run_with_headers(alias, headers)
    for (traceparent, tracestate), row in zip(headers, rows, strict=True):
        assert row.status == "succeeded", (traceparent, tracestate, row.last_error)
        assert _actual(spans.of_job(row.id)) == _expected(traceparent, tracestate)
