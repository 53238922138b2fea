"""A worker whose database lacks ``0008_worker_timeouts`` (new code deployed before ``migrate``)
cannot write its lease timings on its row: it is refused at once, in one line that says to run
``manage.py migrate``, on both engines, never waited for or shown as a traceback.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, worker_env
from tests.worker.test_startup import (
    admin_connection,
    assert_one_line_refusal,
    run_worker,
    tries,
)

SUFFIX = "_hadmin_0006"


@pytest.fixture
def pg_database_at_0006() -> Iterator[None]:
    """A PostgreSQL database of this test's own, dropped after."""
    name = f"test_ultjobs{SUFFIX}"
    with admin_connection() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield
    finally:
        with admin_connection() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_a_database_without_the_timings_column_says_run_migrate(
        engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    alias = "default" if engine == "sqlite" else "postgres"
    if engine == "postgres":
        request.getfixturevalue("pg_database_at_0006")
    env = {"ULTJOBS_TEST_TMP": str(tmp_path), "ULTJOBS_TEST_DB_SUFFIX": SUFFIX}
    subprocess.run([sys.executable, "-m", "django", "migrate", "django_ultjobs",
                    "0006_attempt_slot_lost_index", "--database", alias, "-v", "0"],
                   env={**worker_env(alias), **env}, cwd=REPO, check=True, timeout=120)
    result = run_worker(alias, "--burst", "--connect-timeout", "30", env=env, tmp_path=tmp_path)
    error = assert_one_line_refusal(result)
    assert "manage.py migrate" in error, error
    assert tries(result.stderr) == [], result.stderr
