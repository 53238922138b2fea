"""The workflows scenario (docs/workflows.md): batches with a callback and chains, drained by
three workers under SIGKILL churn and a restart of the cluster.

Bars beyond the shared ones (nothing lost, nothing run twice outside a fault's window, nothing
stuck): every batch's callback ran and succeeded, never before the last of its members' bodies
returned, and every chain ran in order (no link started before the one before it returned).
A callback or a node still pending at the end is stuck: its release was lost."""

from __future__ import annotations

import itertools
import random
import time
from collections import Counter, defaultdict

from benchmarks.chaos import measure
from benchmarks.chaos.harness import VISIBILITY_TIMEOUT, Harness
from benchmarks.chaos.measure import Faults, RunRecord, ScenarioResult

SUCCEEDED = frozenset({"succeeded"})
#: Statuses of a job not finished for good: a pending one waits for its dependencies.
UNFINISHED = measure.LIVE | {"pending"}


def workflows(h: Harness, rng: random.Random) -> ScenarioResult:
    """200 batches of 20 members with an on_success callback and 50 chains of 5, three
    workers, a worker SIGKILLed and replaced every second or so, and one fast restart."""
    from benchmarks.chaos.jobs import work
    from django_ultjobs import Batch, chain

    batches, members = (40, 10) if h.short else (200, 20)
    chains, links = (15, 4) if h.short else (50, 5)
    h.begin("workflows")
    fleet = h.start_fleet(3)

    def enqueue() -> tuple[list[tuple[list[int], int]], list[list[int]]]:
        made = []
        for _ in range(batches):
            with Batch(on_success=work.call(seconds=0.0)) as batch:
                work.bulk_enqueue([work.call(seconds=0.02) for _ in range(members)])
            made.append((batch.member_ids, batch.callback_ids["on_success"]))
        runs = [chain(*(work.call(seconds=0.02) for _ in range(links))).enqueue().job_ids
                for _ in range(chains)]
        return made, runs

    made, chained = h.db(enqueue)
    ids = [j for m, cb in made for j in (*m, cb)] + [j for run in chained for j in run]
    faults = Faults(visibility_timeout=VISIBILITY_TIMEOUT)
    _churn_and_restart(h, fleet, faults, rng, kills=4 if h.short else 10)
    final = _wait_finished(h, ids, 120.0 if h.short else 300.0)
    h.end()
    runs = measure.read_runs(h.runs_dir)
    expected = dict.fromkeys(ids, SUCCEEDED)
    result = ScenarioResult(
        "workflows", jobs=len(ids), lost=measure.lost(expected, final, runs),
        ran_twice=measure.ran_twice(runs, faults),
        stuck=sum(1 for j in ids if final.get(j) in UNFINISHED),
        recover_seconds=measure.recovery_seconds(faults.ends(), runs))
    early, callback_runs = _callbacks(made, runs)
    disorder = _order_violations(chained, runs)
    result.notes.append(f"batches {batches}x{members}, chains {chains}x{links}; callback runs "
                        f"per batch {dict(sorted(Counter(callback_runs).items()))}; "
                        f"chain order violations {disorder}")
    result.fail_if(early > 0, f"callbacks started before their batch finished={early}")
    result.fail_if(0 in callback_runs, "a batch's callback never ran")
    result.fail_if(disorder > 0, f"chain order violations={disorder}")
    result.fail_if(not faults.killed, "no worker was killed (nothing was tried)")
    return result.judge()


def _churn_and_restart(h: Harness, fleet: list, faults: Faults, rng: random.Random, *,
                       kills: int) -> None:
    """SIGKILL a random worker every second or so and start a replacement; restart the
    cluster (fast) half way."""
    alive = list(fleet)
    for n in range(kills):
        time.sleep(rng.uniform(0.8, 1.4))
        victim = alive.pop(rng.randrange(len(alive)))
        faults.killed[victim.pid] = h.kill(victim)
        alive.append(h.start_worker())
        if n == kills // 2:
            start = time.time()
            h.cluster.restart("fast")
            faults.windows.append((start, time.time()))


def _wait_finished(h: Harness, ids: list[int], timeout: float) -> dict[int, str | None]:
    """Wait until every job of ``ids`` finished for good (or ``timeout``); the statuses then."""
    deadline = time.monotonic() + timeout
    while True:
        final = h.statuses(ids)
        if not any(s in UNFINISHED for s in final.values()) or time.monotonic() > deadline:
            return final
        time.sleep(0.2)


def _callbacks(made: list[tuple[list[int], int]], runs: list[RunRecord]
               ) -> tuple[int, list[int]]:
    """How many callbacks started before their batch's last member's body returned, and how
    many completed runs each batch's callback had."""
    by_job: dict[int, list[RunRecord]] = defaultdict(list)
    for run in runs:
        by_job[run.job].append(run)
    early, counts = 0, []
    for members, callback in made:
        last = max((r.end or 0.0 for m in members for r in by_job[m] if r.completed),
                   default=0.0)
        starts = [r.start for r in by_job[callback]]
        early += bool(starts) and min(starts) < last
        counts.append(sum(1 for r in by_job[callback] if r.completed))
    return early, counts


def _order_violations(chained: list[list[int]], runs: list[RunRecord]) -> int:
    """Links that started before the link before them returned."""
    by_job: dict[int, list[RunRecord]] = defaultdict(list)
    for run in runs:
        by_job[run.job].append(run)
    violations = 0
    for ids in chained:
        for before, after in itertools.pairwise(ids):
            done = max((r.end or 0.0 for r in by_job[before] if r.completed), default=None)
            starts = [r.start for r in by_job[after]]
            if starts and (done is None or min(starts) < done):
                violations += 1
    return violations
