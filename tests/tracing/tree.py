"""Render finished spans as the text tree a tracing UI would show (docs/tracing.md has one)."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

_SHOWN = ("job.enqueued_by", "job.outcome", "job.step.replayed")
_DETAILED = ("job.id", "job.attempt")


def render_tree(spans: Sequence[ReadableSpan], *, timings: bool = False) -> str:
    """One line per span, children under their parent in start order; roots first.

    ``timings`` adds job ids, attempts, start offsets and durations (the docs' picture); without
    it the text is stable from run to run but for ids in attribute values.
    """
    ordered = sorted(spans, key=lambda s: s.start_time or 0)
    ids = {s.context.span_id for s in ordered}
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in ordered:
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent if parent in ids else None, []).append(span)
    origin = ordered[0].start_time or 0 if ordered else 0
    lines: list[str] = []

    def walk(span: ReadableSpan, prefix: str, last: bool, root: bool) -> None:
        branch = "" if root else ("└── " if last else "├── ")
        lines.append(prefix + branch + _label(span, origin, timings))
        below = children.get(span.context.span_id, [])
        inner = prefix + ("" if root else ("    " if last else "│   "))
        for n, kid in enumerate(below):
            walk(kid, inner, n == len(below) - 1, False)

    for span in children.get(None, []):
        walk(span, "", True, True)
    return "\n".join(lines)


def _label(span: ReadableSpan, origin: int, timings: bool) -> str:
    attributes = span.attributes or {}
    parts = [span.name]
    if span.kind != SpanKind.INTERNAL:
        parts.append(f"[{span.kind.name}]")
    shown = (*_DETAILED, *_SHOWN) if timings else _SHOWN
    parts += [f"{key}={attributes[key]}" for key in shown if key in attributes]
    if span.status.status_code == StatusCode.ERROR:
        parts.append("status=ERROR")
    parts += [f"event={e.name}" for e in span.events]
    if timings and span.start_time is not None and span.end_time is not None:
        parts.append(f"(+{(span.start_time - origin) / 1e6:.1f} ms, "
                     f"{(span.end_time - span.start_time) / 1e6:.1f} ms)")
    return "  ".join(parts)
