"""A scenario of clocks: one worker's wall clock stepped 30 s ahead, then 30 s behind (an NTP
correction each time), while periodic jobs of every catch-up policy run on it and on a worker
whose clock is right.

The stepped worker runs with ``tests/clockstep`` first on its ``PYTHONPATH``: Python imports it
at start-up, and every reading of that process's wall clock is then off by the seconds a file
holds, which the scenario rewrites mid-run (the monotonic clock is left alone, as an NTP step
leaves it). Judged from the job rows and what the bodies wrote: each scheduled instant of each
policy gets exactly one job (the steady worker runs all along, so every tick is on time and
every policy keeps it), none enqueued before its instant came on the database's clock, each run
once (rules 60 (tick-once) to 62 (catch-up-policy), 102 (database-clock-ticks))."""

from __future__ import annotations

import os
import random
from datetime import datetime, timedelta

from benchmarks.chaos import measure
from benchmarks.chaos.harness import REPO, Harness, WorkerProcess
from benchmarks.chaos.measure import Faults, ScenarioResult

#: The periodic jobs of ``benchmarks.chaos.ticks`` by policy: (name, interval in seconds).
TICKS = {"latest": ("chaos_tick_latest", 1), "none": ("chaos_tick_none", 2),
         "all": ("chaos_tick_all", 1)}
#: First on a process's ``PYTHONPATH``, it steps that process's wall clock (a test-only hook).
CLOCK_STEP = REPO / "tests" / "clockstep"
#: The stepped worker's clock, in seconds off, in the order the scenario sets them.
STEPS = (30, -30, 0)

SUCCEEDED = frozenset({"succeeded"})


def _db_now(h: Harness) -> datetime:
    from django_ultjobs.store import get_store

    return h.db(lambda: get_store("default").db_now())


def _start(h: Harness, step_file: str) -> tuple[WorkerProcess, WorkerProcess]:
    """The steady worker and the stepped one, both scheduling the ticks, both running them."""
    steady = h.start_worker(threads=2, env={"CHAOS_TICKS": "1"})
    stepped = h.start_worker(threads=2, env={
        "CHAOS_TICKS": "1", "ULTJOBS_TEST_CLOCK_STEP": step_file,
        "PYTHONPATH": os.pathsep.join([str(CLOCK_STEP), str(REPO)])})
    h.wait_registered([steady, stepped])
    return steady, stepped


def _wait_ticking(h: Harness) -> None:
    from django_ultjobs.models import Job, JobSchedule

    names = [name for name, _ in TICKS.values()]
    h.wait(lambda: JobSchedule.objects.filter(name__in=names).count() == len(names), 60,
           "the schedules to be registered")
    h.wait(lambda: Job.objects.filter(name=TICKS["latest"][0]).count() >= 2, 30,
           "the ticks to flow")


def clock_step(h: Harness, rng: random.Random) -> ScenarioResult:
    """Step one worker's wall clock +30 s, then -30 s, then back, each for a few seconds;
    count the jobs enqueued per scheduled instant of each catch-up policy."""
    from django_ultjobs.models import Job

    h.begin("clock-step")
    phase = 2.0 if h.short else 10.0
    step_file = h.scenario_dir / "clock-step"
    step_file.write_text("0")
    _, stepped = _start(h, str(step_file))
    _wait_ticking(h)
    begun = _db_now(h)
    for index, offset in enumerate(STEPS):
        step_file.write_text(str(offset))
        until = begun + timedelta(seconds=phase * (index + 1) + (2 if offset == 0 else 0))
        h.wait(lambda until=until: _db_now(h) > until, phase + 30, f"the step to {offset:+} s")
    end = begun + timedelta(seconds=3 * phase)
    names = [name for name, _ in TICKS.values()]
    rows = h.db(lambda: list(Job.objects.filter(
        name__in=names, scheduled_for__gt=begun, scheduled_for__lte=end).values_list(
        "id", "name", "scheduled_for", "created_at", "enqueued_by")))
    ids = [row[0] for row in rows]
    final = h.wait_final(ids, 30.0)
    h.end()
    runs = measure.read_runs(h.runs_dir)
    expected = dict.fromkeys(ids, SUCCEEDED)
    result = ScenarioResult("clock-step", timed=False)
    missing: dict[str, int] = {}
    doubled: dict[str, int] = {}
    for policy, (name, every) in TICKS.items():
        gaps, twice = measure.per_instant((row[2] for row in rows if row[1] == name), begun,
                                          end, every)
        missing[policy], doubled[policy] = len(gaps), len(twice)
        result.jobs += len(measure.instants(begun, end, every))
    early = sum(1 for row in rows if row[3] < row[2])
    by_stepped = sum(1 for row in rows if row[4] == f"schedule:{stepped.worker_id}")
    result.lost = sum(missing.values()) + measure.lost(expected, final, runs)
    result.ran_twice = measure.ran_twice(runs, Faults(), only=set(ids))
    result.stuck = measure.stuck(expected, final)
    result.notes.append(
        "instants with no job " + ", ".join(f"{p} {n}" for p, n in missing.items())
        + "; with two or more " + ", ".join(f"{p} {n}" for p, n in doubled.items())
        + f"; enqueued before their instant {early}; by the stepped worker {by_stepped} of "
        f"{len(rows)}; steps {', '.join(f'{s:+d} s' for s in STEPS)}, {phase:.0f} s each")
    result.fail_if(any(missing.values()), "instants with no job: " + ", ".join(
        f"{p}={n}" for p, n in missing.items()))
    result.fail_if(any(doubled.values()), "instants doubled: " + ", ".join(
        f"{p}={n}" for p, n in doubled.items()))
    result.fail_if(early > 0, f"enqueued before their instant={early}")
    return result.judge()
