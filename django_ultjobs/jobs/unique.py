"""Unique jobs: the key of a call, and enqueueing keyed calls so one job holds each key.

A job row *holds* its ``unique_key`` (the ``unique_key`` column is not NULL) from its enqueue
until a later enqueue of the same key takes the key over; a partial unique index on
``(name, unique_key) WHERE unique_key IS NOT NULL`` lets one row hold a key at a time, whatever
number of processes enqueue it at once (rule 65 (one-key-holder)). A holder may be taken over once
it has
*expired*: finished (succeeded, failed or cancelled) at least its ``unique_for`` seconds ago,
on the database's clock (rule 67 (unique-for-window)). Until then an enqueue of the key inserts
nothing and answers with the holder (rule 66 (held-key-returns-holder)). Settling a job never
touches its key: the release happens at the next enqueue of the key, so the worker's claim and
settle pay nothing for unique jobs.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import reduce
from operator import or_
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, Q

from ..core.jsonargs import is_unicode
from ..core.numeric import is_finite, shown
from ..core.retry import MAX_DELAY
from ..exceptions import JobOptionError, UniqueKeyContendedError

if TYPE_CHECKING:
    from ..store import NewJob
    from .options import Declaration

#: The ``unique_key`` column's length: a key given with ``.using(unique_key=...)`` is 1 to this
#: many characters; a key made from the arguments is ``args:`` and 64 hex digits.
MAX_UNIQUE_KEY = 200
#: The prefix of a key made from a call's arguments (``@job(unique=True)``).
ARGS_KEY_PREFIX = "args:"
#: Rounds of "insert, else find the holder" before giving up: a round is lost only when the
#: holder found by the insert is gone (taken over, pruned) by the time it is looked up, which
#: needs another enqueue of the same key to win a race every time.
MAX_ROUNDS = 20

#: A key as the index sees it: the job's name and its ``unique_key``.
KeyPair = tuple[str, str]


def check_unique_options(spec: Declaration) -> None:
    """Raise ``JobOptionError`` for a ``unique``, ``unique_for`` or ``unique_key`` the queue cannot
    keep: at ``@job`` and every ``.using()`` copy, before any SQL (rule 16 (bad-input-refused))."""
    name = spec.name
    if not isinstance(spec.unique, bool):
        raise JobOptionError(f"job {name!r}: unique must be True or False, not {spec.unique!r}")
    check_unique_for(name, spec.unique_for)
    if spec.unique_key is not None:
        check_unique_key(name, spec.unique_key)
    if spec.unique or spec.unique_for:
        _check_defaults(spec)


def check_unique_for(name: str, seconds: Any) -> None:
    """``unique_for``: finite seconds from 0 to a hundred years (a ``timedelta`` is turned into
    seconds before this)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise JobOptionError(
            f"job {name!r}: unique_for must be a number of seconds or a timedelta, not "
            f"{seconds!r}")
    if not is_finite(seconds) or not 0 <= seconds <= MAX_DELAY:
        raise JobOptionError(
            f"job {name!r}: unique_for must be a finite number of seconds from 0 to "
            f"{MAX_DELAY:.0f} (a hundred years), not {shown(seconds)}")


def check_unique_key(name: str, key: Any) -> None:
    """A key given with ``.using(unique_key=...)``: 1 to ``MAX_UNIQUE_KEY`` characters of text
    PostgreSQL's text keeps (no NUL, no lone surrogate)."""
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_UNIQUE_KEY:
        raise JobOptionError(
            f"job {name!r}: unique_key must be 1 to {MAX_UNIQUE_KEY} characters of text, not "
            f"{key!r}")
    if "\x00" in key:
        raise JobOptionError(
            f"job {name!r}: unique_key cannot contain a NUL character (\\x00), not {key!r}")
    if not key.isascii() and not is_unicode(key):
        raise JobOptionError(f"job {name!r}: unique_key cannot contain a lone surrogate, "
                             f"not {key!r}")


def as_seconds(value: timedelta | float) -> float:
    """``unique_for`` as seconds (a ``timedelta`` is accepted as ``delay`` accepts one)."""
    return value.total_seconds() if isinstance(value, timedelta) else value


