"""Named queries, one file per SQL dialect with the same names in each, parsed once.

A query starts at a ``-- name: <name>`` line; the comment lines under it say what it does (they
stay in the file: each query is sent as ``/* django_ultjobs:<name> */`` and its SQL, because
psycopg re-parses every run of a statement longer than 4,096 characters).

A ``-- fragment: <name>`` line starts a piece of SQL that several queries of the same file share;
a query includes it with ``{fragment:<name>}``. Fragments are expanded before the macros, and do
not include other fragments.

The macros keep "the database's clock" and the fleet-slot key in one place per dialect and let
tests inject a clock: ``{now}``, ``{now_plus(<seconds expression>)}`` and
``{slot_key(<job name expression>)}``; a query that uses the clock takes a ``now`` parameter,
``None`` outside tests.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

from ..core.slot_keys import SLOT_KEY_PREFIX

_HEADER = re.compile(r"^-- (?P<kind>name|fragment): (?P<name>[a-z_]+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"\{fragment:(?P<name>[a-z_]+)\}")
_NOW_PLUS = re.compile(r"\{now_plus\((?P<expr>[^{}]+?)\)\}")
_SLOT_KEY = re.compile(r"\{slot_key\((?P<expr>[^{}]+?)\)\}")

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
    """Return every named query of ``dialect`` (``postgresql`` or ``sqlite``), fragments and
    macros expanded."""
    text = files(__package__).joinpath(f"{dialect}.sql").read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    # parts: [preamble, kind1, name1, body1, kind2, name2, body2, ...]
    sections: dict[str, dict[str, str]] = {"name": {}, "fragment": {}}
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if name in sections[kind]:
            raise ValueError(f"{kind} {name!r} is defined twice in {dialect}.sql")
        sections[kind][name] = body.strip()
    # A fragment's comments go before it is included: inside a line of its query, they would
    # comment out the rest of that line.
    fragments = {name: _without_comment_lines(body) for name, body in sections["fragment"].items()}
    return {name: _expand(dialect, name, body, fragments)
            for name, body in sections["name"].items()}


def _expand(dialect: str, name: str, body: str, fragments: dict[str, str]) -> str:
    """Query ``name`` as sent: fragments included, macros expanded, comment lines dropped."""
    def include(match: re.Match[str]) -> str:
        fragment = match.group("name")
        if fragment not in fragments:
            raise ValueError(f"query {name!r} includes {fragment!r}, no fragment of {dialect}.sql")
        return fragments[fragment]

    body = _INCLUDE.sub(include, body)
    body = _NOW_PLUS.sub(lambda m: _PLUS[dialect].format(expr=m.group("expr")), body)
    body = _SLOT_KEY.sub(lambda m: f"'{SLOT_KEY_PREFIX}' || {m.group('expr')}", body)
    body = body.replace("{now}", _NOW[dialect]).rstrip(";")
    return f"/* django_ultjobs:{name} */ {_without_comment_lines(body)}"


#: A named placeholder of SQLite (``:name``); not the second colon of PostgreSQL's ``::type``.
_NAMED = re.compile(r"(?<![:\w]):(?P<name>[A-Za-z_]\w*)")


@cache
def django_queries(dialect: str) -> dict[str, str]:
    """Return the queries of ``dialect`` in the placeholder style Django's cursors take.

    Django's cursor wrappers take ``%(name)s`` placeholders and ``%%`` for a percent sign on every
    engine (rule 41 (instrumented-statements)): PostgreSQL's queries are written that way already;
    SQLite's ``:name`` and bare ``%`` (its ``strftime`` formats) are rewritten here once, and
    Django's SQLite cursor turns them back into the same text before SQLite sees them.
    """
    found = queries(dialect)
    if dialect == "postgresql":
        return found
    return {name: _NAMED.sub(r"%(\g<name>)s", sql.replace("%", "%%"))
            for name, sql in found.items()}


def _without_comment_lines(sql: str) -> str:
    """``sql`` without its whole-line ``--`` comments: they are for readers of the .sql file.

    Line by line, not an SQL parser: no query may hold a string literal or a ``$$`` body that
    spans lines (a test holds that), or a line of it starting with ``--`` would be cut. The
    ``/* django_ultjobs:<name> */`` tag that replaces them names the statement in
    ``pg_stat_activity`` and the server's logs. Each line's indentation goes too: it is for the
    same readers, and psycopg caches the parse only of statements up to 4,096 bytes,
    which the longest claim would pass with it.
    """
    kept = (line.strip() for line in sql.splitlines() if not line.lstrip().startswith("--"))
    return "\n".join(line for line in kept if line)
