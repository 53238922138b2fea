"""A job's spec: the function, how its calls are queued, run and retried, and its calls."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..core import jsonargs
from ..core.binding import binding_error
from ..core.flow_keys import KeyOption, check_key_option, key_value, stored_key
from ..core.rate_limits import RateLimit, parse_rate_limit
from ..core.schedules import Schedule, check_callable_without_arguments
from ..core.slot_keys import MAX_SLOT_JOB_NAME, slot_key_for
from ..core.tags import check_tags, merged
from ..exceptions import JobArgumentError, JobConfigurationError
from ..store import NewJob
from . import enqueue
from .options import check_options, seconds_of
from .unique import check_unique_options, key_of

if TYPE_CHECKING:
    from ..models import Job


#: Shapes of call (``_shape``) a spec remembers as bound: calls with keyword arguments of
#: ever new names (``**kwargs`` bodies) are each bound, as before, once this many are kept.
MAX_BOUND_SHAPES = 64


# Made once per call of a bulk enqueue, so slotted but not frozen, as NewJob: frozen, its
# three fields were set through object.__setattr__, over half of what a call() cost. Nothing
# mutates it. (Never hashable either way: its kwargs are a dict.)
@dataclass(slots=True)
class JobCall:
    """One call of a job, ready to be enqueued (alone or with others in ``bulk_enqueue``)."""

    spec: JobSpec
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def new_job(self, traceparent: str, tracestate: str, actor: str) -> NewJob:
        """The row this call becomes, as the store inserts it (``enqueue.CheckedCall``)."""
        spec, args, kwargs = self.spec, self.args, self.kwargs
        # Positional, in NewJob's field order: by keyword the record cost more than twice as
        # much to build, once per call of a bulk enqueue.
        return NewJob(
            spec.name, spec.queue, spec.priority, list(args), dict(kwargs), spec.max_attempts,
            spec.delay, spec.run_at, traceparent, tracestate, actor,
            spec.slot_key_of(args, kwargs), key_of(spec, args, kwargs), spec.unique_for,
            spec.timeout, spec.expires_in, spec.tags,
        )


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
    #: Fleet-wide cap on simultaneous runs of this job (rule 5 (fleet-cap)); None means no cap.
    concurrency: int | None = None
    #: The cap above is per key of this (a parameter's name, or a function of the call's
    #: arguments), not per job (rule 50 (per-key-cap)); None: per job.
    concurrency_key: KeyOption | None = None
    #: At most N starts per period across the fleet (``"100/m"``; rule 52 (fleet-rate-limit)); None:
    #: no limit.
    rate_limit: str | None = None
    #: The rate limit above is per key of this, as ``concurrency_key``; None: per job.
    rate_limit_key: KeyOption | None = None
    #: Retry backoff: ``backoff * 2 ** (attempt - 1)`` seconds, capped, with jitter.
    backoff: float = 2.0
    max_backoff: float = 3600.0
    #: Seconds a run may execute before it is cancelled with ``JobTimeoutError``
    #: (rule 55 (timeout-cancels)).
    timeout: float | None = None
    #: Only these exceptions of the body are retried (rule 57 (retry-on-only)); ``NonRetryable``
    #: never is.
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    #: Seconds after the enqueue past which a job not started yet is never run
    #: (rule 58 (expired-never-runs)).
    expires_in: float | None = None
    #: Per-enqueue options set through ``.using()``.
    delay: float = 0.0
    run_at: datetime | None = None
    #: When a periodic job ticks (``@job(cron=...)`` or ``@job(every=...)``); None otherwise.
    schedule: Schedule | None = None
    #: Unique jobs (rules 65 (one-key-holder) to 67 (unique-for-window)): ``unique`` keys each call
    #: by its arguments, ``unique_for`` keeps the key held that many seconds after the job finished
    #: (and implies ``unique``), ``unique_key`` (``.using()``) gives the key of one enqueue.
    unique: bool = False
    unique_for: float = 0.0
    unique_key: str | None = None
    #: Labels stored on each job row (rule 78 (tags-stored-whole)): the ``@job(tags=...)`` ones,
    #: then those of ``.using(tags=...)``.
    tags: tuple[str, ...] = ()

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
        """Whether the body is ``async def`` (run on the worker's event loop,
        rule 85 (one-event-loop)), or an object whose ``__call__`` is (a Django Tasks async task's
        runner); asked once, not on every run."""
        return (inspect.iscoroutinefunction(self.func)
                or inspect.iscoroutinefunction(type(self.func).__call__))

    def __post_init__(self) -> None:
        if not callable(self.func):
            raise JobConfigurationError(f"job {self.name!r}: {self.func!r} is not callable")
        if not isinstance(self.name, str) or not self.name or len(self.name) > 200:
            raise JobConfigurationError("a job name must be 1 to 200 characters long")
        # A timedelta is kept as its seconds, a lone exception class as a tuple of one; set
        # before the checks, which then see one form only.
        object.__setattr__(self, "timeout", seconds_of(self.timeout))
        object.__setattr__(self, "expires_in", seconds_of(self.expires_in))
        object.__setattr__(self, "tags", check_tags(self.name, self.tags))
        if isinstance(self.retry_on, type):
            object.__setattr__(self, "retry_on", (self.retry_on,))
        # Queue, priority, max_attempts, concurrency, delay, run_at, the backoffs, timeout,
        # expires_in and retry_on: each must fit its column, or a settle
        # (rules 16 (bad-input-refused), 31 (bounded-outcomes), 54 (bad-flow-option-refused),
        # 55 (timeout-cancels), 57 (retry-on-only) and 58 (expired-never-runs)).
        check_options(self)
        check_unique_options(self)
        if self.concurrency is not None and len(self.name) > MAX_SLOT_JOB_NAME:
            # Its fleet slots' key (slot_key_for) must fit the slot key column.
            raise JobConfigurationError(
                f"job {self.name[:40]!r}…: a job with concurrency= needs a name of at most "
                f"{MAX_SLOT_JOB_NAME} characters"
            )
        if self.schedule is not None:
            # A tick enqueues the job with no arguments (rule 64 (bad-schedule-refused)).
            check_callable_without_arguments(self.name, self.func, self.takes_context)
        self._check_flow_control()

    def _check_flow_control(self) -> None:
        """Refuse a key or rate limit that can never work, when the job is declared
        (rule 54 (bad-flow-option-refused))."""
        for option, needs, given in (("concurrency_key", "concurrency", self.concurrency),
                                     ("rate_limit_key", "rate_limit", self.rate_limit)):
            check_key_option(self.name, option, getattr(self, option), needs=needs,
                             given=given, signature=self.signature,
                             takes_context=self.takes_context)
        if self.rate is not None and len(self.name) > MAX_SLOT_JOB_NAME:
            raise JobConfigurationError(
                f"job {self.name[:40]!r}…: a job with rate_limit= needs a name of at most "
                f"{MAX_SLOT_JOB_NAME} characters")

    @cached_property
    def rate(self) -> RateLimit | None:
        """``rate_limit`` parsed; None without one."""
        return parse_rate_limit(self.name, self.rate_limit)

    def slot_key_of(self, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
        """The key of the fleet slots a call of this job takes: ``""`` (the job's own,
        ``job:<name>``) unless the job has ``concurrency_key``. Refused by name before any SQL
        when it cannot be stored (rule 54 (bad-flow-option-refused))."""
        if self.concurrency_key is None or self.concurrency is None:
            return ""
        key = key_value(self.name, "concurrency_key", self.concurrency_key, self.signature,
                        self.takes_context, args, kwargs)
        return stored_key(self.name, "concurrency_key", key)

    def rate_key_of(self, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
        """The key of the rate-limit bucket a start of this call draws from: ``job:<name>``,
        or per ``rate_limit_key``."""
        if self.rate_limit_key is None:
            return slot_key_for(self.name)
        key = key_value(self.name, "rate_limit_key", self.rate_limit_key, self.signature,
                        self.takes_context, args, kwargs)
        return stored_key(self.name, "rate_limit_key", key)

    # -- configuring ----------------------------------------------------------------------------

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: timedelta | float | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        timeout: timedelta | float | None = None,
        expires_in: timedelta | float | None = None,
        tags: Sequence[str] | None = None,
    ) -> JobSpec:
        """Return a copy with other enqueue options; the registered job is unchanged.

        ``unique_key``: while a job of this name holding that key is queued, running or waiting
        (or finished less than ``unique_for`` seconds ago), ``enqueue`` returns it instead of
        creating another (rules 65 (one-key-holder) to 67 (unique-for-window)).

        ``tags``: labels stored on the job, after the job's own (rule 78 (tags-stored-whole)).
        """
        changes: dict[str, Any] = {}
        if tags is not None:
            changes["tags"] = merged(self.tags, check_tags(self.name, tags))
        if timeout is not None:
            changes["timeout"] = timeout
        if expires_in is not None:
            changes["expires_in"] = expires_in
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
        if unique_key is not None:
            changes["unique_key"] = unique_key
        return dataclasses.replace(self, **changes)

    # -- enqueueing -----------------------------------------------------------------------------

    def call(self, *args: Any, **kwargs: Any) -> JobCall:
        """Return a checked call of this job, for ``bulk_enqueue``."""
        jsonargs.check_arguments(self.name, args, kwargs)
        self._check_signature(args, kwargs)
        if self.rate_limit_key is not None:
            # refused now, not on the worker (rule 54 (bad-flow-option-refused))
            self.rate_key_of(args, kwargs)
        return JobCall(self, args, kwargs)

    @cached_property
    def _bound_shapes(self) -> set[Any]:
        """The shapes of call (``_shape``) that bound to the body's signature."""
        return set()

    def _check_signature(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """Refuse a call the body could never take (a missing or extra argument) now, before
        any SQL, instead of queueing a job that fails every attempt
        (rule 16 (bad-input-refused))."""
        if self.signature is None:
            return
        # Whether a call binds depends on how many positional arguments it has and the names
        # of its keyword ones, never on their values: a shape that bound once binds again, so
        # it is not bound again (``Signature.bind`` was half of what ``call()`` cost a bulk
        # enqueue). A shape that fails is bound every time, for its
        # message.
        shape = _shape(args, kwargs)
        if shape in self._bound_shapes:
            return
        context = (None,) if self.takes_context else ()
        try:
            self.signature.bind(*context, *args, **kwargs)
        except TypeError as exc:
            why = binding_error(self.signature, exc, kwargs, takes_context=self.takes_context)
            raise JobArgumentError(
                f"{self.name}{_bare(self.signature)}: {why}; the call would fail on every attempt"
            ) from None
        if len(self._bound_shapes) < MAX_BOUND_SHAPES:
            self._bound_shapes.add(shape)

    def enqueue(self, *args: Any, **kwargs: Any) -> Job:
        """Queue one call inside the caller's transaction; return its (unsaved-looking) row.

        Non-JSON arguments raise ``JobArgumentError`` (a ``TypeError``) and write nothing. A call
        whose unique key a job holds writes nothing and returns that job
        (rule 66 (held-key-returns-holder)).
        """
        return enqueue.enqueue_one(self.call(*args, **kwargs))[0]

    def enqueue_or_existing(self, *args: Any, **kwargs: Any) -> tuple[Job, bool]:
        """``enqueue``, and whether it created the job (False: the job holding its key)."""
        return enqueue.enqueue_one(self.call(*args, **kwargs))

    def bulk_enqueue(self, calls: Iterable[Sequence[Any] | JobCall]) -> list[int]:
        """Queue many calls of this job in one statement; each item is an args tuple or a call."""
        return enqueue.bulk_enqueue(
            c if isinstance(c, JobCall) else self.call(*c) for c in calls
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function now, in this process (for tests and shells)."""
        return self.func(*args, **kwargs)


def _shape(args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """What binding a call to a signature depends on: its number of positional arguments and
    its keyword arguments' names (in their order: another order is another shape, bound once
    more)."""
    return (len(args), *kwargs) if kwargs else len(args)


def _bare(signature: inspect.Signature) -> inspect.Signature:
    """``signature`` without annotations, as an error message shows it: ``(a, b=2)``."""
    empty = inspect.Parameter.empty
    return signature.replace(
        parameters=[p.replace(annotation=empty) for p in signature.parameters.values()],
        return_annotation=inspect.Signature.empty)
