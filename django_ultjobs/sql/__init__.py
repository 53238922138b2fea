"""Named queries, one file per SQL dialect with the same names in each, parsed once.

A query starts at a ``-- name: <name>`` line; the comment lines under it say what it does (they
stay in the file: each query is sent as ``/* django_ultjobs:<name> */`` and its SQL). Two
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
        body = body.replace("{now}", _NOW[dialect]).strip().rstrip(";")
        found[name] = f"/* django_ultjobs:{name} */ {_without_comment_lines(body)}"
    return found


#: A named placeholder of SQLite (``:name``); not the second colon of PostgreSQL's ``::type``.
_NAMED = re.compile(r"(?<![:\w]):(?P<name>[A-Za-z_]\w*)")


@cache
def django_queries(dialect: str) -> dict[str, str]:
    """Return the queries of ``dialect`` in the placeholder style Django's cursors take.

    Django's cursor wrappers take ``%(name)s`` placeholders and ``%%`` for a percent sign on every
    engine (rule 41): PostgreSQL's queries are written that way already; SQLite's ``:name`` and
    bare ``%`` (its ``strftime`` formats) are rewritten here once, and Django's SQLite cursor turns
    them back into the same text before SQLite sees them.
    """
    found = queries(dialect)
    if dialect == "postgresql":
        return found
    return {name: _NAMED.sub(r"%(\g<name>)s", sql.replace("%", "%%"))
            for name, sql in found.items()}


def _without_comment_lines(sql: str) -> str:
    """``sql`` without its whole-line ``--`` comments: they are for readers of the .sql file.

    Line by line, not an SQL parser: no query may hold a string literal or a ``$$`` body that
    spans lines (a test holds that), or a line of it starting with ``--`` would be cut.

    Sent along, they made the settle statement 4,482 characters, past the 4,096 up to which
    psycopg caches a statement's conversion to ``$1`` placeholders, so every settle was parsed
    again in Python (25 µs a statement). The ``/* django_ultjobs:<name> */`` tag that replaces
    them names the statement in ``pg_stat_activity`` and the server's logs.
    """
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
