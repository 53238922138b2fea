"""Tags of a job (rule 78 (tags-stored-whole)): short labels given at enqueue, checked before any
SQL, searched by the admin and ``ultjobs list --tag``.

A tag is stored in the job's ``tags`` column, a JSON list of strings. PostgreSQL searches it
with jsonb containment, SQLite with ``json_each``: the ORM's ``contains`` lookup on a JSON
field does not exist on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connections
from django.db.models import QuerySet

from ..exceptions import JobOptionError
from .jsonargs import is_unicode

#: Characters of one tag, and tags of one job: labels, not a document store.
MAX_TAG = 100
MAX_TAGS = 20


def check_tags(name: str, tags: Any, *, subject: str | None = None) -> tuple[str, ...]:
    """Return ``tags`` as a tuple, or raise ``JobOptionError`` naming the option
    (rule 78 (tags-stored-whole)).

    The message begins with ``subject`` (default: ``job 'name'``). A single string is refused
    rather than read as its characters."""
    where = subject or f"job {name!r}"
    if isinstance(tags, (str, bytes)) or not isinstance(tags, (list, tuple)):
        raise JobOptionError(f"{where}: tags must be a list of strings, not {tags!r}")
    if len(tags) > MAX_TAGS:
        raise JobOptionError(
            f"{where}: tags must be at most {MAX_TAGS} strings, not {len(tags)}")
    for tag in tags:
        if not isinstance(tag, str):
            raise JobOptionError(f"{where}: tags must hold only strings, not {tag!r}")
        if not 1 <= len(tag) <= MAX_TAG:
            raise JobOptionError(
                f"{where}: each tag must be 1 to {MAX_TAG} characters, not {tag!r}")
        # PostgreSQL's jsonb refuses both; SQLite would store them.
        if "\x00" in tag:
            raise JobOptionError(
                f"{where}: a tag cannot contain a NUL character (\\x00), not {tag!r}")
        if not tag.isascii() and not is_unicode(tag):
            raise JobOptionError(f"{where}: a tag cannot contain a lone surrogate")
    return tuple(tags)


def merged(defaults: Iterable[str], extra: Iterable[str]) -> tuple[str, ...]:
    """The job's own tags, then those of one enqueue, each once, in that order."""
    return tuple(dict.fromkeys([*defaults, *extra]))


def tagged(jobs: QuerySet[Any], tag: str) -> QuerySet[Any]:
    """The jobs of ``jobs`` that carry ``tag``, on either engine."""
    if connections[jobs.db].vendor == "postgresql":
        return jobs.filter(tags__contains=[tag])
    table = jobs.model._meta.db_table
    return jobs.extra(  # the table name is a constant; the tag a parameter
        where=[f"EXISTS (SELECT 1 FROM json_each({table}.tags) WHERE value = %s)"],
        params=[tag])
