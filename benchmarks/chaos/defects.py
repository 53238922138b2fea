"""Scenarios of one bad value: an outcome PostgreSQL refuses, a row the worker cannot decode,
orphaned and dotted job names, and a worker started while the database is down.

Each is judged on what an operator sees (rows reaching a final state within a deadline, what
the bodies wrote, the workers' output), never on the queue's internals. The bad inputs that do
not need a worker (enqueue arguments, admin URLs, worker flags) are in ``inputs``."""

from __future__ import annotations

import random
import signal
import subprocess
import time

from benchmarks.chaos import measure
from benchmarks.chaos.harness import Harness
from benchmarks.chaos.measure import Faults, ScenarioResult

SUCCEEDED = frozenset({"succeeded"})
#: A bad row is settled failed (it may not run at all).
FAILED = frozenset({"failed", "unrun"})


def _deadline(h: Harness) -> float:
    # Generous: the CI machine may be busy; a wedged queue stays wedged however long we wait.
    return 20.0 if h.short else 30.0


def _wait_recovered(h: Harness, ids: list[int], since: float) -> float | None:
    """Seconds from ``since`` until every job of ``ids`` is final; None if some never is."""
    final = h.wait_final(ids, _deadline(h))
    return None if any(s in measure.LIVE for s in final.values()) else time.time() - since


def _judge(h: Harness, result: ScenarioResult, good: list[int], bad: list[int],
           faults: Faults, bad_may_wait: bool = False) -> ScenarioResult:
    """Count lost, ran twice and stuck: the good jobs must succeed, once; the bad ones must
    fail (``bad_may_wait``: or be queued for a later retry, never left running)."""
    expected = {**dict.fromkeys(good, SUCCEEDED), **dict.fromkeys(bad, FAILED)}
    final = h.statuses(expected)
    h.end()
    runs = measure.read_runs(h.runs_dir)
    result.jobs = len(expected)
    result.lost = measure.lost(expected, final, runs)
    result.ran_twice = measure.ran_twice(runs, faults, only=set(good))
    wedged = {"running"} if bad_may_wait else measure.LIVE
    result.stuck = (measure.stuck(dict.fromkeys(good, SUCCEEDED), final)
                    + sum(1 for job_id in bad if final[job_id] in wedged))
    return result.judge()


def _error_of(h: Harness, job_id: int) -> str:
    from django_ultjobs.models import Job

    row = h.db(lambda: Job.objects.filter(id=job_id).values_list("status", "last_error")
               .first())
    if row is None:
        return "row gone"
    return f"{row[0]}: {row[1].strip().splitlines()[-1][:90] if row[1].strip() else '-'}"


def refused_outcome(h: Harness, rng: random.Random) -> ScenarioResult:
    """Outcomes the database may refuse (a NUL escape in a jsonb result; a retry after an
    infinite backoff) among good ones; then a deploy (SIGTERM, a fresh worker). Every good job
    must finish, once; no bad one may be left running."""
    from benchmarks.chaos.jobs import infinite_backoff, work
    from benchmarks.chaos.jobs import refused_outcome as refused
    from django_ultjobs.jobs.enqueue import bulk_enqueue

    h.begin("refused-outcome")
    first = h.start_fleet(1, threads=2)[0]
    since = time.time()
    bad = {"NUL in the result": h.db(lambda: refused.enqueue().id)}
    if infinite_backoff is not None:
        bad["infinite backoff"] = h.db(lambda: infinite_backoff.enqueue().id)
    good = h.db(lambda: bulk_enqueue([work.call(seconds=0.02)
                                      for _ in range(40 if h.short else 200)]))
    result = ScenarioResult("refused-outcome")
    result.recover_seconds = _wait_recovered(h, good, since)
    left = sum(1 for s in h.statuses(good).values() if s in measure.LIVE)
    result.notes.append(f"good jobs unfinished under the first worker: {left}")
    first.popen.send_signal(signal.SIGTERM)  # a deploy
    try:
        first.popen.wait(timeout=20)
    except subprocess.TimeoutExpired:
        result.notes.append("the first worker ignored SIGTERM (SIGKILLed)")
        first.popen.kill()
    h.start_fleet(1, threads=2)
    h.wait_final([*bad.values(), *good], _deadline(h))
    result.notes += [f"{what}: {_error_of(h, job_id)}" for what, job_id in bad.items()]
    return _judge(h, result, good, list(bad.values()), Faults(), bad_may_wait=True)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def undecodable_row(h: Harness, rng: random.Random) -> ScenarioResult:
    """A row whose args are 3,000 lists deep (written by raw SQL) claimed in one batch with
    good rows: the good ones must run at once, the bad one must fail."""
    from django.db import connection

    from benchmarks.chaos.jobs import work
    from django_ultjobs.jobs.enqueue import bulk_enqueue
    from django_ultjobs.models import Job

    h.begin("undecodable-row")
    ids = h.db(lambda: bulk_enqueue([work.call(seconds=0.02) for _ in range(8)]))
    bad, good = ids[0], ids[1:]

    def corrupt() -> None:
        with connection.cursor() as cur:
            cur.execute(f"UPDATE {Job._meta.db_table} SET args = %s::jsonb, priority = 10 "
                        "WHERE id = %s", [f"[{_nested(3000)}]", bad])

    h.db(corrupt)
    since = time.time()
    h.start_fleet(1, threads=8)  # one claim takes all eight together
    result = ScenarioResult("undecodable-row")
    result.recover_seconds = _wait_recovered(h, good, since)
    h.wait_final([bad], 5.0)
    result.notes.append(f"bad job {_error_of(h, bad)}")
    return _judge(h, result, good, [bad], Faults())


