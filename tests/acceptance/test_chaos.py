"""Acceptance: ``python -m benchmarks.chaos --short`` on a private PostgreSQL cluster.

The chaos run starts its own cluster (never the shared server), real ``runjobworker``
processes, and its faults: SIGKILL churn (rule 1 (leased-claim)), ``pg_ctl restart`` fast and
immediate and ``pg_terminate_backend`` (rules 2 (heartbeat-retried) and 4 (fenced-settle), the
outage section), fleet slot caps (rule 5 (fleet-cap)), the bad inputs of the admin, the worker's
flags and its start while the database is down, and one worker's wall clock stepped under periodic
jobs (rules 60 (tick-once) to 62 (catch-up-policy), 102 (database-clock-ticks)), and the process
pool's children and workers SIGKILLed (rules 142 (child-death-unburned) and
143 (children-die-with-parent)). Every scenario in ``PASSING`` must meet its bar: nothing lost,
no double run outside the documented window, nothing stuck, no cap exceeded, its own check. The
other scenarios (``python -m benchmarks.chaos`` lists them) measure defects still open; each
joins the list when its fix lands. ``parent-stop`` runs in the full chaos run only: its
recovery figure once read "never" there, not yet explained.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks.chaos.cluster import find_bin_dir
from benchmarks.chaos.scenarios import SCENARIOS
from tests.conftest import REPO

pytestmark = pytest.mark.acceptance

PASSING = [
    "churn",
    "restart-fast",
    "restart-immediate",
    "terminate",
    "admin-digits",
    "worker-flags",
    "db-down-start",
    "undecodable-row",
    "bad-enqueue",
    "refused-outcome",
    "lost-commit",
    "unknown-job",
    "dotted-import",
    "clock-step",
    "workflows",
    "child-kill",
    "parent-kill",
]


def test_the_passing_scenarios_are_scenarios() -> None:
    assert set(PASSING) <= set(SCENARIOS)


def test_the_short_chaos_run_meets_every_bar() -> None:
    try:
        find_bin_dir()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.chaos", "--short", "--json", "--seed", "16",
         "--scenarios", ",".join(PASSING)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.stdout.strip(), f"no report; stderr:\n{out.stderr[-6000:]}"
    report = json.loads(out.stdout)
    failed = {r["scenario"]: r for r in report["results"] if not r["passed"]}
    assert not failed, f"{json.dumps(failed, indent=1)}\nstderr:\n{out.stderr[-4000:]}"
    assert [r["scenario"] for r in report["results"]] == PASSING
    assert out.returncode == 0, out.stderr[-4000:]
