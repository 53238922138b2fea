"""Every scenario of the chaos run, by name, in the order the table prints them."""

from __future__ import annotations

import random
from collections.abc import Callable

from benchmarks.chaos import clocks, defects, faults, inputs, process_pool, workflows
from benchmarks.chaos.harness import Harness
from benchmarks.chaos.measure import ScenarioResult

Scenario = Callable[[Harness, random.Random], ScenarioResult]

SCENARIOS: dict[str, Scenario] = {
    "churn": faults.churn,
    "restart-fast": faults.restart_fast,
    "restart-immediate": faults.restart_immediate,
    "terminate": faults.terminate,
    "refused-outcome": defects.refused_outcome,
    "undecodable-row": defects.undecodable_row,
    "bad-enqueue": inputs.bad_enqueue,
    "admin-digits": inputs.admin_digits,
    "worker-flags": inputs.worker_flags,
    "db-down-start": defects.db_down_start,
    "unknown-job": defects.unknown_job,
    "dotted-import": defects.dotted_import,
    "lost-commit": faults.lost_commit,
    "clock-step": clocks.clock_step,
    "workflows": workflows.workflows,
    "child-kill": process_pool.child_kill,
    "parent-stop": process_pool.parent_stop,
    "parent-kill": process_pool.parent_kill,
}
