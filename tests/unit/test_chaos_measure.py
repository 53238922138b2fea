"""The chaos run's counting (benchmarks/chaos/measure.py): each column of its table, on
hand-made records, so a change that miscounts fails here rather than hiding a regression of
the rules the chaos run watches (rules 1 (leased-claim), 4 (fenced-settle) and 5 (fleet-cap))."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.chaos import measure
from benchmarks.chaos.__main__ import format_table, parse_args
from benchmarks.chaos.measure import Faults, RunRecord, ScenarioResult

OK = frozenset({"succeeded"})


def run(job: int, pid: int, start: float, end: float | None, how: str | None = "completed",
        attempt: int = 1, name: str = "work") -> RunRecord:
    return RunRecord(job=job, attempt=attempt, pid=pid, name=name, start=start, end=end, how=how)


def test_read_runs_pairs_starts_and_ends_across_files(tmp_path: Path) -> None:
    lines = {
        "runs-10.jsonl": [{"event": "start", "job": 1, "attempt": 1, "pid": 10, "t": 1.0,
                           "name": "work"},
                          {"event": "start", "job": 2, "attempt": 1, "pid": 10, "t": 2.0,
                           "name": "work"},
                          {"event": "end", "job": 1, "attempt": 1, "pid": 10, "t": 1.5,
                           "name": "work", "how": "completed"}],
        "runs-11.jsonl": [{"event": "start", "job": 2, "attempt": 2, "pid": 11, "t": 5.0,
                           "name": "work"},
                          {"event": "end", "job": 2, "attempt": 2, "pid": 11, "t": 5.5,
                           "name": "work", "how": "cancelled"}],
    }
    for name, records in lines.items():
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    runs = measure.read_runs(tmp_path)
    assert runs == [run(1, 10, 1.0, 1.5), run(2, 10, 2.0, None, how=None),
                    run(2, 11, 5.0, 5.5, how="cancelled", attempt=2)]
    assert [r.completed for r in runs] == [True, False, False]


def test_a_body_that_returned_twice_with_no_fault_is_a_double_run() -> None:
    runs = [run(1, 10, 0.0, 1.0), run(1, 11, 5.0, 6.0), run(2, 10, 0.0, 1.0)]
    assert measure.ran_twice(runs, Faults()) == 1


def test_a_sigkilled_workers_run_is_inside_the_window() -> None:
    """Rule 1 (leased-claim): a body that returned but whose worker died before writing it runs
    again."""
    runs = [run(1, 10, 0.0, 1.0), run(1, 11, 5.0, 6.0)]
    assert measure.ran_twice(runs, Faults(killed={10: 1.2})) == 0
    assert measure.ran_twice(runs, Faults(killed={11: 7.0})) == 1  # the wrong worker died


def test_a_run_that_ended_while_the_database_was_down_is_inside_the_window() -> None:
    faults = Faults(windows=[(10.0, 12.0)], visibility_timeout=2.0)
    assert measure.ran_twice([run(1, 10, 8.0, 10.5), run(1, 11, 20.0, 21.0)], faults) == 0
    # Ended long after the outage and its lapse: not covered.
    assert measure.ran_twice([run(1, 10, 16.0, 16.5), run(1, 11, 20.0, 21.0)], faults) == 1
    # Ended long before it.
    assert measure.ran_twice([run(1, 10, 1.0, 2.0), run(1, 11, 20.0, 21.0)], faults) == 1


def test_a_cancelled_run_and_a_retry_limited_to_the_good_jobs_are_not_double_runs() -> None:
    runs = [run(1, 10, 0.0, 1.0, how="cancelled"), run(1, 11, 5.0, 6.0),
            run(2, 10, 0.0, 1.0), run(2, 10, 2.0, 3.0, attempt=2)]
    assert measure.ran_twice(runs, Faults()) == 1
    assert measure.ran_twice(runs, Faults(), only={1}) == 0


def test_lost_counts_vanished_rows_wrong_ends_and_successes_nobody_performed() -> None:
    expected = {1: OK, 2: OK, 3: OK, 4: OK, 5: OK, 6: frozenset({"failed", "unrun"})}
    final = {1: "succeeded", 2: None, 3: "failed", 4: "succeeded", 5: "running", 6: "failed"}
    runs = [run(1, 10, 0.0, 1.0), run(4, 10, 0.0, 1.0, how="cancelled")]
    # 2 vanished, 3 failed, 4 succeeded with no body that returned; 5 is stuck, not lost.
    assert measure.lost(expected, final, runs) == 3
    assert measure.stuck(expected, final) == 1


@pytest.mark.parametrize("status", sorted(measure.LIVE))
def test_every_live_status_is_stuck(status: str) -> None:
    assert measure.stuck({1: OK}, {1: status}) == 1
    assert measure.stuck({1: OK}, {1: "succeeded"}) == 0


def test_cap_violations_count_runs_started_over_the_cap() -> None:
    """Rule 5 (fleet-cap): at most ``cap`` runs at once; one ending when the next starts is no
    overlap."""
    runs = [run(1, 10, 0.0, 2.0, name="capped"), run(2, 11, 1.0, 3.0, name="capped"),
            run(3, 12, 1.5, 2.5, name="capped"), run(4, 12, 3.0, 4.0, name="capped"),
            run(5, 13, 1.2, 1.3, name="other")]
    assert measure.cap_violations(runs, "capped", 2, Faults(), now=10.0) == 1
    assert measure.cap_violations(runs, "capped", 3, Faults(), now=10.0) == 0


def test_a_killed_run_ends_at_the_kill_and_an_unfinished_one_runs_until_now() -> None:
    runs = [run(1, 10, 0.0, None, how=None, name="c"), run(2, 11, 2.0, 3.0, name="c")]
    assert measure.cap_violations(runs, "c", 1, Faults(killed={10: 1.0}), now=10.0) == 0
    assert measure.cap_violations(runs, "c", 1, Faults(), now=10.0) == 1


def test_recovery_is_the_longest_standstill_after_a_fault() -> None:
    runs = [run(1, 10, 0.5, 1.5), run(2, 10, 2.5, 4.0), run(3, 10, 6.0, 6.5),
            run(4, 10, 5.5, 9.0, how="cancelled")]
    assert measure.recovery_seconds([2.0, 5.0], runs) == pytest.approx(2.0)
    assert measure.recovery_seconds([], runs) == 0.0
    # After 5.5 only a cancelled run started: the queue never moved again.
    assert measure.recovery_seconds([5.0], runs[:2] + runs[3:]) is None
    # Nothing started after the last fault: nothing was left to run.
    assert measure.recovery_seconds([2.0, 7.0], runs) == pytest.approx(2.0)


def test_a_settle_stale_line_for_a_settle_that_landed_is_false() -> None:
    log = "\n".join([
        'WARNING jobs.worker.settle-stale worker_id=w1 job_id=5 job=work attempt=1 '
        'outcome=succeeded',
        'WARNING jobs.worker.settle-stale worker_id=w1 job_id=6 job=work attempt=1 '
        'outcome=succeeded',
        'INFO jobs.worker.settled worker_id=w1 job_id=7 attempt=1 status=succeeded',
    ])
    stale = measure.events(log, "jobs.worker.settle-stale")
    assert [s["job_id"] for s in stale] == ["5", "6"]
    attempts = [(5, 1, "w1", "succeeded"),  # it landed: the line was false
                (6, 1, "w1", "lease_lost"), (6, 2, "w2", "succeeded")]  # truly stale
    assert measure.false_settle_stale(stale, attempts) == 1


def test_a_scenario_fails_its_bar_on_any_count_and_the_table_says_why() -> None:
    clean = ScenarioResult("a", jobs=3, recover_seconds=0.25).judge()
    dirty = ScenarioResult("b", jobs=3, lost=1, stuck=2).judge()
    dirty.fail_if(True, "imported `this`")
    assert clean.passed and not dirty.passed
    assert dirty.failures == ["lost=1", "stuck=2", "imported `this`"]
    table = format_table([clean, dirty])
    assert "| a | 3 | 0 | 0 | 0 | 0 | 0.2 | pass |" in table
    assert "| b | 3 | 1 | 0 | 2 | 0 | never | FAIL: lost=1, stuck=2, imported `this` |" in table
    assert dirty.as_dict()["passed"] is False
    # A bad input answered at once has nothing to recover from: not "never".
    assert "| c | 1 | 0 | 0 | 0 | 0 | n/a | pass |" in format_table(
        [ScenarioResult("c", jobs=1, timed=False).judge()])


def test_unknown_scenarios_are_refused() -> None:
    assert parse_args(["--scenarios", "churn, terminate"]).scenarios == ["churn", "terminate"]
    with pytest.raises(SystemExit):
        parse_args(["--scenarios", "churn,nope"])


def test_per_instant_finds_the_instants_with_no_job_and_with_two() -> None:
    """The clock-step scenario's count: every multiple of ``every`` in (begun, end]."""
    from datetime import UTC, datetime, timedelta

    begun = datetime(2026, 1, 1, 0, 0, 0, 500_000, tzinfo=UTC)
    end = begun + timedelta(seconds=6)
    assert measure.instants(begun, end, 2) == [
        datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in (2, 4, 6)]
    second = [datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in range(1, 7)]
    scheduled = [second[0], second[1], second[1], second[3], second[4], second[5],
                 begun - timedelta(seconds=1), end + timedelta(seconds=1)]
    missing, doubled = measure.per_instant(scheduled, begun, end, 1)
    assert missing == [second[2]]
    assert doubled == {second[1]: 2}
    assert measure.per_instant(second, begun, end, 1) == ([], {})
