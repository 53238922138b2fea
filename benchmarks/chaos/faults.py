"""Scenarios of infrastructure faults under a running workload: SIGKILL churn of workers,
``pg_ctl restart`` (fast and immediate), ``pg_terminate_backend`` of the workers' backends, and
settle replies lost after PostgreSQL committed them (``proxy``).

Each runs a fleet of real workers on a queue of jobs (some capped at two runs fleet-wide),
applies its fault while they run, waits for every job to finish, and judges the outcome from
what the bodies wrote (``measure``)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from benchmarks.chaos import measure
from benchmarks.chaos.cluster import backend_pids
from benchmarks.chaos.harness import DATABASE, VISIBILITY_TIMEOUT, Harness, WorkerProcess
from benchmarks.chaos.measure import Faults, ScenarioResult

#: A fault applied while the workload runs; it records what it did in ``Faults``.
Fault = Callable[[Harness, list[WorkerProcess], Faults, random.Random], None]

SUCCEEDED = frozenset({"succeeded"})


def run_workload(h: Harness, name: str, fault: Fault, rng: random.Random, *, jobs: int,
                 seconds: float, workers: int = 2, drain: float = 60.0,
                 port: int | None = None, flags: tuple[str, ...] = ()) -> ScenarioResult:
    """Queue ``jobs`` (a third capped), start ``workers`` (on ``port``, a proxy, if given, with
    ``flags`` added), apply ``fault``, judge."""
    from benchmarks.chaos.jobs import CAP, capped_work, work
    from django_ultjobs.jobs.enqueue import bulk_enqueue

    h.begin(name)
    fleet = h.start_fleet(workers, port=port, flags=flags)
    capped = jobs // 3
    calls = [capped_work.call(seconds=seconds) for _ in range(capped)]
    calls += [work.call(seconds=seconds) for _ in range(jobs - capped)]
    rng.shuffle(calls)
    ids = h.db(lambda: bulk_enqueue(calls))
    faults = Faults(visibility_timeout=VISIBILITY_TIMEOUT)
    fault(h, fleet, faults, rng)
    final = h.wait_final(ids, drain)
    stale = measure.events(h.logs(), "jobs.worker.settle-stale")
    attempts = h.attempt_rows(ids)
    h.end()
    runs = measure.read_runs(h.runs_dir)
    expected = dict.fromkeys(ids, SUCCEEDED)
    result = ScenarioResult(
        name, jobs=len(ids), lost=measure.lost(expected, final, runs),
        ran_twice=measure.ran_twice(runs, faults), stuck=measure.stuck(expected, final),
        cap_violations=measure.cap_violations(runs, "capped_work", CAP, faults, time.time()),
        recover_seconds=measure.recovery_seconds(faults.ends(), runs))
    false_stale = measure.false_settle_stale(stale, attempts)
    result.notes.append(f"runs {len(runs)}, settle-stale {len(stale)} "
                        f"(false {false_stale})")
    if name == "lost-commit":
        result.fail_if(false_stale > 0, f"false settle-stale={false_stale}")
    return result.judge()


def churn(h: Harness, rng: random.Random) -> ScenarioResult:
    """SIGKILL a random worker every so often and start a replacement, as a crashing fleet."""
    kills = 4 if h.short else 12

    def fault(h: Harness, fleet: list[WorkerProcess], faults: Faults,
              rng: random.Random) -> None:
        from django_ultjobs.models import Job

        alive = list(fleet)
        for _ in range(kills):
            time.sleep(rng.uniform(0.8, 1.6))
            if not h.db(lambda: Job.objects.filter(status__in=measure.LIVE).exists()):
                break  # the queue is drained: a kill now tries nothing
            victim = alive.pop(rng.randrange(len(alive)))
            faults.killed[victim.pid] = h.kill(victim)
            alive.append(h.start_worker())

    return run_workload(h, "churn", fault, rng, jobs=150 if h.short else 600,
                        seconds=0.15, workers=3)


def _restart(mode: str) -> Callable[[Harness, random.Random], ScenarioResult]:
    def scenario(h: Harness, rng: random.Random) -> ScenarioResult:
        """Restart the cluster under the workers (``pg_ctl restart -m MODE``), twice."""
        def fault(h: Harness, fleet: list[WorkerProcess], faults: Faults,
                  rng: random.Random) -> None:
            for _ in range(2 if h.short else 5):
                time.sleep(rng.uniform(0.8, 1.5))
                start = time.time()
                h.cluster.restart(mode)
                faults.windows.append((start, time.time()))

        return run_workload(h, f"restart-{mode}", fault, rng, jobs=200 if h.short else 800,
                            seconds=0.1)

    scenario.__doc__ = f"Restart the cluster under the workers (pg_ctl restart -m {mode})."
    return scenario


restart_fast = _restart("fast")
restart_immediate = _restart("immediate")


def terminate(h: Harness, rng: random.Random) -> ScenarioResult:
    """``pg_terminate_backend`` every backend of the job database, three times."""
    from django.db import connection

    def fault(h: Harness, fleet: list[WorkerProcess], faults: Faults,
              rng: random.Random) -> None:
        for _ in range(3 if h.short else 8):
            time.sleep(rng.uniform(0.6, 1.2))
            mine = h.db(lambda: connection.cursor().connection.info.backend_pid)
            start = time.time()
            pids = backend_pids(h.cluster, DATABASE, exclude=[mine])
            if pids:
                h.cluster.psql("SELECT count(pg_terminate_backend(pid)) FROM unnest("
                               f"ARRAY[{','.join(map(str, pids))}]) AS pid")
            faults.windows.append((start, time.time()))

    return run_workload(h, "terminate", fault, rng, jobs=200 if h.short else 800, seconds=0.1)


#: What only a settle's request carries on the wire: the statement's tag. The fleet runs on
#: Django's default connections, which prepare nothing, so every settle sends its text.
SETTLE_MARKER = b"/* django_ultjobs:settle */"


def lost_commit(h: Harness, rng: random.Random) -> ScenarioResult:
    """Lose the reply to some settles after PostgreSQL committed them (a proxy cuts the
    connection instead of passing the reply on): a settle that landed must not be logged as
    ``settle-stale``, nor its job run again."""
    from benchmarks.chaos.proxy import ReplyDropper

    proxy = ReplyDropper(h.cluster.port, SETTLE_MARKER, rate=0.2, rng=rng).start()

    def fault(h: Harness, fleet: list[WorkerProcess], faults: Faults,
              rng: random.Random) -> None:
        pass  # the proxy loses replies by itself while the queue drains

    try:
        result = run_workload(h, "lost-commit", fault, rng, jobs=150 if h.short else 600,
                              seconds=0.02, port=proxy.port)
    finally:
        proxy.close()
    result.notes.append(f"settle replies lost: {len(proxy.dropped)}")
    result.fail_if(not proxy.dropped, "no settle reply was lost (nothing was tried)")
    return result
