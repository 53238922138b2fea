"""Executor threads: a fixed pool whose free count is exactly what the claim loop may claim.

Waking a thread is the most expensive thing a no-op job costs this process: a futex wake and a GIL
hand-off per run when every run woke a thread of its own (performance.md items 26 and 28). So a
claim is handed over under one lock and wakes ONE idle thread, and a thread that finishes a run
takes the next queued one without sleeping. More threads are woken only when runs wait, checked
every ``STALL`` seconds while any do:

* no thread has taken a run for ``STALL``: the threads awake are in bodies that block, so every
  waiting run gets a thread of its own at once (as if each had been woken on submit);
* runs are being taken but the oldest has waited ``STALL`` or more: the threads awake are too few
  for these bodies, so as many more are woken as are already working the queue (1, 2, 4, ...).

So a run waits at most about ``STALL`` behind bodies that block, and behind short bodies the
helpers double every ``STALL`` until the queue keeps up; no-op jobs are done by the few threads
already awake.

Except while the process is bound by the GIL: its threads used between ``BUSY`` and ``PARALLEL``
CPUs since the watch last judged (``_judge``). A millisecond with no take is then more likely the
GIL held by another thread than bodies that block, so the waiting runs get a thread each only
after ``BUSY_STALL``; and runs that are short (under ``SHORT_RUN`` on average) wait for the GIL,
not for a thread, so no helpers are added to the threads taking them (a thread more would only
hand the GIL over more often). Runs that last longer (bodies that block while other threads
compute) still get their helpers after ``STALL``. Without this, a no-op drain woke about a thread
for every three jobs, most of them in herds when the claim loop held the GIL for a millisecond
(performance.md item 100).

Not ``concurrent.futures.ThreadPoolExecutor``: it wakes a thread per run, holds the process's exit
until every body returns (a body that ignores its cancellation would keep a stopped worker alive),
and has no hook to close a thread's connections when it ends (rule 13); measured in
performance.md item 26.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from django.db import connections

from ..observability.logs import log_event
from .runs import Run

logger = logging.getLogger("django_ultjobs.worker")

#: Seconds a queued run may wait with no thread taking runs before more threads are woken: short
#: against any job that does I/O, long against a no-op body.
STALL = 0.001
#: The share of one CPU from which the process counts as bound by the GIL: its Python runs on
#: one core at a time (the database and other processes share the machine, hence not 1.0).
BUSY = 0.6
#: The CPUs beyond which its threads are running in parallel (bodies in C code that releases
#: the GIL), where more threads help again.
PARALLEL = 1.1
#: How long no thread may take a queued run, while the process is GIL-bound, before each
#: waiting run gets a thread: long against the GIL's hand-overs (every 1 ms under
#: ``runjobworker``), short against a body that blocks on I/O.
BUSY_STALL = 0.005
#: A run shorter than this on average (taken to finished) blocks on nothing worth a thread: it
#: is shorter than a round trip to a database on the same machine.
SHORT_RUN = 0.0002
#: The shortest window the process's CPU and the runs' length are judged over.
SAMPLE = 0.002


class ExecutorPool:
    """``size`` threads running one run each; ``free()`` is how many more the worker may claim."""

    def __init__(self, size: int, handler: Callable[[Run], None], *,
                 on_free: Callable[[], None] | None = None,
                 cpu_clock: Callable[[], float] = time.process_time) -> None:
        self.size = size
        self._handler = handler
        #: The process's CPU seconds (all threads), and when and at what reading the watch last
        #: judged whether it is GIL-bound and its runs short (``_judge``); the runs finished
        #: since, and their time from taken to finished.
        self._cpu_clock = cpu_clock
        self._judged_at = 0.0
        self._judged_cpu = 0.0
        self._bound = False
        self._short = False
        self._runs_done = 0
        self._run_time = 0.0
        #: The threads that took runs in the window: each run's time includes its wait for the
        #: GIL behind the others, so short is judged per thread taking runs.
        self._takers: set[int] = set()
        #: Called once after ``call_on_free``, by the next run to finish (see there).
        self._on_free = on_free
        self._call_on_free = False
        # Reentrant: the worker's signal handler runs on the main thread, which may be inside
        # one of these methods when the signal arrives.
        self._lock = threading.RLock()
        # Executor threads wait on _work, the stall watch on _watch; the claim loop and the drain
        # wait on _freed, notified only when its waiter's condition can hold (not once per run).
        self._work = threading.Condition(self._lock)
        self._watch = threading.Condition(self._lock)
        self._freed = threading.Condition(self._lock)
        #: Queued runs with the time each was handed over.
        self._pending: deque[tuple[float, Run]] = deque()
        #: When a thread last took a queued run, the queue last went from empty to not, or the
        #: watch last woke threads (each starts a new window for the watch to judge).
        self._last_take = 0.0
        #: Threads working the current backlog (the one the claim woke, plus the watch's).
        self._helpers = 0
        self._stopping = False
        self._busy = 0
        self._idle = 0
        #: The free-thread count a waiter on ``_freed`` needs (0: nobody is waiting).
        self._want_free = 0
        self._want_idle = False
        #: The stall watch waits for a hand-over with no time limit (no run is queued).
        self._watch_parked = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"ultjobs-exec-{i}", daemon=True)
            for i in range(size)
        ]
        self._threads.append(
            threading.Thread(target=self._watch_stalls, name="ultjobs-exec-watch", daemon=True))

    def start(self) -> None:
        self._judged_at, self._judged_cpu = time.monotonic(), self._cpu_clock()
        for thread in self._threads:
            thread.start()

    @property
    def busy(self) -> int:
        """Runs handed over and not finished (queued or executing)."""
        with self._lock:
            return self._busy

    def free(self) -> int:
        with self._lock:
            return self.size - self._busy

    def submit(self, run: Run) -> None:
        self.submit_many((run,))

    def submit_many(self, runs: Iterable[Run]) -> None:
        """Hand runs to the pool; the caller claimed no more than ``free()`` of them."""
        now = time.monotonic()
        with self._lock:
            was_empty = not self._pending
            before = len(self._pending)
            self._pending.extend((now, run) for run in runs)
            added = len(self._pending) - before
            if not added:
                return
            self._busy += added
            if was_empty:
                self._last_take = now
                self._helpers = 1
            if self._idle:
                self._work.notify()
            if self._watch_parked and (len(self._pending) > 1 or not self._idle):
                # Runs may wait: the watch judges them. A lone run that an idle thread is woken
                # for cannot, and waking the watch too cost an idle pickup a thread switch and
                # the GIL while that thread starts (performance.md item 93). A later hand-over
                # while this run still waits makes two, and wakes the watch then. A watch not
                # parked looks again within STALL anyway.
                self._watch.notify()

    def wait_for_free(self, timeout: float, at_least: int = 1) -> bool:
        """Block until ``at_least`` threads are free (or ``timeout``); return whether they are."""
        with self._lock:
            self._want_free = at_least
            try:
                return self._freed.wait_for(lambda: self.size - self._busy >= at_least, timeout)
            finally:
                self._want_free = 0

    def wait_idle(self, timeout: float | None) -> bool:
        """Block until no run is executing (or ``timeout``); return whether it is idle."""
        with self._lock:
            self._want_idle = True
            try:
                return self._freed.wait_for(lambda: self._busy == 0, timeout)
            finally:
                self._want_idle = False

    def call_on_free(self) -> None:
        """Have the next run that finishes call ``on_free``, once: for a waiter that waits on
        something else than this pool (the claim loop of a worker with two lanes waits for a
        thread or an async place). Not on every run: a no-op run pays no wake-up for it."""
        with self._lock:
            self._call_on_free = self._on_free is not None

    def notify(self) -> None:
        """Make waiters for free threads re-check (the worker starts stopping); they go on
        waiting unless their condition holds."""
        with self._lock:
            self._freed.notify_all()

    def stop(self, timeout: float) -> None:
        """Ask every thread to exit once the queued runs are taken and its own is over; wait up
        to ``timeout``.

        Threads still inside a body after that are daemons: Python cannot kill a thread, and the
        process exiting is what finally stops a body that ignores its cancellation.
        """
        with self._lock:
            self._stopping = True
            self._work.notify_all()
            self._watch.notify_all()
            self._freed.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.ident is not None:  # not those a failed start never started
                thread.join(max(0.0, deadline - time.monotonic()))

    def _next(self) -> tuple[Run, float] | None:
        """The next queued run and when it was taken, or None once the pool stops and nothing is
        queued."""
        with self._lock:
            while not self._pending:
                if self._stopping:
                    return None
                self._idle += 1
                try:
                    self._work.wait()
                finally:
                    self._idle -= 1
            self._last_take = time.monotonic()
            self._takers.add(threading.get_ident())
            return self._pending.popleft()[1], self._last_take

    def _finished(self, taken_at: float) -> None:
        with self._lock:
            self._runs_done += 1
            self._run_time += time.monotonic() - taken_at
            self._busy -= 1
            if (self._want_free and self.size - self._busy >= self._want_free) or (
                    self._want_idle and self._busy == 0):
                self._freed.notify_all()
            call = self._call_on_free and self._on_free is not None
            self._call_on_free = False
        # Outside the lock: a callback that takes a lock of its own must not nest it in ours.
        if call:
            self._on_free()

    def _watch_stalls(self) -> None:
        """Wake more threads while runs wait (see the module's docstring for when and how many)."""
        with self._lock:
            while not self._stopping:
                if not self._pending:
                    self._watch_parked = True
                    try:
                        self._watch.wait()
                    finally:
                        self._watch_parked = False
                    continue
                now = time.monotonic()
                self._judge(now)
                stalled_for = now - self._last_take
                oldest_waited = now - self._pending[0][0]
                stall = BUSY_STALL if self._bound else STALL
                # Short runs of a GIL-bound process wait for the GIL, not for threads.
                crowded = oldest_waited >= STALL and not (self._bound and self._short)
                if stalled_for < stall and not crowded:
                    # Look again when either may change: the stall's end, the oldest run's
                    # STALL, or (once it has waited that long) the next judgement.
                    until_crowded = STALL - oldest_waited if oldest_waited < STALL else SAMPLE
                    self._watch.wait(min(stall - stalled_for, until_crowded))
                    continue
                if self._idle:
                    # Nobody taking runs: a thread for each. Runs taken, too slowly: double.
                    wake = len(self._pending) if stalled_for >= stall else self._helpers
                    wake = min(self._idle, len(self._pending), wake)
                    self._helpers += wake
                    self._work.notify(wake)
                # Give the woken threads a window to take their runs before looking again. With
                # no idle thread, the threads between runs take the queue (busy counts queued
                # runs, so there are at least as many of those as queued runs).
                self._last_take = now
                self._watch.wait(STALL)

    def _judge(self, now: float) -> None:
        """Once the window since the last judgement is ``SAMPLE`` long: whether the process used
        between ``BUSY`` and ``PARALLEL`` CPUs over it (GIL-bound), and whether the runs that
        finished in it took under ``SHORT_RUN`` on average for each thread taking them (k threads
        taking runs that hold the GIL make each last k times its own; none finishing: long).
        Until then the last verdicts stand. Under the lock, from the watch only."""
        window = now - self._judged_at
        if window < SAMPLE:
            return
        cpu = self._cpu_clock()
        self._bound = BUSY * window <= cpu - self._judged_cpu <= PARALLEL * window
        takers = max(1, len(self._takers))
        self._short = (self._runs_done > 0
                       and self._run_time < SHORT_RUN * self._runs_done * takers)
        self._judged_at, self._judged_cpu = now, cpu
        self._runs_done, self._run_time = 0, 0.0
        self._takers.clear()

    def _loop(self) -> None:
        try:
            while True:
                taken = self._next()
                if taken is None:
                    return
                run, taken_at = taken
                try:
                    self._handler(run)
                except BaseException as exc:
                    # The handler settles every run itself; if even that broke, this thread
                    # must survive it, or the pool would count a dead thread as free forever.
                    log_event(logger, logging.ERROR, "jobs.worker.executor-error",
                              error=repr(exc))
                finally:
                    # Hold nothing of a finished run while idle (rule 13): the next wait may
                    # last hours, and this local kept the Run, its cancel scope and its job's
                    # arguments alive until then.
                    del run, taken
                    self._finished(taken_at)
        finally:
            # Every thread the worker starts closes its connections when it ends (rule 13).
            connections.close_all()
