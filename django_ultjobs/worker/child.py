"""A child process of the process pool (``runjobworker --pool process``): it runs one body at a
time for its parent worker, which tells it what to run, when to stop and until when its run's
lease and slot hold.

What crosses the socket, as pickled tuples (``multiprocessing.connection``):

* parent to child: ``(RUN, job, slot, until)``, ``(CANCEL, reason)``, ``(UNTIL, until)``,
  ``(STOP,)``;
* child to parent: ``(READY, pid)`` once, then per run ``(DONE, settlement, seconds, resident
  MiB or None)`` once it is over. (The worker counts the body started when it sends the run:
  one message fewer per run, and its timer starts the sooner, never later.)

The child decides its run's settlement itself (``executor.run_job``: the span, the run hooks, the
context, the retry policy), writes what the body writes through connections of its own (steps,
events, progress, all fenced on the claim token), and the parent settles it. A reader thread takes
the parent's messages while the body runs: a cancel fires the run's scope here.

**The guard.** ``until`` is the instant (``core.clocks.lease_clock``) before which neither the
run's lease nor its slot can lapse, as far as the parent has renewed them. The child arms a
kernel timer for it that sends it ``SIGKILL`` (``guard_timer``): the process ends there,
whatever the body does, even holding the GIL in a C call or taking ``SIGALRM`` for itself, if
the parent stops renewing (stopped, killed, wedged). No other worker can then start the job, or
take the slot, while this body executes (rule 141 (cap-without-cooperation)). A parent that dies
closes the socket (and the fork server's death signal reaches the child): the child exits at
once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
from multiprocessing.connection import Connection
from typing import Any, NoReturn

from django.db import connections

from ..exceptions import JobCancelledError, JobConfigurationError
from ..jobs.registry import get_job
from ..models import AttemptOutcome
from ..observability.logs import log_event
from ..observability.tracing import tracing_enabled
from ..runtime.cancel import CancelScope
from ..store import ClaimedJob, JobStore, Settlement, SlotHold, get_store
from .executor import run_job
from .guard_timer import GuardError, GuardTimer
from .recycle import resident_memory_mb
from .runs import Run
from .settlements import failed_by_worker
from .telemetry import Telemetry
from .thread_connections import note_opened, reset_connections

logger = logging.getLogger("django_ultjobs.worker")

RUN, CANCEL, UNTIL, STOP = "run", "cancel", "until", "stop"
READY, DONE = "ready", "done"
#: The exit status of a child whose parent closed its socket (it died, or killed this child).
EXIT_PARENT_GONE = 70
#: The exit status of a child whose guard the kernel refused to set.
EXIT_GUARD_FAILED = 71

#: A cancel reason as it crosses the socket: its class, message and fields (the subclasses take
#: keyword-only arguments, which pickle cannot rebuild).
ReasonState = tuple[type[JobCancelledError], str, dict[str, Any]]


def reason_state(reason: JobCancelledError) -> ReasonState:
    return (type(reason), str(reason), dict(vars(reason)))


def reason_from(state: ReasonState) -> JobCancelledError:
    """The cancel reason ``reason_state`` described, of the same class, message and fields."""
    cls, message, fields = state
    reason = cls.__new__(cls)
    Exception.__init__(reason, message)
    reason.__dict__.update(fields)
    return reason


class _Current:
    """The run this child executes now, as the reader thread sees it."""

    def __init__(self, guard: GuardTimer) -> None:
        self._lock = threading.Lock()
        self._scope: CancelScope | None = None
        self._guard = guard

    def begin(self, until: float) -> CancelScope:
        """A run arrives: its scope, created here so a cancel sent right after it lands. A
        guard the kernel refuses ends the child before the body starts: the worker hands the
        run back, unburned, and starts a fresh child."""
        scope = CancelScope()
        with self._lock:
            self._scope = scope
            try:
                self._guard.arm(until)
            except GuardError as exc:
                _guard_failed(exc)
        return scope

    def end(self) -> bool:
        """The body is over: its guard is disarmed before its outcome is sent, under the lock
        a renewal takes, so none re-arms it after. False if the kernel refused: the child sends
        the outcome, then exits, since its timer may still fire."""
        with self._lock:
            self._scope = None
            try:
                self._guard.disarm()
            except GuardError:
                return False
        return True

    def cancel(self, reason: JobCancelledError) -> None:
        with self._lock:
            scope = self._scope
        if scope is not None:
            scope.cancel(reason)

    def extend(self, until: float) -> None:
        with self._lock:
            if self._scope is not None:
                # A renewal the kernel refuses leaves the earlier, sooner instant armed: the
                # child may end early (its run handed back), never late.
                with contextlib.suppress(GuardError):
                    self._guard.arm(until)


def _guard_failed(exc: GuardError) -> NoReturn:
    log_event(logger, logging.ERROR, "jobs.worker.child-guard-failed", pid=os.getpid(),
              error=repr(exc))
    os._exit(EXIT_GUARD_FAILED)


def serve(sock: socket.socket, *, database: str | None, worker_id: str,
          report_memory: bool = False) -> NoReturn:
    """The child's life: run what the parent sends until it says stop or goes away.
    ``report_memory``: say the resident memory after each run (``--max-memory-per-child``)."""
    conn = Connection(sock.detach())
    current = _Current(GuardTimer())
    inbox: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
    threading.Thread(target=_read, args=(conn, current, inbox), name="ultjobs-child-reader",
                     daemon=True).start()
    store = get_store(database)
    telemetry = Telemetry(traced=tracing_enabled(), instruments=None)
    try:
        conn.send((READY, os.getpid()))
        while (message := inbox.get())[0] == RUN:
            _, job, slot, scope = message
            settlement, seconds = _run(job, slot, scope, store=store, worker_id=worker_id,
                                       telemetry=telemetry)
            disarmed = current.end()
            conn.send((DONE, settlement, seconds,
                       resident_memory_mb() if report_memory else None))
            if not disarmed:
                _guard_failed(GuardError("the guard could not be disarmed"))
    except OSError:
        pass  # the parent is gone: nothing to tell it
    finally:
        _flush_traces()
        connections.close_all()
    os._exit(0)


def _read(conn: Connection, current: _Current, inbox: queue.SimpleQueue[tuple[Any, ...]]
          ) -> None:
    """Take the parent's messages: a cancel or a new ``until`` acts at once, a run or a stop
    goes to the main thread. The socket closing ends the process, body and all."""
    try:
        while True:
            message = conn.recv()
            kind = message[0]
            if kind == CANCEL:
                current.cancel(reason_from(message[1]))
            elif kind == UNTIL:
                current.extend(message[1])
            elif kind == RUN:
                _, job, slot, until = message
                inbox.put((RUN, job, slot, current.begin(until)))
            else:
                inbox.put((STOP,))
                return
    except (EOFError, OSError):
        os._exit(EXIT_PARENT_GONE)


def _run(job: ClaimedJob, slot: SlotHold | None, scope: CancelScope, *, store: JobStore,
         worker_id: str, telemetry: Telemetry) -> tuple[Settlement, float | None]:
    """Run one job's body here; its settlement and the seconds the body ran."""
    run = Run(job=job, spec=get_job(job.name), scope=scope, slot=slot)
    try:
        if run.spec is None:
            raise JobConfigurationError(
                f"job {job.name!r} is not registered in the worker's child process")
        # Its deadline here too: a body that returns past it ends timed out even before the
        # worker's cancel arrives (rule 132 (timeout-recorded)).
        settlement = run_job(run, store=store, worker_id=worker_id,
                             on_started=run.mark_started, telemetry=telemetry)
    except BaseException as exc:
        settlement = failed_by_worker(run, exc)
    if settlement.outcome != AttemptOutcome.SUCCEEDED:
        note_opened()  # see Dispatcher._execute: a failed session setup leaves no signal
    reset_connections()
    return settlement, run.duration


def _flush_traces() -> None:
    """Export the spans this child ended before it exits (``os._exit`` runs no atexit)."""
    from opentelemetry import trace

    flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if flush is not None:
        with contextlib.suppress(Exception):  # an exporter's failure must not keep it alive
            flush(5000)
