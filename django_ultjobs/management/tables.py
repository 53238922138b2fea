"""Plain-text tables and JSON for ``manage.py ultjobs``: what a terminal and a script read."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

#: Characters of a cell past which it is cut (an error message, a long job name).
MAX_CELL = 60


def cell(value: Any) -> str:
    """One value as a table cell: times in UTC to the second, text on one line and cut."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.1f}"
    text = " ".join(str(value).split())
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows under headers, columns padded to their widest cell; numbers right-aligned."""
    cells = [[cell(v) for v in row] for row in rows]
    numeric = [bool(rows) and all(_is_number(row[i]) for row in rows)
               for i in range(len(headers))]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric, strict=True)).rstrip()

    return "\n".join([line([h.upper() for h in headers]), *(line(r) for r in cells)])


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def as_json(value: Any) -> str:
    """``value`` as indented JSON: times in ISO 8601, ids and UUIDs as Django writes them."""
    return json.dumps(value, cls=DjangoJSONEncoder, indent=2, ensure_ascii=False)
