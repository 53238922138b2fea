"""Named queries, one file per SQL dialect with the same names in each, parsed once.

A query starts at a ``-- name: <name>`` line; the comment lines under it say what it does. Two
macros keep "the database's clock" in one place per dialect and let tests inject a clock:
``{now}`` and ``{now_plus(<seconds expression>)}``; a query that uses them takes a ``now``
parameter, ``None`` outside tests.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

_NAME = re.compile(r"^-- name: (?P<name>[a-z_]+)\s*$", re.MULTILINE)
_NOW_PLUS = re.compile(r"\{now_plus\((?P<expr>[^{}]+?)\)\}")

# The clock of each dialect. PostgreSQL's now() is the statement's transaction start, which is
# what a single-statement claim or renewal wants. SQLite's text format matches what Django writes
# for a DateTimeField (UTC, no offset), so comparisons against ORM-written rows stay lexical.
_NOW = {
    "postgresql": "COALESCE(%(now)s::timestamptz, now())",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', COALESCE(:now, 'now'))",
}
_PLUS = {
    "postgresql": "(COALESCE(%(now)s::timestamptz, now()) + make_interval(secs => {expr}))",
    "sqlite": (
        "strftime('%Y-%m-%d %H:%M:%f', COALESCE(:now, 'now'), printf('%+.6f seconds', {expr}))"
    ),
}


@cache
def queries(dialect: str) -> dict[str, str]:
    """Return every named query of ``dialect`` (``postgresql`` or ``sqlite``), macros expanded."""
    text = files(__package__).joinpath(f"{dialect}.sql").read_text(encoding="utf-8")
    parts = _NAME.split(text)
    # parts: [preamble, name1, body1, name2, body2, ...]
    found: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in found:
            raise ValueError(f"query {name!r} is defined twice in {dialect}.sql")
        body = _NOW_PLUS.sub(lambda m: _PLUS[dialect].format(expr=m.group("expr")), body)
        found[name] = body.replace("{now}", _NOW[dialect]).strip().rstrip(";")
    return found
