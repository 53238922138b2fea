"""The process pool (``runjobworker --pool process``): sync bodies run in child processes, one at a
time each, and a body that does not stop when told is ended by killing its child.

The worker keeps everything else: the claim loop (``free()`` is the idle children, so it never
claims more than they can start), the heartbeat and slot renewal, the deadlines, the completer,
the scheduler, metrics and the probes. For each child one thread of the worker (``ultjobs-child-N``)
hands it a run, passes on what happens to the run while it executes, and waits for its outcome:

* **Cancel, then kill** (rule 140 (hard-stop)). A cancel of any cause (timeout, lost lease or
  slot, cancel request, drain) is sent to the child, whose body sees it as in a thread. If the
  body has not returned ``--cancel-wait`` seconds later, the child is killed and a fresh one takes
  its place; the run is settled as that cause settles a cooperative run (``timed_out`` under the
  retry policy, ``slot_lost`` and ``interrupted`` handed back, ``cancelled``).
* **The guard** (rule 141 (cap-without-cooperation)). With each heartbeat that renews the run's
  lease and slot, the child is told until when both hold; it ends itself before then if no
  renewal comes (``child.py``), so a stopped or wedged worker never lets its body outlive them.
* **Child death** (rule 142 (child-death-unburned)). A child that dies under a body (a crash, the
  OOM killer, the guard) fails nothing but that run, which is handed back without burning an
  attempt, and is replaced.
* ``--max-jobs-per-child`` and ``--max-memory-per-child`` replace a child between runs.

``async def`` bodies do not come here: they stay on the worker's own event loop (the async lane).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from ..core.clocks import lease_clock
from ..models import AttemptOutcome, JobStatus
from ..observability.logs import log_event
from ..store import Settlement
from . import child as child_side
from . import guard_timer
from .fleet_slots import FleetSlots
from .fork_server import ChildSpawnError, ForkServer
from .options import WorkerOptions
from .places import Places
from .runs import Run
from .settlements import cancel_settlement, failed_by_worker, settlement_for

logger = logging.getLogger("django_ultjobs.worker")

#: Seconds between two looks at a run's lease and slot renewals, to tell its child how long they
#: hold: a small share of the heartbeat interval, which moves them.
UNTIL_CHECK = 0.25
#: Seconds allowed to kill a child and see it end; also what the drain and the overrun report
#: add to ``--cancel-wait`` for the kill to settle its run first.
KILL_MARGIN = 2.0
#: Seconds a child gets to exit when asked (recycled, or the pool stops) before it is killed.
STOP_WAIT = 2.0
#: Seconds a place may go without a child (starting one fails) before the worker is not live.
NO_CHILD_BOUND = 30.0


def guard_margin(visibility_timeout: float) -> float:
    """Seconds before the soonest lapse at which a child ends its body: a tenth of the
    visibility timeout, at most 2 s (process teardown takes milliseconds)."""
    return min(2.0, visibility_timeout / 10)


class Child:
    """One child process as the worker sees it."""

    def __init__(self, pid: int, sock: socket.socket, pidfd: int) -> None:
        self.pid = pid
        self.conn = Connection(sock.detach())
        self.pidfd = pidfd
        self.runs = 0
        self.memory_mb = 0.0

    def send(self, *message: Any) -> bool:
        """Send ``message``; False if the child is gone."""
        try:
            self.conn.send(message)
            return True
        except OSError:
            return False

    def ended(self, timeout: float = 0.0) -> bool:
        """Whether the process has ended (waiting up to ``timeout`` seconds)."""
        if self.pidfd < 0:
            return True
        ready, _, _ = select.select([self.pidfd], [], [], timeout)
        return bool(ready)

    def kill(self) -> None:
        """SIGKILL the child through its pidfd (never a pid the system may have reused), and
        wait up to ``KILL_MARGIN`` for it to end."""
        if self.pidfd < 0:
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        self.ended(KILL_MARGIN)

    def stop(self) -> None:
        """Ask the child to exit; kill it if it has not within ``STOP_WAIT``."""
        if not self.send(child_side.STOP) or not self.ended(STOP_WAIT):
            self.kill()
        self.close()

    def close(self) -> None:
        """Let go of the socket and the pidfd (once: a descriptor number closed twice may be
        another file's by then)."""
        self.conn.close()
        pidfd, self.pidfd = self.pidfd, -1
        if pidfd >= 0:
            os.close(pidfd)


class ProcessPool(Places):
    """``size`` children running one run each; ``free()`` is how many more the worker may claim.

    The same face as ``ExecutorPool``, so the claim loop, the dispatcher and the drain treat both
    alike."""

    def __init__(self, options: WorkerOptions, *, slots: FleetSlots,
                 started: Callable[[Run, int], None],
                 settled: Callable[[Run, Settlement], None],
                 on_free: Callable[[], None] | None = None) -> None:
        super().__init__(options.places, on_free)
        self.options = options
        self.slots = slots
        self._started = started
        self._settled = settled
        self._margin = guard_margin(options.visibility_timeout)
        self._server = ForkServer(self._serve_child)
        #: When each place last went without a child (starting one failed), for the probes.
        self._childless: dict[int, float] = {}
        #: The children by place, and the run (job id) each executes with its pid.
        self.children: dict[int, Child] = {}
        self._running: dict[int, tuple[int, int]] = {}
        self._threads = [
            threading.Thread(target=self._loop, args=(i,), name=f"ultjobs-child-{i}",
                             daemon=True)
            for i in range(self.size)
        ]

    def _serve_child(self, sock: socket.socket) -> Any:
        return child_side.serve(sock, database=self.options.database,
                                worker_id=self.options.worker_id,
                                report_memory=self.options.max_memory_per_child is not None)

    # -- the face the worker sees ---------------------------------------------------------------

    def prepare(self) -> None:
        """Fork the fork server, before the worker starts its threads (``fork_server.py``)."""
        if self._server.pid is None:
            self._server.start()

    def start(self) -> None:
        self.prepare()
        if not guard_timer.available():
            # Rule 141 (cap-without-cooperation) then rests on SIGALRM, which a body may take.
            log_event(logger, logging.WARNING, "jobs.worker.child-guard-fallback",
                      worker_id=self.options.worker_id,
                      note="no POSIX timer here: a body that takes SIGALRM for itself disarms "
                           "its child's guard")
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float) -> None:
        """Stop every child (killing one still in a body) and the fork server."""
        self.stop_handing_over()
        # Idle children exit when asked, in milliseconds; each thread asks its own.
        deadline = time.monotonic() + max(timeout, STOP_WAIT)
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
        for child in list(self.children.values()):
            child.kill()  # its thread is stuck: nothing else will end it
        self._server.stop()

    def runners(self) -> dict[str, int]:
        """The child process running each run now, by job id (the admin's in-flight page)."""
        return {str(job_id): pid for job_id, pid in list(self._running.values())}

    def trouble(self) -> str | None:
        """Why the pool cannot run bodies (one line), or None: the liveness probe's question
        for the children (rule 121 (probe-alive))."""
        if self._stopping or self._server.pid is None:
            return None
        if not self._server.alive():
            return "process pool: the fork server is gone, no child can be replaced"
        now = time.monotonic()
        stuck = [i for i, since in list(self._childless.items()) if now - since > NO_CHILD_BOUND]
        if stuck:
            return (f"process pool: {len(stuck)} of {self.size} places have had no child for "
                    f"over {NO_CHILD_BOUND:g} s (starting one fails)")
        return None

    # -- the thread of each child ---------------------------------------------------------------

    def _loop(self, place: int) -> None:
        wake_r, wake_w = os.pipe()
        child = self._spawn(place)
        try:
            while (run := self.next_run()) is not None:
                if child is None:
                    child = self._spawn(place)
                try:
                    if child is None:
                        settlement = _handed_back(run, "no child process could be started")
                    else:
                        settlement, child = self._run_in(child, run, place, (wake_r, wake_w))
                except BaseException as exc:
                    # A bug of ours mid-run: the child may still be in the body, so it goes.
                    settlement = failed_by_worker(run, exc)
                    if child is not None:
                        child.kill()
                        child.close()
                try:
                    self._settled(run, settlement)
                except BaseException as exc:
                    log_event(logger, logging.ERROR, "jobs.worker.executor-error",
                              error=repr(exc))
                del run  # hold nothing of a finished run while idle (rule 13 (nothing-leaks))
                child = self._renewed(child, place)
                self.finished()
        finally:
            if child is not None:
                child.stop()
            self.children.pop(place, None)
            os.close(wake_r)
            os.close(wake_w)

    def _spawn(self, place: int) -> Child | None:
        """A fresh child for ``place``, ready; None (logged) when none could be started."""
        if self._stopping:
            return None
        try:
            pid, sock, pidfd = self._server.spawn()
            child = Child(pid, sock, pidfd)
            if not child.conn.poll(10.0):
                child.kill()
                child.close()
                raise ChildSpawnError(f"child {pid} did not start within 10 s")
            child.conn.recv()  # READY
        except (ChildSpawnError, EOFError, OSError) as exc:
            self._childless.setdefault(place, time.monotonic())
            log_event(logger, logging.ERROR, "jobs.worker.child-start-failed",
                      worker_id=self.options.worker_id, place=place, error=repr(exc))
            return None
        self._childless.pop(place, None)
        self.children[place] = child
        return child

    def _renewed(self, child: Child | None, place: int) -> Child | None:
        """The child for the next run: this one, or a fresh one if it ended or is due for
        replacement (``--max-jobs-per-child``, ``--max-memory-per-child``)."""
        options = self.options
        if child is not None:
            reason = None
            if options.max_jobs_per_child is not None and \
                    child.runs >= options.max_jobs_per_child:
                reason = "max-jobs-per-child"
            elif options.max_memory_per_child is not None and \
                    child.memory_mb >= options.max_memory_per_child:
                reason = "max-memory-per-child"
            if reason is None and not child.ended():
                return child
            if reason is not None:
                log_event(logger, logging.INFO, "jobs.worker.child-recycled",
                          worker_id=options.worker_id, pid=child.pid, reason=reason,
                          runs=child.runs, memory_mb=round(child.memory_mb, 1))
            child.stop()
            self.children.pop(place, None)
        return self._spawn(place)

    def _until(self, run: Run, slot_at: float | None) -> float:
        """Until when the run's lease and slot hold for sure, less the guard's margin."""
        timeout = self.options.visibility_timeout
        until = run.leased_at + timeout
        if slot_at is not None:
            until = min(until, slot_at + self.slots.ttl)
        return until - self._margin

    def _run_in(self, child: Child, run: Run, place: int, wake: tuple[int, int]
                ) -> tuple[Settlement, Child | None]:
        """Run ``run`` in ``child`` (of ``place``) to its end; its settlement, and the child if
        it lives on. ``wake``: the pipe a cancel of the run writes to."""
        wake_r, wake_w = wake
        slot_at = self.slots.confirmed_at(run.slot) if run.slot is not None else None
        until = self._until(run, slot_at)
        if not child.send(child_side.RUN, run.job, run.slot, until):
            child.close()
            return self._died(child, run, until), None
        # The body counts as started now: its timer runs, its lease is heartbeated.
        self._started(run, child.pid)
        self._running[place] = (run.id, child.pid)
        run.scope.set_canceller(lambda: os.write(wake_w, b"c"))
        cancelled_at: float | None = None
        conn_fd = child.conn.fileno()
        try:
            while True:
                ready, _, _ = select.select([conn_fd, wake_r], [], [], UNTIL_CHECK)
                if wake_r in ready:
                    os.read(wake_r, 64)
                if conn_fd in ready:
                    return self._outcome(child, run), child
                if run.scope.cancelled and cancelled_at is None:
                    reason = run.scope.reason
                    assert reason is not None
                    cancelled_at = time.monotonic()
                    child.send(child_side.CANCEL, child_side.reason_state(reason))
                if cancelled_at is not None and \
                        time.monotonic() - cancelled_at >= self.options.cancel_wait:
                    return self._kill(child, run), None
                if run.slot is not None:
                    slot_at = self.slots.confirmed_at(run.slot) or slot_at
                renewed = self._until(run, slot_at)
                if renewed > until + UNTIL_CHECK:
                    until = renewed
                    child.send(child_side.UNTIL, until)
        except _ChildEnded:
            child.close()
            return self._died(child, run, until), None
        finally:
            run.scope.set_canceller(None)
            self._running.pop(place, None)

    def _outcome(self, child: Child, run: Run) -> Settlement:
        """The run's settlement, as its child sends it once the body is over."""
        try:
            _, settlement, run.duration, memory = child.conn.recv()
        except (EOFError, OSError) as exc:
            raise _ChildEnded from exc
        run.over = True
        child.runs += 1
        child.memory_mb = memory or 0.0
        return settlement

    def _kill(self, child: Child, run: Run) -> Settlement:
        """End a body that did not return ``--cancel-wait`` seconds after its cancel: kill its
        child; the run settles as its cause settles a cooperative run
        (rule 140 (hard-stop))."""
        reason = run.scope.reason
        assert reason is not None
        child.kill()
        child.close()
        run.over = True
        log_event(logger, logging.WARNING, "jobs.worker.child-killed",
                  worker_id=self.options.worker_id, job_id=run.id, job=run.job.name,
                  pid=child.pid, cause=reason.cause, cancel_wait=self.options.cancel_wait,
                  note="the body did not return after its cancellation; its child process "
                       "was killed and a fresh one takes its place")
        return cancel_settlement(run, reason)

    def _died(self, child: Child, run: Run, until: float) -> Settlement:
        """The settlement of a run whose child ended under it: handed back without burning an
        attempt (rule 142 (child-death-unburned)); the guard's end says so."""
        run.over = True
        guarded = lease_clock() >= until
        why = ("its child process ended the body before its lease or slot could lapse: the "
               "worker had stopped renewing them" if guarded
               else f"its child process {child.pid} died (killed, crashed or out of memory)")
        log_event(logger, logging.ERROR, "jobs.worker.child-died",
                  worker_id=self.options.worker_id, job_id=run.id, job=run.job.name,
                  pid=child.pid, guard=guarded)
        outcome = AttemptOutcome.SLOT_LOST if guarded and run.slot is not None else None
        return _handed_back(run, why, outcome=outcome)


class _ChildEnded(Exception):
    """The child's socket closed under a run."""


def _handed_back(run: Run, why: str, *, outcome: str | None = None) -> Settlement:
    """Back to the queue at once, the attempt not burned, recorded as ``interrupted`` (or
    ``slot_lost``) with why."""
    return settlement_for(run, JobStatus.QUEUED, outcome or AttemptOutcome.INTERRUPTED,
                          attempt_delta=-1, delay=0.0, error=f"handed back: {why}")
