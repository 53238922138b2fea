"""Durable steps, event waits and sleeps: a run that is retried or resumed replays its history.

A step's result is stored (fenced on the run's claim token) when its function returns; a later
run of the same job returns the stored result instead of calling the function again. Waits and
sleeps end the run without holding a thread: the job goes to ``waiting`` and is claimed again
when its event arrives or its time comes, and the body replays up to where it stopped.

Every write here refuses to run once the run is cancelled (rule 11 (cooperative-cancel)): that is
what unwinds a body that never checks ``ctx.cancelled``, and what keeps a run that lost its job from
writing for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ..core import jsonargs
from ..exceptions import EventTimeoutError, JobArgumentError, LeaseLostError, StepError
from ..models import JobStep
from ..observability.logs import log_event
from ..observability.tracing import step_span
from ..store import ClaimedJob, JobStore
from .cancel import CancelScope
from .events import check_event_name

T = TypeVar("T")
logger = logging.getLogger("django_ultjobs.worker")

#: How far away "no timeout" is: a waiting job must have some visible_at.
_FOREVER = timedelta(days=365 * 100)


class Suspend(BaseException):
    """Raised through the body to end the run while the job waits (not an error).

    A BaseException so that a body's ``except Exception`` cannot swallow it by accident.
    """

    def __init__(self, *, delay: float, wait_event: str | None = None,
                 wait_match: dict[str, Any] | None = None, wait_after: int = 0,
                 reason: str = "") -> None:
        super().__init__(reason)
        self.delay = max(0.0, delay)
        self.wait_event = wait_event
        self.wait_match = wait_match
        self.wait_after = wait_after
        self.reason = reason


@dataclass(frozen=True)
class _Stored:
    status: str
    result: Any
    wait_until: datetime | None


@dataclass
class StepLedger:
    """One run's view of its job's durable history, and the writes that extend it."""

    store: JobStore
    job: ClaimedJob
    scope: CancelScope
    ran: list[str] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    _history: dict[str, _Stored] | None = None
    _seen: set[str] = field(default_factory=set)
    _event_calls: dict[str, int] = field(default_factory=dict)

    # -- reading the history --------------------------------------------------------------------

    def _stored(self) -> dict[str, _Stored]:
        if self._history is None:
            rows = JobStep.objects.using(self.store.alias).filter(job_id=self.job.id)
            self._history = {
                r.name: _Stored(r.status, r.result, r.wait_until)
                for r in rows.only("name", "status", "result", "wait_until")
            }
        return self._history

    def _claim_name(self, name: str) -> None:
        if not name or len(name) > 200:
            raise StepError("a step name must be 1 to 200 characters long")
        if name in self._seen:
            raise StepError(
                f"step {name!r} was used twice in one run of job {self.job.name!r}; step names "
                "identify results across retries, so each must be unique within the job"
            )
        self._seen.add(name)

    # -- writing it -----------------------------------------------------------------------------

    def _save(self, name: str, status: str, result: Any, wait_seconds: float | None = None
              ) -> datetime | None:
        # Rule 11 (cooperative-cancel): nothing durable is written once the run is cancelled.
        self.scope.raise_if_cancelled()
        saved = self.store.save_step(
            job_id=self.job.id, token=self.job.token, attempt=self.job.attempt, name=name,
            status=status, result_json=None if result is None else jsonargs.dumps(result),
            wait_seconds=wait_seconds,
        )
        if saved is None:
            # The fence said no: another claim owns the job. Cancel the run the way a lost
            # lease does, so the body unwinds now rather than at the next heartbeat.
            error = LeaseLostError(
                f"job {self.job.name!r} (id {self.job.id}) lost its lease: step {name!r} could "
                "not be recorded")
            self.scope.cancel(error)
            self.scope.raise_if_cancelled()
        self._stored()[name] = _Stored(status, result, saved.wait_until if saved else None)
        return saved.wait_until if saved else None

    # -- the three operations -------------------------------------------------------------------

    def step(self, name: str, fn: Callable[[], T], *, atomic: bool = False) -> T:
        """Run ``fn`` once per job, ever (see ``JobContext.step``)."""
        self.scope.raise_if_cancelled()
        self._claim_name(name)
        stored = self._stored().get(name)
        if stored is not None and stored.status == "done":
            self.replayed.append(name)
            log_event(logger, logging.DEBUG, "jobs.step.replayed", job_id=self.job.id, step=name)
            with step_span(self.job.name, name, "step", replayed=True):
                return stored.result
        with step_span(self.job.name, name, "step", replayed=False):
            return self._run_step(name, fn, atomic)

    def _run_step(self, name: str, fn: Callable[[], T], atomic: bool) -> T:
        if atomic:
            # The function's writes to the jobs database and the step's record commit together
            # or not at all; a fence that fails rolls both back. Begun as a writer: ``fn`` may
            # read before it writes (rule 21 (sqlite-begins-as-writer)).
            with self.store.write_transaction():
                result = fn()
                self._check_result(name, result)
                self._save(name, "done", result)
        else:
            result = fn()
            self._check_result(name, result)
            self._save(name, "done", result)
        self.ran.append(name)
        return result

    def wait_for_event(self, event: str, match: dict[str, Any] | None,
                       timeout: timedelta | float | None) -> Any:
        """Return the payload of a matching event, suspending the job until one arrives."""
        self.scope.raise_if_cancelled()
        try:
            # send_event refuses such a name, so nothing could ever wake the wait.
            check_event_name(event)
        except ValueError as exc:
            raise StepError(f"wait_for_event({event!r}): {exc}") from exc
        match = dict(match or {})
        try:
            jsonargs.check_result(f"wait_for_event({event!r}) match", match)
        except JobArgumentError as exc:
            raise StepError(str(exc)) from exc
        for key, value in match.items():
            # Top-level keys compared by JSON equality the same way on both engines; nested
            # values would compare as text on SQLite and structurally on PostgreSQL.
            if isinstance(value, (dict, list, tuple)):
                raise StepError(f"wait_for_event({event!r}): match[{key!r}] must be a string, "
                                "number, boolean or None (match compares top-level values)")
        self._event_calls[event] = self._event_calls.get(event, 0) + 1
        name = f"event:{event}#{self._event_calls[event]}"
        self._claim_name(name)
        stored = self._stored().get(name)
        if stored is not None and stored.status == "done":
            self.replayed.append(name)
            if stored.result.get("timed_out"):
                raise EventTimeoutError(event, match)
            return stored.result["payload"]
        after = self._consumed(event, match)
        found = self.store.find_event(job_id=self.job.id, name=event, match=match, after=after)
        if found is not None:
            event_id, payload = found
            self._save(name, "done", {"event_id": event_id, "payload": payload, "match": match})
            self.ran.append(name)
            return payload
        if stored is None:
            seconds = _seconds(timeout) if timeout is not None else _FOREVER.total_seconds()
            wait_until = self._save(name, "waiting", None, wait_seconds=seconds)
        else:
            wait_until = stored.wait_until
        now = self.store.db_now()
        if wait_until is not None and now >= wait_until:
            self._save(name, "done", {"timed_out": True})
            self.ran.append(name)
            raise EventTimeoutError(event, match)
        remaining = (wait_until - now).total_seconds() if wait_until else _FOREVER.total_seconds()
        raise Suspend(delay=remaining, wait_event=event, wait_match=match, wait_after=after,
                      reason=f"waiting for event {event!r} matching {match}")

    def sleep(self, name: str, duration: timedelta | float) -> None:
        """Suspend the job until ``duration`` has passed since this sleep first began."""
        self.scope.raise_if_cancelled()
        key = f"sleep:{name}"
        self._claim_name(key)
        stored = self._stored().get(key)
        if stored is not None and stored.status == "done":
            self.replayed.append(key)
            return
        if stored is None:
            wait_until = self._save(key, "waiting", None, wait_seconds=_seconds(duration))
        else:
            wait_until = stored.wait_until
        now = self.store.db_now()
        if wait_until is None or now >= wait_until:
            self._save(key, "done", {"slept_until": (wait_until or now).isoformat()})
            self.ran.append(key)
            return
        raise Suspend(delay=(wait_until - now).total_seconds(),
                      reason=f"sleeping {name!r} until {wait_until.isoformat()}")

    # -- helpers --------------------------------------------------------------------------------

    def _consumed(self, event: str, match: dict[str, Any]) -> int:
        """The newest event id earlier waits of this job for ``event`` with the same ``match``
        consumed (a wait with another match may still take an older event)."""
        prefix = f"event:{event}#"
        ids = [
            stored.result.get("event_id", 0)
            for name, stored in self._stored().items()
            if name.startswith(prefix) and stored.status == "done"
            and isinstance(stored.result, dict) and stored.result.get("match", {}) == match
        ]
        return max(ids, default=0)

    def _check_result(self, name: str, result: Any) -> None:
        try:
            jsonargs.check_result(f"step {name!r}", result)
        except JobArgumentError as exc:
            raise StepError(f"{exc}; a step's result is stored as JSON") from exc


def _seconds(value: timedelta | float) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise StepError("a wait or sleep cannot be negative")
    return seconds
