"""``@job``: the frozen job spec, its ``.using()`` copies, and enqueueing (one or in bulk)."""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache, cached_property
from typing import Any, overload

from django.apps import apps
from django.utils.module_loading import import_string

from . import jsonargs
from .conf import get_settings
from .exceptions import JobArgumentError, JobConfigurationError, UnknownJobError
from .job_options import check_options
from .logs import log_event
from .metrics import record_enqueued
from .models import Job, JobStatus
from .slot_keys import MAX_SLOT_JOB_NAME
from .store import EnqueuedJob, NewJob, get_store
from .tracing import capture_trace_context, current_actor

_registry: dict[str, JobSpec] = {}
# Bumped on every (un)registration, so the worker recomputes its fleet caps only when a job (a
# django.tasks task resolved on first claim, say) appears or goes.
_generation = 0
# Names refused by the import rule, logged once per process rather than at every park.
_refused: set[str] = set()
logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class JobCall:
    """One call of a job, ready to be enqueued (alone or with others in ``bulk_enqueue``)."""

    spec: JobSpec
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class JobSpec:
    """A registered job: the function and how its calls are queued, run and retried.

    Frozen: ``.using(...)`` returns a changed copy for one enqueue and leaves the registered
    spec alone, as ``django.tasks.Task.using`` does.
    """

    func: Callable[..., Any] = field(repr=False)
    name: str
    queue: str = "default"
    priority: int = 0
    max_attempts: int = 3
    takes_context: bool = False
    #: Fleet-wide cap on simultaneous runs of this job (rule 5); None means no cap.
    concurrency: int | None = None
    #: Retry backoff: ``backoff * 2 ** (attempt - 1)`` seconds, capped, with jitter.
    backoff: float = 2.0
    max_backoff: float = 3600.0
    #: Per-enqueue options set through ``.using()``.
    delay: float = 0.0
    run_at: datetime | None = None

    @cached_property
    def signature(self) -> inspect.Signature | None:
        """The body's parameters, to check each call against before it is queued; None for a
        callable whose parameters Python cannot tell (some builtins), which is not checked."""
        try:
            return inspect.signature(self.func)
        except (TypeError, ValueError):
            return None

    @cached_property
    def is_coroutine(self) -> bool:
        """Whether the body is ``async def`` (run in an event loop of its own); asked once, not
        on every run."""
        return inspect.iscoroutinefunction(self.func)

    def __post_init__(self) -> None:
        if not callable(self.func):
            raise JobConfigurationError(f"job {self.name!r}: {self.func!r} is not callable")
        if not isinstance(self.name, str) or not self.name or len(self.name) > 200:
            raise JobConfigurationError("a job name must be 1 to 200 characters long")
        # Queue, priority, max_attempts, delay, run_at and the backoffs: each must fit its
        # column, or a settle (rules 16 and 31).
        check_options(self)
        if self.concurrency is not None and (
            isinstance(self.concurrency, bool) or self.concurrency < 1
        ):
            raise JobConfigurationError(
                f"job {self.name!r}: concurrency must be a whole number of at least 1, or None"
            )
        if self.concurrency is not None and len(self.name) > MAX_SLOT_JOB_NAME:
            # Its fleet slots' key (slot_key_for) must fit the lease key column.
            raise JobConfigurationError(
                f"job {self.name[:40]!r}…: a job with concurrency= needs a name of at most "
                f"{MAX_SLOT_JOB_NAME} characters"
            )

    # -- configuring ----------------------------------------------------------------------------

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: timedelta | float | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
    ) -> JobSpec:
        """Return a copy with other enqueue options; the registered job is unchanged."""
        changes: dict[str, Any] = {}
        if queue is not None:
            changes["queue"] = queue
        if priority is not None:
            changes["priority"] = priority
        if delay is not None:
            changes["delay"] = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if run_at is not None:
            changes["run_at"] = run_at
        if max_attempts is not None:
            changes["max_attempts"] = max_attempts
        return dataclasses.replace(self, **changes)

    # -- enqueueing -----------------------------------------------------------------------------

    def call(self, *args: Any, **kwargs: Any) -> JobCall:
        """Return a checked call of this job, for ``bulk_enqueue``."""
        jsonargs.check_arguments(self.name, args, kwargs)
        self._check_signature(args, kwargs)
        return JobCall(self, args, kwargs)

    def _check_signature(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """Refuse a call the body could never take (a missing or extra argument) now, before
        any SQL, instead of queueing a job that fails every attempt (rule 16)."""
        if self.signature is None:
            return
        context = (None,) if self.takes_context else ()
        try:
            self.signature.bind(*context, *args, **kwargs)
        except TypeError as exc:
            raise JobArgumentError(
                f"{self.name}{_bare(self.signature)}: {exc}; the call would fail on every attempt"
            ) from None

    def enqueue(self, *args: Any, **kwargs: Any) -> Job:
        """Queue one call inside the caller's transaction; return its (unsaved-looking) row.

        Non-JSON arguments raise ``JobArgumentError`` (a ``TypeError``) and write nothing.
        """
        job_call = self.call(*args, **kwargs)
        new = _new_job(job_call, *capture_trace_context(), current_actor())
        store = get_store()
        (row,) = store.enqueue([new])
        record_enqueued(((new.name, new.queue),), store.alias)
        return _as_loaded(new, row, store.alias)

    def bulk_enqueue(self, calls: Iterable[Sequence[Any] | JobCall]) -> list[int]:
        """Queue many calls of this job in one statement; each item is an args tuple or a call."""
        return bulk_enqueue(
            c if isinstance(c, JobCall) else self.call(*c) for c in calls
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function now, in this process (for tests and shells)."""
        return self.func(*args, **kwargs)


def _bare(signature: inspect.Signature) -> inspect.Signature:
    """``signature`` without annotations, as an error message shows it: ``(a, b=2)``."""
    empty = inspect.Parameter.empty
    return signature.replace(
        parameters=[p.replace(annotation=empty) for p in signature.parameters.values()],
        return_annotation=inspect.Signature.empty)


def _new_job(job_call: JobCall, traceparent: str, tracestate: str, actor: str) -> NewJob:
    spec = job_call.spec
    return NewJob(
        name=spec.name,
        queue=spec.queue,
        priority=spec.priority,
        args=list(job_call.args),
        kwargs=dict(job_call.kwargs),
        max_attempts=spec.max_attempts,
        delay=spec.delay,
        run_at=spec.run_at,
        traceparent=traceparent,
        tracestate=tracestate,
        enqueued_by=actor,
    )


def _as_loaded(new: NewJob, row: EnqueuedJob, alias: str) -> Job:
    """The row just inserted, as a query would have loaded it (what the enqueue statement wrote
    and returned, every other column at its default).

    Built the way a query builds rows (``from_db``, positional): the keyword ``Job(...)`` took
    14 µs, a twentieth of an enqueue inside a transaction on prepared statements; this takes 5.
    """
    values = {
        **_column_defaults(),
        "id": row.id, "name": new.name, "queue": new.queue, "priority": new.priority,
        "args": new.args, "kwargs": new.kwargs, "status": JobStatus.QUEUED, "attempt": 0,
        "max_attempts": new.max_attempts, "visible_at": row.visible_at,
        "traceparent": new.traceparent, "tracestate": new.tracestate,
        "enqueued_by": new.enqueued_by, "created_at": row.created_at,
        "updated_at": row.created_at,
    }
    return Job.from_db(alias, None, [values[f.attname] for f in Job._meta.concrete_fields])


@cache
def _column_defaults() -> dict[str, Any]:
    """The model's default of every column the enqueue statement leaves at its default.

    Shared by every returned row, so only plain defaults (None, text, numbers, booleans); a
    callable default makes a fresh value per row and its column is always written above."""
    return {f.attname: f.get_default() for f in Job._meta.concrete_fields
            if not f.has_db_default() and not (f.has_default() and callable(f.default))}


def bulk_enqueue(calls: Iterable[JobCall]) -> list[int]:
    """Queue many calls (of any jobs) in ONE statement, in the caller's transaction.

    Returns the new ids in the order of ``calls``. Every call is checked before anything is
    written, so one bad argument writes no row at all.
    """
    calls = list(calls)
    if not calls:
        return []
    trace = capture_trace_context()
    actor = current_actor()
    store = get_store()
    rows = store.enqueue([_new_job(c, *trace, actor) for c in calls])
    record_enqueued(((c.spec.name, c.spec.queue) for c in calls), store.alias)
    return [row.id for row in rows]


# -- the registry ---------------------------------------------------------------------------------


@overload
def job(func: Callable[..., Any], /) -> JobSpec: ...
@overload
def job(
    *,
    name: str | None = None,
    queue: str = "default",
    priority: int = 0,
    max_attempts: int = 3,
    takes_context: bool = False,
    concurrency: int | None = None,
    backoff: float = 2.0,
    max_backoff: float = 3600.0,
) -> Callable[[Callable[..., Any]], JobSpec]: ...


def job(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str = "default",
    priority: int = 0,
    max_attempts: int = 3,
    takes_context: bool = False,
    concurrency: int | None = None,
    backoff: float = 2.0,
    max_backoff: float = 3600.0,
) -> JobSpec | Callable[[Callable[..., Any]], JobSpec]:
    """Register a function as a job; use bare (``@job``) or with options (``@job(queue=...)``).

    ``name`` defaults to the function's ``__name__``: it is what the queue stores, so renaming
    the function renames the job (queued rows of the old name are parked as unknown, rule 12).
    """

    def register(f: Callable[..., Any]) -> JobSpec:
        if name is not None and not name.strip():
            raise JobConfigurationError(f"@job(name=...) of {_origin(f)} is empty")
        spec = JobSpec(
            func=f, name=name or f.__name__, queue=queue, priority=priority,
            max_attempts=max_attempts, takes_context=takes_context, concurrency=concurrency,
            backoff=backoff, max_backoff=max_backoff,
        )
        _register(spec)
        return spec

    return register(func) if func is not None else register


def _register(spec: JobSpec) -> None:
    existing = _registry.get(spec.name)
    if existing is not None and _origin(existing.func) != _origin(spec.func):
        raise JobConfigurationError(
            f"two jobs are registered as {spec.name!r}: {_origin(existing.func)} and "
            f"{_origin(spec.func)}. Give one of them @job(name=...)."
        )
    # The same function registered again (a module re-imported by the autoreloader) replaces
    # itself quietly.
    global _generation
    _registry[spec.name] = spec
    _generation += 1


def _origin(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def get_job(name: str) -> JobSpec | None:
    """Return the job registered as ``name``, or None.

    A dotted name that is not registered is imported, if its module lies inside an installed
    app's package or ``ULTJOBS["JOB_MODULES"]`` (rule 40): importing its module may register it
    (as importing a ``jobs.py`` does), or the object there may offer a ``job_spec()`` naming
    itself ``name``. This is how a worker runs a ``django.tasks`` task, which is named by its
    module path, with no registration of its own (Django finds a task from its path the same
    way). Any other name is unknown and nothing is imported: a row is data anyone with write
    access to the table may have written, and ``this.zen`` must not import ``this``.
    """
    spec = _registry.get(name)
    if spec is None and "." in name:
        spec = _resolve_path(name)
    return spec


def importable(name: str) -> bool:
    """Whether a worker may import ``name``'s module to find the job (rule 40): a dotted name
    whose module is an installed app's package or inside one, or inside ``JOB_MODULES``."""
    module = name.rpartition(".")[0]
    if not module or not all(part.isidentifier() for part in name.split(".")):
        return False
    modules = get_settings().JOB_MODULES
    allowed = [app.name for app in apps.get_app_configs()]
    if isinstance(modules, (list, tuple)):  # anything else is django_ultjobs.E021
        allowed += [m for m in modules if isinstance(m, str) and m]
    return any(module == prefix or module.startswith(prefix + ".") for prefix in allowed)


def _resolve_path(name: str) -> JobSpec | None:
    if not importable(name):
        if name not in _refused:
            _refused.add(name)
            log_event(logger, logging.WARNING, "jobs.registry.not-importable", job=name,
                      note="its module is in no installed app nor ULTJOBS['JOB_MODULES']; "
                           "not imported")
        return None
    try:
        found = import_string(name)
        spec = _registry.get(name)
        if spec is None:
            make = getattr(found, "job_spec", None)
            spec = make() if callable(make) else None
    except Exception as exc:
        # Whatever the import raised reads as "not registered": the caller parks the job
        # (rule 12) instead of a bad module taking the claim loop down.
        log_event(logger, logging.WARNING, "jobs.registry.resolve-failed", job=name,
                  error=repr(exc))
        return None
    if not isinstance(spec, JobSpec) or spec.name != name:
        return None
    _register(spec)
    return spec


def require_job(name: str) -> JobSpec:
    """Return the job registered as ``name``, or raise ``UnknownJobError`` listing the known."""
    spec = _registry.get(name)
    if spec is None:
        raise UnknownJobError(
            f"no job registered as {name!r}; registered: {sorted(_registry) or 'none'}. "
            "Is the app that defines it in INSTALLED_APPS, with the job in its jobs.py?"
        )
    return spec


def registered_jobs() -> dict[str, JobSpec]:
    """Return a snapshot of every registered job by name."""
    return dict(_registry)


def unregister(name: str) -> None:
    """Forget a job (tests that register throwaway jobs clean up with this)."""
    global _generation
    _registry.pop(name, None)
    _generation += 1


def registry_generation() -> int:
    """A number that changes whenever the set of registered jobs does."""
    return _generation


def jobs_database() -> str:
    """The database alias the job tables live in."""
    return get_settings().DATABASE
