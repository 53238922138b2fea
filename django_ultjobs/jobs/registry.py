"""``@job`` and the registry of jobs by name: how a worker finds the code of a stored name."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, overload

from django.apps import apps
from django.utils.module_loading import import_string

from ..conf import get_settings
from ..core.flow_keys import KeyOption
from ..core.schedules import schedule_from_options
from ..exceptions import JobConfigurationError, JobOptionError
from ..observability.logs import log_event
from .spec import JobSpec
from .unique import as_seconds

_registry: dict[str, JobSpec] = {}
# Bumped on every (un)registration, so the worker recomputes its fleet caps only when a job (a
# django.tasks task resolved on first claim, say) appears or goes.
_generation = 0
# Names refused by the import rule, logged once per process rather than at every park.
_refused: set[str] = set()
logger = logging.getLogger(__name__)


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
    concurrency_key: KeyOption | None = None,
    rate_limit: str | None = None,
    rate_limit_key: KeyOption | None = None,
    backoff: float = 2.0,
    max_backoff: float = 3600.0,
    unique: bool = False,
    unique_for: timedelta | float = 0.0,
    timeout: timedelta | float | None = None,
    retry_on: tuple[type[BaseException], ...] | type[BaseException] = (Exception,),
    expires_in: timedelta | float | None = None,
    tags: Sequence[str] = (),
    cron: str | None = None,
    every: float | timedelta | None = None,
    timezone: str | None = None,
    catch_up: str = "latest",
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
    concurrency_key: KeyOption | None = None,
    rate_limit: str | None = None,
    rate_limit_key: KeyOption | None = None,
    backoff: float = 2.0,
    max_backoff: float = 3600.0,
    unique: bool = False,
    unique_for: timedelta | float = 0.0,
    timeout: timedelta | float | None = None,
    retry_on: tuple[type[BaseException], ...] | type[BaseException] = (Exception,),
    expires_in: timedelta | float | None = None,
    tags: Sequence[str] = (),
    cron: str | None = None,
    every: float | timedelta | None = None,
    timezone: str | None = None,
    catch_up: str = "latest",
) -> JobSpec | Callable[[Callable[..., Any]], JobSpec]:
    """Register a function as a job; use bare (``@job``) or with options (``@job(queue=...)``).

    ``name`` defaults to the function's ``__name__``: it is what the queue stores, so renaming
    the function renames the job (queued rows of the old name are parked as unknown,
    rule 12 (unknown-job-parked)).

    ``cron=`` (read in ``timezone=``, UTC by default) or ``every=`` seconds makes it periodic:
    the running workers enqueue each tick once between them, ``catch_up=`` says what happens to
    ticks missed while none ran (docs/scheduling.md, rules 60 (tick-once) to
    64 (bad-schedule-refused)).
    """
    def decorate(f: Callable[..., Any]) -> JobSpec:
        if name is not None and not isinstance(name, str):
            raise JobOptionError(f"@job(name=...) of {_origin(f)} must be a str, not {name!r}")
        if name is not None and not name.strip():
            raise JobConfigurationError(f"@job(name=...) of {_origin(f)} is empty")
        job_name = name or f.__name__
        try:
            schedule = schedule_from_options(cron, every, timezone, catch_up)
        except JobOptionError as exc:
            # rule 64 (bad-schedule-refused): refused at import time by the job's name, as every
            # other option is.
            raise JobOptionError(f"job {job_name!r}: {exc}") from None
        spec = JobSpec(
            func=f, name=job_name, queue=queue, priority=priority,
            max_attempts=max_attempts, takes_context=takes_context, concurrency=concurrency,
            concurrency_key=concurrency_key, rate_limit=rate_limit,
            rate_limit_key=rate_limit_key, backoff=backoff, max_backoff=max_backoff,
            schedule=schedule, unique=unique, unique_for=as_seconds(unique_for),
            timeout=timeout, retry_on=retry_on, expires_in=expires_in,  # type: ignore[arg-type]
            tags=tags,  # type: ignore[arg-type]
        )
        register(spec)
        return spec

    return decorate(func) if func is not None else decorate


def register(spec: JobSpec) -> None:
    """Register ``spec`` under its name; refuse a second function under a name already taken."""
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
    app's package or ``ULTJOBS["JOB_MODULES"]`` (rule 40 (project-imports-only)): importing its
    module may register it (as importing a ``jobs.py`` does), or the object there may offer a
    ``job_spec()`` naming itself ``name``. This is how a worker runs a ``django.tasks`` task, which
    is named by its module path, with no registration of its own (Django finds a task from its path
    the same way). Any other name is unknown and nothing is imported: a row is data anyone with
    write access to the table may have written, and ``this.zen`` must not import ``this``.
    """
    spec = _registry.get(name)
    if spec is None and "." in name:
        spec = _resolve_path(name)
    return spec


def importable(name: str) -> bool:
    """Whether a worker may import ``name``'s module to find the job
    (rule 40 (project-imports-only)): a dotted name whose module is an installed app's package or
    inside one, or inside ``JOB_MODULES``."""
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
        # (rule 12 (unknown-job-parked)) instead of a bad module taking the claim loop down.
        log_event(logger, logging.WARNING, "jobs.registry.resolve-failed", job=name,
                  error=repr(exc))
        return None
    if not isinstance(spec, JobSpec) or spec.name != name:
        return None
    register(spec)
    return spec


def registered(name: str) -> JobSpec | None:
    """The job registered as ``name``, or None; never imports anything (unlike ``get_job``)."""
    return _registry.get(name)


def registered_jobs() -> dict[str, JobSpec]:
    """Return a snapshot of every registered job by name."""
    return dict(_registry)


def registry_generation() -> int:
    """A number that changes whenever the set of registered jobs does."""
    return _generation