def _check_defaults(spec: Declaration) -> None:
    # The key of a call includes the defaults it left out, so f(1) and f(1, b=2) are one key
    # when b defaults to 2; a default JSON cannot write would fail every enqueue instead.
    signature, _ = _call_signature(spec)
    if signature is None:
        return
    for param in signature.parameters.values():
        if param.default is param.empty:
            continue
        try:
            json.dumps(param.default, allow_nan=False)
        except (TypeError, ValueError):
            raise JobOptionError(
                f"job {spec.name!r}: unique=True keys a call by its arguments as JSON, with "
                f"the defaults it leaves out; parameter {param.name!r} defaults to "
                f"{param.default!r}, which is not JSON") from None


def key_of(spec: Declaration, args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    """The key one call of ``spec`` holds, or None for a call of a job that is not unique.

    ``.using(unique_key=...)`` gives it; else ``@job(unique=True)`` (or ``unique_for``) makes it
    from the arguments: ``args:`` and the SHA-256 of their canonical JSON (``args_digest``).
    """
    if spec.unique_key is not None:
        return spec.unique_key
    if not (spec.unique or spec.unique_for):
        return None
    return ARGS_KEY_PREFIX + args_digest(spec, args, kwargs)


def args_digest(spec: Declaration, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    """The SHA-256 (hex) of a call's canonical JSON: the arguments bound to the body's
    parameters by name, the defaults it left out filled in, keys sorted, no spaces.

    So ``f(1)``, ``f(a=1)`` and ``f(1, b=2)`` (when ``b`` defaults to 2) are one call. Hashed,
    because a key is an index entry and arguments may be megabytes. A body whose parameters
    Python cannot tell is keyed by its positional and keyword arguments as given.
    """
    text = json.dumps(_bound(spec, args, kwargs), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _bound(spec: Declaration, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    signature, takes_context = _call_signature(spec)
    if signature is None:
        return {"args": list(args), "kwargs": kwargs}
    context = (None,) if takes_context else ()
    try:
        bound = signature.bind(*context, *args, **kwargs)
    except TypeError:
        # A call the body cannot take is refused before this (JobSpec.call); a task's is
        # Django's to refuse: keyed as given.
        return {"args": list(args), "kwargs": kwargs}
    bound.apply_defaults()
    named = dict(bound.arguments)
    if takes_context:
        named.pop(next(iter(signature.parameters)))
    return named


def _call_signature(spec: Declaration) -> tuple[inspect.Signature | None, bool]:
    """The parameters a call binds to, and whether the first is a context: a django.tasks
    task's own function (its job's body is a runner taking ``*args, **kwargs``), else the
    job's body."""
    task = getattr(spec.func, "task", None)
    func = getattr(task, "func", None)
    if func is None:
        return spec.signature, spec.takes_context
    try:
        return inspect.signature(func), bool(task.takes_context)
    except (TypeError, ValueError):
        return None, False


# -- enqueueing keyed jobs ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyedEnqueue:
    """Where one keyed call ended: a new row (``new`` is what the insert returned), or the row
    already holding its key (``new`` None)."""

    id: int
    new: Any = None

    @property
    def created(self) -> bool:
        """Whether this call wrote a new row."""
        return self.new is not None


T = TypeVar("T")


def enqueue_keyed(jobs: Sequence[NewJob], insert: Callable[[Sequence[NewJob]], list[T | None]],
                  holders: Callable[[Iterable[KeyPair]], dict[KeyPair, int]],
                  id_of: Callable[[T], int]) -> list[KeyedEnqueue]:
    """Enqueue each of ``jobs``: insert it, or answer with the row that holds its key.

    ``insert`` is the store's ``enqueue_unique``: it inserts what no other row holds (having
    released the expired holders of these keys) and gives None for each job whose key is held.
    ``holders`` then looks each of those keys up in a new statement, which on PostgreSQL sees a
    holder committed while the insert waited for it (the insert's own snapshot does not). A key
    whose holder is gone by then (taken over, pruned) is inserted again in the next round.
    """
    answered: list[KeyedEnqueue | None] = [None] * len(jobs)
    pending = list(range(len(jobs)))
    for _ in range(MAX_ROUNDS):
        rows = insert([jobs[i] for i in pending])
        held_back = []
        for i, row in zip(pending, rows, strict=True):
            if row is None:
                held_back.append(i)
            else:
                answered[i] = KeyedEnqueue(id_of(row), row)
        if not held_back:
            break
        found = holders({_pair(jobs[i]) for i in held_back})
        pending = []
        for i in held_back:
            holder = found.get(_pair(jobs[i]))
            if holder is None:
                pending.append(i)
            else:
                answered[i] = KeyedEnqueue(holder)
        if not pending:
            break
    else:
        raise UniqueKeyContendedError(
            f"enqueue of unique key {jobs[pending[0]].unique_key!r} of job "
            f"{jobs[pending[0]].name!r} found its holder gone {MAX_ROUNDS} times in a row")
    return [a for a in answered if a is not None]


def _pair(job: NewJob) -> KeyPair:
    assert job.unique_key is not None
    return (job.name, job.unique_key)


def holders_of(alias: str) -> Callable[[Iterable[KeyPair]], dict[KeyPair, int]]:
    """The ``holders`` lookup of ``enqueue_keyed`` on database ``alias``: the id of the row
    holding each key, through the ORM (by the partial unique index), 200 keys a query."""
    from ..models import Job

    def lookup(pairs: Iterable[KeyPair]) -> dict[KeyPair, int]:
        pairs = sorted(pairs)
        found: dict[KeyPair, int] = {}
        for start in range(0, len(pairs), 200):
            chunk = pairs[start:start + 200]
            where = reduce(or_, (Q(name=n, unique_key=k) for n, k in chunk))
            for name, key, job_id in Job.objects.using(alias).filter(where).values_list(
                    "name", "unique_key", "id"):
                found[(name, key)] = job_id
        return found

    return lookup


# -- retrying a job whose key was taken over ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyHeld:
    """A job a retry left alone: the key it held, released to a later enqueue of it, is held
    by another job now (rule 107 (retry-takes-key-back))."""

    job_id: int
    name: str
    key: str
    holder_id: int

    def __str__(self) -> str:
        return f"job {self.job_id}: key {self.key!r} is held by job {self.holder_id}"


def take_keys_back(alias: str, ids: Sequence[int]) -> dict[int, KeyHeld]:
    """Give each job of ``ids`` whose key a later enqueue took over (``released_key``) its key
    back, where an enqueue of that key could take it now; return the others, with their holder.

    Run inside the retry's transaction, on rows it locked. An expired holder gives the key up
    as to an enqueue (``unique_release``); then one ``UPDATE`` sets the key where no row holds
    it. The partial unique index settles a race with an enqueue of the key: an insert committed
    while the update waited for it makes the update fail, in a savepoint, and the next round's
    statement sees the holder (rules 65 (one-key-holder), 107 (retry-takes-key-back)).
    """
    from ..models import Job
    from ..store import get_store

    jobs = Job.objects.using(alias)
    pending = dict(jobs.filter(id__in=ids, unique_key__isnull=True, released_key__isnull=False)
                   .values_list("id", "name"))
    for _ in range(MAX_ROUNDS):
        if not pending:
            return {}
        keys = dict(jobs.filter(id__in=pending).values_list("id", "released_key"))
        get_store(alias).release_keys({(pending[i], keys[i]) for i in pending})
        _take_free_keys(alias, list(pending))
        left = dict(jobs.filter(id__in=pending, unique_key__isnull=True)
                    .values_list("id", "released_key"))
        found = holders_of(alias)({(pending[i], key) for i, key in left.items()})
        held = {i: KeyHeld(i, pending[i], key, found[(pending[i], key)])
                for i, key in left.items() if (pending[i], key) in found}
        # A key whose holder went between the update and the read (pruned, released) is free
        # again: another round takes it.
        pending = {i: pending[i] for i in left if i not in held}
        if not pending:
            return held
    raise UniqueKeyContendedError(
        f"retry of job {next(iter(pending))} found its key's holder gone {MAX_ROUNDS} times in "
        "a row")


def _take_free_keys(alias: str, ids: list[int]) -> None:
    """Set each job's ``released_key`` back as its ``unique_key`` where no row holds it; an
    insert of one of those keys that commits meanwhile undoes this statement alone."""
    from ..models import Job

    jobs = Job.objects.using(alias)
    holder = jobs.filter(name=OuterRef("name"), unique_key=OuterRef("released_key"))
    try:
        with transaction.atomic(using=alias):  # a savepoint of the retry's transaction
            jobs.filter(id__in=ids, unique_key__isnull=True).exclude(Exists(holder)).update(
                unique_key=F("released_key"), released_key=None)
    except IntegrityError:
        pass  # a holder committed while this waited for it: the caller reads it next
