"""The worker process: start, stop and signals, and the wiring of its pieces.

The claim loop (``claim_loop``: claim only as many runs as can start now), the dispatcher
(``dispatch``: start them on their lanes), the executor (run one job, turn what happens into a
settlement), the completer (write settlements) and the heartbeat (keep leases alive) are separate
pieces; this module connects them, waits for the database at start, and drains at the end.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from django.db import DatabaseError, InterfaceError, connections

from ..conf import get_settings
from ..core.numeric import is_seconds, shown
from ..exceptions import (
    DatabaseUnavailableError,
    JobConfigurationError,
    JobTablesMissingError,
    JobTimeoutError,
    WorkerShutdownError,
)
from ..jobs.registry import registered_jobs
from ..observability import metrics
from ..observability.logs import log_event
from ..store import Clock, JobStore, get_store, unmigrated_message
from .claim_loop import ClaimLoop
from .completer import Completer
from .deadlines import Deadlines
from .dispatch import Dispatcher
from .drain_report import REPORT_INTERVAL, STOP_NOW, describe_runs
from .fleet_slots import FleetSlots
from .gauges import GaugeSampler
from .health import HealthServer
from .heartbeat import Heartbeat
from .listener import Listener
from .options import MAX_SECONDS, WorkerOptions
from .process_pool import KILL_MARGIN
from .rate_gate import RateGate
from .recycle import Recycler
from .runs import RunsInFlight
from .scheduler import Scheduler
from .settlements import abandonment
from .vitals import Vitals
from .worker_row import WorkerRow

logger = logging.getLogger("django_ultjobs.worker")

#: The exit status of a worker stopped by ``--exit-on-overrun`` (rule 56 (overrun-reported)): not 0,
#: which a supervisor reads as "done", nor 1, which ``runjobworker`` uses for a mistake at start.
EXIT_OVERRUN = 3
#: Seconds between a starting worker's tries for its database: doubling from the first, at most
#: the second (a database back from a restart is used within that long).
START_BACKOFF_FIRST = 0.25
START_BACKOFF_MAX = 5.0


class WorkerProcess:
    """One ``runjobworker`` process's worth of job running."""

    def __init__(self, options: WorkerOptions, *, store: JobStore | None = None,
                 clock: Clock | None = None) -> None:
        self.options = options
        self.store = store or get_store(options.database, clock=clock)
        self.worker_id = options.worker_id
        self.runs = RunsInFlight()
        self.recycler = Recycler(options.max_jobs, options.max_memory)
        self.slots = FleetSlots(self.store.slot_store, self.worker_id, options.visibility_timeout)
        #: What a hard stop adds to ``--cancel-wait`` (rule 140 (hard-stop)): the process pool's
        #: time to kill a child and settle its run, before the drain gives up on it or the
        #: timer reports it overrunning.
        self.kill_margin = KILL_MARGIN if options.pool == "process" else 0.0
        self.deadlines = Deadlines(
            store=self.store, worker_id=self.worker_id,
            grace=options.cancel_wait + self.kill_margin,
            on_overrun=self._overran if options.exit_on_overrun else None,
            on_change=lambda: self.heartbeat.overrunning_changed())
        self.row = WorkerRow(self.store, options,
                             overrunning=lambda: self.deadlines.overrunning,
                             runners=lambda: self.pool.runners())
        #: What the health probes read (rules 121 (probe-alive) and 122 (probe-ready)).
        self.vitals = Vitals(heartbeat_interval=options.heartbeat_interval)
        self.heartbeat = Heartbeat(store=self.store, runs=self.runs, slots=self.slots,
                             row=self.row, visibility_timeout=options.visibility_timeout,
                             interval=options.heartbeat_interval, deadlines=self.deadlines,
                             vitals=self.vitals)
        self.completer = Completer(store=self.store, runs=self.runs, slots=self.slots,
                                   worker_id=self.worker_id, on_written=self.wake)
        self.rates = RateGate(self.store, self.worker_id)
        self.dispatcher = Dispatcher(store=self.store, options=options, runs=self.runs,
                                     slots=self.slots, completer=self.completer,
                                     rates=self.rates, on_free=self.wake,
                                     deadlines=self.deadlines)
        self.pool = self.dispatcher.pool
        self.async_lane = self.dispatcher.async_lane
        self._stopping = threading.Event()
        self._forced = threading.Event()
        listening = self.store.vendor == "postgresql" and options.listen
        self.claims = ClaimLoop(store=self.store, options=options, dispatcher=self.dispatcher,
                                slots=self.slots, completer=self.completer, rates=self.rates,
                                recycler=self.recycler, row=self.row, stopping=self._stopping,
                                vitals=self.vitals, notifies=listening)
        self.listener = (
            Listener(store=self.store, queues=options.queues, wake=self.notified,
                     worker_id=self.worker_id, cancels=self.heartbeat.check_cancels)
            if listening else None
        )
        # Every worker may enqueue a tick, none leads (rule 60 (tick-once)); a burst worker drains
        # and exits, so it schedules nothing.
        self.scheduler = (
            Scheduler(store=self.store, worker_id=self.worker_id, clock=clock)
            if options.schedule and not options.burst else None
        )
        #: The probes' server while ``run`` runs with ``--health-port`` (its ``port`` the one
        #: listened on).
        self.health: HealthServer | None = None
        #: The gauge sampler, started with the other threads when metrics are on
        #: (rule 71 (gauges-one-reader)).
        self.gauges: GaugeSampler | None = None
        # Whether SIGINT and SIGTERM are this worker's (a second one forces the stop).
        self._signals_installed = False
        self.started = threading.Event()
        #: What ``run`` returns: 0, or ``EXIT_OVERRUN`` after ``--exit-on-overrun`` fired.
        self.exit_code = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def check(self) -> None:
        """Refuse promises that would do nothing (rule 10 (cap-kept-or-refused)), and a gauge
        interval that would spin the sampler (django_ultjobs.E050)."""
        interval = get_settings().GAUGE_INTERVAL
        if metrics.enabled() and not is_seconds(interval, MAX_SECONDS):
            raise JobConfigurationError(
                f"ULTJOBS['GAUGE_INTERVAL'] is {shown(interval)}; it must be a number of seconds "
                f"from more than 0 to {MAX_SECONDS:.0f} (leave it out for the default, 15)")
        capped = sorted(n for n, spec in registered_jobs().items() if spec.concurrency)
        if capped and self.store.slot_store is None:
            raise JobConfigurationError(
                f"job(s) {', '.join(capped)} declare concurrency=, but the job store "
                f"{type(self.store).__name__} on database {self.store.alias!r} has no lease "
                "store, so the cap would silently hold per process instead of fleet-wide. "
                "Use the PostgreSQL or SQLite store, or remove concurrency= from those jobs."
            )

    def run(self, *, install_signals: bool = True) -> int:
        """Claim and run jobs until stopped (or, with ``burst``, until none is runnable)."""
        self.check()
        # The process pool's fork server first, while this process runs no thread of the
        # worker's and holds no connection it opened: its children start from here.
        self.pool.prepare()
        # Listening before the start-up wait (readiness says "starting" meanwhile), and before
        # the row is written: a port in use fails the start with nothing to undo.
        health = self.health = self._health_server()
        # Before the start-up wait, so a SIGTERM during it stops the worker cleanly.
        restore = self._install_signals() if install_signals else None
        try:
            if health is not None:
                health.start()
            if self._start():
                self._serve()
        finally:
            if restore is not None:
                restore()
            if health is not None:
                health.stop()
            self.pool.stop(timeout=0.5)
            connections.close_all()
        return self.exit_code

    def _health_server(self) -> HealthServer | None:
        """The probes' server (rules 121 (probe-alive) to 123 (probes-only)), listening; None
        without ``--health-port``."""
        if self.options.health_port is None:
            return None
        vitals = self.vitals

        def alive() -> str | None:
            # The children are the process pool's places: a pool that cannot run bodies is
            # not live.
            return vitals.not_alive() or self.pool.trouble()

        def ready() -> str | None:
            return (vitals.not_ready(started=self.started.is_set(),
                                     stopping=self._stopping.is_set())
                    or self.pool.trouble())

        return HealthServer({"/livez": alive, "/readyz": ready},
                            host=self.options.health_host, port=self.options.health_port,
                            worker_id=self.worker_id)

    def _overran(self) -> None:
        """``--exit-on-overrun``: a body ignores its timeout, and only the process exit can stop
        it (rule 56 (overrun-reported)). Drain as on SIGTERM, then exit ``EXIT_OVERRUN`` so the
        supervisor starts a fresh process. The other runs get the grace period; the overrunning one
        is settled as timed out and retried, after the visibility timeout, by another process."""
        if self.exit_code:
            return
        self.exit_code = EXIT_OVERRUN
        log_event(logger, logging.ERROR, "jobs.worker.exit-on-overrun", worker_id=self.worker_id,
                  exit_code=EXIT_OVERRUN, overrunning=len(self.deadlines.overrunning))
        self.request_stop()

    def _serve(self) -> None:
        """Start the threads, claim until stopped, then drain."""
        self._start_threads()
        log_event(logger, logging.INFO, "jobs.worker.started", worker_id=self.worker_id,
                  queues=",".join(self.options.queues), pool=self.options.pool,
                  threads=self.options.places,
                  async_concurrency=self.options.async_concurrency,
                  visibility_timeout=self.options.visibility_timeout,
                  heartbeat_interval=self.options.heartbeat_interval,
                  database=self.store.alias, vendor=self.store.vendor)
        self.started.set()
        try:
            self.claims.run()
        finally:
            if self.listener is not None:
                self.listener.stop()
            if self.scheduler is not None:
                self.scheduler.stop()
            self._drain()
            self._log_stopped()

    def _log_stopped(self) -> None:
        """Say the worker stopped, with what it did: the one summary a ``--burst`` run prints."""
        done = self.completer
        log_event(logger, logging.INFO, "jobs.worker.stopped", worker_id=self.worker_id,
                  jobs_claimed=self.jobs_claimed, claim_statements=self.claim_statements,
                  settled=done.settled, stale=done.stale, unstorable=done.unstorable)

    def request_stop(self, *, force: bool = False) -> None:
        """Stop claiming and drain (thread- and signal-safe); ``force`` skips the grace period."""
        if force:
            self._forced.set()
        self._stopping.set()
        self.claims.wake()
        self.pool.notify()

    def wake(self) -> None:
        """Claim now instead of at the next poll (a settle was written, the worker stops)."""
        self.claims.wake()

    def notified(self) -> None:
        """A job was enqueued (LISTEN/NOTIFY): claim now, every kind included."""
        self.claims.notified()

    @property
    def claim_statements(self) -> int:
        """Claim statements sent (``ClaimLoop.claim_statements``)."""
        return self.claims.claim_statements

    @property
    def jobs_claimed(self) -> int:
        """Jobs the claim statements claimed (``ClaimLoop.jobs_claimed``)."""
        return self.claims.jobs_claimed

    # -- stopping -------------------------------------------------------------------------------

    def _drain(self) -> None:
        """Let runs finish within the grace period, cancel the rest, hand back what remains."""
        # No run will be claimed any more: the kept slots go back now, and every slot whose run
        # settles from here on goes straight back, not to be kept for the grace period.
        self.slots.release_all()
        if self.recycler.reason is not None:
            self._finish_runs_unless_stopped()
        grace = 0.0 if self._forced.is_set() else self.options.grace_period
        if self.dispatcher.busy():
            hint = {"hint": STOP_NOW} if self._signals_installed and grace > 0 else {}
            log_event(logger, logging.INFO, "jobs.worker.draining", worker_id=self.worker_id,
                      in_flight=self.dispatcher.busy(), grace_period=grace,
                      running=describe_runs(self.dispatcher.executing()), **hint)
            self._wait_idle_unless_forced(grace)
        if self.dispatcher.busy():
            self._cancel_running()
        for run in self.dispatcher.executing():
            # Handed back on a dead worker's schedule, its slot left to lapse: the body may run on
            # until the process exits, and nobody else may start the job (or take the slot) while
            # it does.
            if self.completer.submit(run, abandonment(run, self.options.visibility_timeout),
                                     abandoned=True):
                log_event(logger, logging.WARNING, "jobs.worker.run-abandoned",
                          worker_id=self.worker_id, job_id=run.id,
                          note="the body ignored its cancellation; handed back after the "
                               "visibility timeout, and the process exit stops it")
        self.completer.stop(timeout=max(10.0, self.options.heartbeat_interval))
        self.deadlines.stop()
        self.heartbeat.stop()
        if self.gauges is not None:
            self.gauges.stop()
        self.pool.stop(timeout=0.5)
        self.async_lane.stop(timeout=0.5)
        try:
            self.store.worker_stop(self.worker_id)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.touch-failed",
                      worker_id=self.worker_id, error=repr(exc))

    def _cancel_running(self) -> None:
        """Cancel the runs the grace period (or a second signal) left, and wait ``cancel_wait``
        for them to unwind."""
        log_event(logger, logging.INFO, "jobs.worker.cancelling-runs", worker_id=self.worker_id,
                  in_flight=self.dispatcher.busy(),
                  why="stop forced" if self._forced.is_set() else "grace period over",
                  running=describe_runs(self.dispatcher.executing()))
        for run in self.dispatcher.executing():
            run.scope.cancel(WorkerShutdownError(
                f"worker {self.worker_id} is stopping; job {run.job.name!r} (id {run.id}) "
                "is handed back to the queue"))
        self.dispatcher.wait_idle(self.options.cancel_wait + self.kill_margin)

    def _finish_runs_unless_stopped(self) -> None:
        """A recycling worker lets every run finish, however long: nothing asked it to stop,
        and cancelling a run would hand its job back for nothing (rule 76 (recycle-at-bound)). A
        SIGTERM meanwhile starts the usual grace period from then on."""
        if self.dispatcher.busy():
            log_event(logger, logging.INFO, "jobs.worker.draining", worker_id=self.worker_id,
                      in_flight=self.dispatcher.busy(), reason=self.recycler.reason,
                      running=describe_runs(self.dispatcher.executing()))
        report_at = time.monotonic() + REPORT_INTERVAL
        while self.dispatcher.busy() and not self._stopping.is_set():
            report_at = self._report_still_running(report_at, grace_left=None)
            self.dispatcher.wait_idle(0.2)

    def _wait_idle_unless_forced(self, grace: float) -> None:
        """Let the runs finish within ``grace`` seconds. Not the ones that timed out: they were
        cancelled already and get ``cancel_wait`` like every cancelled run, not the grace period
        too (a body overrunning its timeout would hold ``--exit-on-overrun`` up for all of it,
        and finish meanwhile: rule 56 (overrun-reported))."""
        deadline = time.monotonic() + grace
        report_at = time.monotonic() + REPORT_INTERVAL
        while self.dispatcher.busy() > self._timed_out_executing() and not self._forced.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            report_at = self._report_still_running(report_at, grace_left=remaining)
            self.dispatcher.wait_idle(min(remaining, 0.2))

    def _report_still_running(self, report_at: float, *, grace_left: float | None) -> float:
        """Name the runs still executing once ``report_at`` has come, so a drain that takes
        the whole grace period never looks like a hang; return when to report next."""
        now = time.monotonic()
        if now < report_at:
            return report_at
        fields = {} if grace_left is None else {"grace_left": round(grace_left, 1)}
        log_event(logger, logging.INFO, "jobs.worker.still-running", worker_id=self.worker_id,
                  in_flight=self.dispatcher.busy(),
                  running=describe_runs(self.dispatcher.executing(), now), **fields)
        return now + REPORT_INTERVAL

    def _timed_out_executing(self) -> int:
        """How many bodies still executing were cancelled by their timeout
        (rule 55 (timeout-cancels))."""
        return sum(isinstance(run.scope.reason, JobTimeoutError)
                   for run in self.dispatcher.executing())

    # -- starting -------------------------------------------------------------------------------

    def _start(self) -> bool:
        """Prepare the database and register this worker, waiting for a database that is not
        there yet; return False if the worker was stopped while it waited.

        A database that is down, restarting, full or refusing connections is waited out with
        backoff, one log line per try, for at most ``connect_timeout`` seconds (then one line
        says why): a worker started with its database (a deploy, a reboot) must not crash-loop.
        Tables that do not exist are refused at once: no wait creates them.
        """
        deadline = time.monotonic() + self.options.connect_timeout
        tries = 0
        registered = False
        while True:
            tries += 1
            try:
                unfit = self.store.unfit_settings()
                if unfit is not None:
                    raise JobConfigurationError(unfit)
                # Registering first: a database nobody migrated is refused before the worker
                # changes anything in it (the WAL switch).
                self.row.register()
                registered = True
                self.vitals.registered()
                self._prepare_database()
                return True
            except (DatabaseError, InterfaceError) as exc:
                if self.store.schema_missing(exc):
                    raise JobTablesMissingError(unmigrated_message(self.store.alias)) from exc
                delay = min(START_BACKOFF_MAX, START_BACKOFF_FIRST * 2 ** min(tries - 1, 8),
                            deadline - time.monotonic())
                if delay <= 0:
                    if registered:
                        self._mark_stopped()
                    raise DatabaseUnavailableError(self._unavailable_message(exc, tries)) \
                        from exc
                log_event(logger, logging.WARNING, "jobs.worker.database-unavailable",
                          worker_id=self.worker_id, database=self.store.alias, tries=tries,
                          error=_one_line(exc), retry_in=round(delay, 2))
            if self._stopping.wait(delay):
                if registered:
                    self._mark_stopped()
                self._log_stopped()
                return False

    def _start_threads(self) -> None:
        """Start the pool, heartbeat, completer and listener; if the system refuses a thread, stop
        what started and mark this worker's row stopped, which would otherwise show as a
        silent worker for ever (rule 17 (failed-start-leaves-no-row))."""
        # The pool stops even the part of it that started before a thread was refused.
        stops: list[Callable[[], None]] = [lambda: self.pool.stop(timeout=0.5)]
        parts: list[tuple[Callable[[], None], Callable[[], None]]] = [
            (self.deadlines.start, self.deadlines.stop),
            (self.heartbeat.start, self.heartbeat.stop),
            (self.completer.start, lambda: self.completer.stop(timeout=0.0)),
        ]
        if self.listener is not None:
            parts.append((self.listener.start, self.listener.stop))
        if self.scheduler is not None:
            parts.append((self.scheduler.start, self.scheduler.stop))
        self.gauges = self._gauge_sampler()
        if self.gauges is not None:
            parts.append((self.gauges.start, self.gauges.stop))
        try:
            self.pool.start()
            for start, stop in parts:
                start()
                stops.append(stop)
        except RuntimeError as exc:  # "can't start new thread": the process's thread limit
            for stop in reversed(stops):
                stop()
            self._mark_stopped()
            raise JobConfigurationError(
                f"could not start the worker's {self.options.threads} executor threads "
                f"({exc}): lower --threads, or raise the system's limit on threads "
                "(ulimit -u, a container's pids limit)"
            ) from exc

    def _gauge_sampler(self) -> GaugeSampler | None:
        """The gauge sampler of this worker, or None: with no SDK configured nothing samples
        (rule 70 (no-sdk-no-metrics)), a ``--burst`` worker leaves sampling to the long-lived ones,
        and a store without fleet slots could not keep it to one worker of the fleet
        (rule 71 (gauges-one-reader))."""
        slot_store = self.store.slot_store
        if self.options.burst or slot_store is None or not metrics.enabled():
            return None
        return GaugeSampler(store=self.store, slot_store=slot_store, worker_id=self.worker_id,
                            interval=get_settings().GAUGE_INTERVAL)

    def _mark_stopped(self) -> None:
        """Mark this worker's row stopped (a start that failed after registering), or log why
        not: the row must not read as a worker gone silent
        (rule 17 (failed-start-leaves-no-row))."""
        try:
            self.store.worker_stop(self.worker_id)
        except Exception as exc:
            log_event(logger, logging.WARNING, "jobs.worker.touch-failed",
                      worker_id=self.worker_id, error=repr(exc))

    def _unavailable_message(self, exc: BaseException, tries: int) -> str:
        alias = self.store.alias
        timeout = self.options.connect_timeout
        if not timeout:
            return (f"database {alias!r} is unavailable (not retried: --connect-timeout is 0): "
                    f"{_one_line(exc)}")
        return (f"database {alias!r} is still unavailable after {tries} tries in {timeout:g} s "
                f"(--connect-timeout): {_one_line(exc)}")

    def _prepare_database(self) -> None:
        if self.store.vendor != "sqlite":
            return
        # WAL lets the web process read while the worker writes; it persists in the file. The
        # switch fails with "database is locked" while another connection holds a read
        # transaction: a start-up wait like any other (_start retries it).
        with self.store.cursor() as cur:
            cur.execute("PRAGMA journal_mode")
            mode = cur.fetchone()[0]
            if str(mode).lower() != "wal":
                cur.execute("PRAGMA journal_mode=WAL")
                log_event(logger, logging.INFO, "jobs.worker.sqlite-wal-enabled",
                          worker_id=self.worker_id, previous_mode=mode)

    def _install_signals(self) -> Callable[[], None] | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        self._signals_installed = True
        previous: dict[int, Any] = {}

        def stop(signum: int, force: bool) -> None:
            log_event(logger, logging.INFO, "jobs.worker.signal", worker_id=self.worker_id,
                      signal=signal.Signals(signum).name, force=force)
            self.request_stop(force=force)

        signals = [0]

        def handle(signum: int, frame: FrameType | None) -> None:
            force = signals[0] > 0 or self._stopping.is_set()  # a second signal: stop now
            signals[0] += 1
            # Not here: the handler runs on the main thread between two of its bytecodes, maybe
            # while it holds a lock that request_stop (or logging) needs, and would wait for
            # itself. A thread of its own waits for the main thread to let go instead.
            threading.Thread(target=stop, args=(signum, force), name="ultjobs-signal",
                             daemon=True).start()

        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, handle)

        def restore() -> None:
            self._signals_installed = False
            for signum, handler in previous.items():
                signal.signal(signum, handler)

        return restore



def _one_line(exc: BaseException) -> str:
    """The driver's message on one line (psycopg adds a hint on a second)."""
    return " ".join(str(exc).split()) or type(exc).__name__