def _orphan(h: Harness, name: str) -> int:
    """A queued job no worker knows (its code deleted since it was queued)."""
    from benchmarks.chaos.jobs import sink
    from django_ultjobs.models import Job

    job_id = h.db(lambda: sink.enqueue().id)
    h.db(lambda: Job.objects.filter(id=job_id).update(name=name))
    return job_id


def _parked(h: Harness, job_id: int) -> bool:
    """Whether the worker has put the job back in the queue for later (or finished it); a
    claimed job is invisible too, but ``running``."""
    from django.db.models.functions import Now

    from django_ultjobs.models import Job

    return h.db(lambda: Job.objects.filter(id=job_id, status="queued",
                                           visible_at__gt=Now()).exists()
                or Job.objects.filter(id=job_id, status__in=["failed", "cancelled",
                                                             "succeeded"]).exists())


def unknown_job(h: Harness, rng: random.Random) -> ScenarioResult:
    """An orphaned job name parked again and again in one episode (its park delay cut short
    by hand, as if the time had passed): the attempts table must not grow per park."""
    from django.db.models.functions import Now

    from django_ultjobs.models import Job, JobAttempt

    h.begin("unknown-job")
    orphan = _orphan(h, "chaos_deleted_job")
    h.start_fleet(1)
    parks = 4 if h.short else 10
    for _ in range(parks):
        h.wait(lambda: _parked(h, orphan), 20, "the orphan to be parked")
        h.db(lambda: Job.objects.filter(id=orphan, status="queued").update(visible_at=Now()))
    h.wait(lambda: _parked(h, orphan), 20, "the orphan to be parked")
    rows = h.db(lambda: JobAttempt.objects.filter(job_id=orphan).count())
    result = ScenarioResult("unknown-job", jobs=1, timed=False)
    result.notes.append(f"attempt rows after {parks + 1} parks in one episode: {rows}")
    result.fail_if(rows > 1, f"attempt rows per episode={rows}")
    h.end()
    return result


#: The first line ``import this`` prints.
ZEN = "Beautiful is better than ugly."


def dotted_import(h: Harness, rng: random.Random) -> ScenarioResult:
    """A row named ``this.zen``: a worker must not import a module a job name points at
    outside the project's jobs (``this`` prints the Zen of Python when imported)."""
    h.begin("dotted-import")
    job_id = _orphan(h, "this.zen")
    h.start_fleet(1)
    h.wait(lambda: _parked(h, job_id), 20, "the job to be parked or finished")
    imported = ZEN in h.logs()
    result = ScenarioResult("dotted-import", jobs=1, timed=False)
    result.notes.append(f"`this` imported: {'yes' if imported else 'no'}; job "
                        f"{_error_of(h, job_id)}")
    result.fail_if(imported, "imported `this`")
    h.end()
    return result


def db_down_start(h: Harness, rng: random.Random) -> ScenarioResult:
    """Start a worker while the cluster is stopped, bring the cluster back: the worker must
    wait (no traceback), then run the queue."""
    from benchmarks.chaos.jobs import work
    from django_ultjobs.jobs.enqueue import bulk_enqueue

    h.begin("db-down-start")
    ids = h.db(lambda: bulk_enqueue([work.call(seconds=0.02) for _ in range(20)]))
    h.cluster.stop("fast")
    down = time.time()
    worker = h.start_worker("--connect-timeout", "60")
    time.sleep(4.0)  # the outage: several of the worker's start-up tries
    alive = worker.alive()
    h.cluster.start()
    up = time.time()
    faults = Faults(windows=[(down, up)])
    result = ScenarioResult("db-down-start")
    if alive:
        result.recover_seconds = _wait_recovered(h, ids, up)
    log = h.logs()
    traceback = "Traceback" in log
    result.notes.append(f"worker alive after {up - down:.0f}s down: {'yes' if alive else 'no'}; "
                        f"traceback: {'yes' if traceback else 'no'}")
    result.fail_if(not alive, "worker exited while the database was down")
    result.fail_if(traceback, "traceback in the worker's output")
    return _judge(h, result, ids, [], faults)
