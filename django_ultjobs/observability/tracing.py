"""Trace propagation: capture the W3C ``traceparent`` at enqueue, run the job as its child.

Only ``opentelemetry-api`` is used here. With no SDK configured every call below is a no-op of
the API's own, so a site that does not trace pays nothing and needs nothing.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar, Token
from typing import Any, ParamSpec, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import INVALID_SPAN, ProxyTracerProvider, Span, SpanKind

from ..core.jsonargs import storable_text

_tracer = trace.get_tracer("django_ultjobs")
P = ParamSpec("P")
R = TypeVar("R")

# Who is enqueueing right now: "job:<id>" inside a run, the user during a request (set by the
# middleware), else the process (see _process_actor).
_actor: ContextVar[str | None] = ContextVar("ultjobs_actor", default=None)

# The W3C trace-context header, version 00 form; anything else is not ours to interpret.
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_MAX_HEADER = 512
#: The ``enqueued_by`` column's length.
_MAX_ACTOR = 200


def capture_trace_context() -> tuple[str, str]:
    """Return ``(traceparent, tracestate)`` of the current span, or empty strings."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    traceparent = carrier.get("traceparent", "")
    tracestate = carrier.get("tracestate", "")
    # A propagator of the site's own may write anything: a header no worker would read is
    # dropped here rather than stored (rule 16 (bad-input-refused)), and one the columns cannot hold
    # (too long, a NUL or a lone surrogate PostgreSQL refuses) must not fail the enqueue.
    if not _TRACEPARENT.fullmatch(traceparent):
        return "", ""
    if len(tracestate) > _MAX_HEADER or storable_text(tracestate) != tracestate:
        tracestate = ""
    return traceparent, tracestate


def parent_context(traceparent: str | None, tracestate: str | None) -> otel_context.Context | None:
    """Return the context a stored traceparent names, or None if it is malformed
    (rule 14 (trace-never-fails)).

    Never raises: the header came from a row anybody could have written, and a job must run
    whatever garbage it holds.
    """
    try:
        if not traceparent or len(traceparent) > _MAX_HEADER:
            return None
        if not _TRACEPARENT.fullmatch(traceparent):
            return None
        carrier = {"traceparent": traceparent}
        if tracestate and len(tracestate) <= _MAX_HEADER:
            carrier["tracestate"] = tracestate
        ctx = propagate.extract(carrier, context=otel_context.Context())
        span_context = trace.get_current_span(ctx).get_span_context()
        return ctx if span_context.is_valid else None
    except Exception:
        return None


def tracing_enabled() -> bool:
    """Whether a tracer provider is installed (an SDK); without one, spans are skipped whole.

    The API's own no-op spans still attach and detach contexts on every run; a worker draining
    thousands of jobs a second with nobody collecting them should not pay even that.
    """
    return not isinstance(trace.get_tracer_provider(), ProxyTracerProvider)


#: What ``job_span_of`` gives when no tracer provider is installed: reusable (a nullcontext
#: keeps no state), so a run without tracing makes no context manager of its own.
_NO_JOB_SPAN: AbstractContextManager[Span] = nullcontext(INVALID_SPAN)


def job_span_of(name: str, attributes: Callable[[], dict[str, Any]], traceparent: str,
                tracestate: str, *, traced: bool | None = None) -> AbstractContextManager[Span]:
    """``job_span``, with the attributes made only when the span is: without a tracer provider
    a run skips their dict and the span's generator. ``traced``:
    ``tracing_enabled()`` as the caller read it already (a worker reads it once per claim)."""
    if not (tracing_enabled() if traced is None else traced):
        return _NO_JOB_SPAN
    return job_span(name, attributes(), traceparent, tracestate)


@contextmanager
def job_span(name: str, attributes: dict[str, Any], traceparent: str, tracestate: str
             ) -> Iterator[Span]:
    """Open span ``job.<name>`` (CONSUMER) as the child of the enqueuing request's span."""
    if not tracing_enabled():
        yield INVALID_SPAN
        return
    parent = parent_context(traceparent, tracestate)
    with _tracer.start_as_current_span(
        f"job.{name}",
        context=parent if parent is not None else otel_context.Context(),
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


@contextmanager
def step_span(job_name: str, step: str, kind: str, replayed: bool) -> Iterator[Span]:
    """A child span of the job's span for one durable step (``step <name>``)."""
    if not tracing_enabled():
        yield INVALID_SPAN
        return
    with _tracer.start_as_current_span(
        f"step {step}",
        attributes={"job.name": job_name, "job.step.name": step, "job.step.kind": kind,
                    "job.step.replayed": replayed},
    ) as span:
        yield span


def acting_as(actor: str) -> _ActingAs:
    """Attribute jobs enqueued inside the block to ``actor`` (``job:<id>``, a user, …)."""
    return _ActingAs(actor)


class _ActingAs:
    """``acting_as``'s block, or decorator. A class, not a generator: every run enters one, and
    ``@contextmanager``'s generator cost a fifth of a no-op run. One block may be entered again
    inside itself, each entry undone by its own exit."""

    __slots__ = ("_actor", "_tokens")

    def __init__(self, actor: str) -> None:
        self._actor = actor
        self._tokens: list[Token[str | None]] = []

    def __enter__(self) -> None:
        self._tokens.append(_actor.set(self._actor))

    def __exit__(self, *exc_info: object) -> None:
        _actor.reset(self._tokens.pop())

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        """``@acting_as(actor)``: the function's every call acts as ``actor``."""
        @functools.wraps(func)
        def acting(*args: P.args, **kwargs: P.kwargs) -> R:
            with _ActingAs(self._actor):
                return func(*args, **kwargs)
        return acting


def current_actor() -> str:
    """Who is enqueueing: the innermost ``acting_as``, else this process.

    Cut to the column's 200 characters, and what PostgreSQL's text refuses spelt out as escapes:
    a name given to ``acting_as`` must never fail the enqueue it labels
    (rule 16 (bad-input-refused))."""
    actor = _actor.get()
    if actor is None:
        # (A command-line argument may hold a lone surrogate: bytes that were not UTF-8.)
        return storable_text(_process_actor())[:_MAX_ACTOR]
    resolve = getattr(actor, "resolve", None)
    return storable_text(str(resolve() if resolve is not None else actor))[:_MAX_ACTOR]


def _process_actor() -> str:
    argv = sys.argv
    program = os.path.basename(argv[0]) if argv and argv[0] else "python"
    if program in {"manage.py", "django-admin", "__main__.py"} and len(argv) > 1:
        return argv[1][:200]
    return program[:200] or "python"
