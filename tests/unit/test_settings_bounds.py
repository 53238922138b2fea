"""Every ``ULTJOBS`` setting is checked by ``manage.py check`` for what the code reading it can
take: a value it cannot is a system check error naming the setting, never an exception out of
the check itself (rule 18 (start-mistake-named)), and the worker and ``prunejobs`` refuse it the
same way.

Before, an int past a float's range (``2**1024``) raised ``OverflowError`` in the check of
``GAUGE_INTERVAL``, ``UNKNOWN_JOB_*`` and ``RETENTION_DAYS``, one past 4,300 digits ``ValueError``
in the messages of several others, a list as ``DATABASE`` ``TypeError`` (unhashable), a string
as ``VISIBILITY_TIMEOUT`` or ``HEARTBEAT_INTERVAL`` ``TypeError`` in W001's comparison; and
``GAUGE_INTERVAL`` or ``UNKNOWN_JOB_DELAY`` of ``1e300`` passed, to overflow a sleep or a settle
later.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from django.core.checks import ERROR
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test.utils import override_settings

from django_ultjobs.checks import check_schedules, check_settings
from django_ultjobs.core.numeric import shown
from django_ultjobs.core.retry import MAX_DELAY
from django_ultjobs.exceptions import JobConfigurationError
from django_ultjobs.worker.options import MAX_SECONDS, WorkerOptions

HUGE = 2**1024  # past a float's range
ENORMOUS = 10**5000  # past the 4,300 digits Python prints
#: Values no setting takes, whatever its type.
HOSTILE: list[Any] = [HUGE, -HUGE, ENORMOUS, math.nan, math.inf, -math.inf, True, [1], {"a": 1},
                      b"x", object()]
#: Seconds of the worker's timings, and more than a sleep or the database's clock takes.
NUMBERS: list[Any] = [*HOSTILE, "30", None, 0, -1, 1e300]

#: (setting, values refused): every setting of conf.UltJobsSettings.
REFUSED: list[tuple[str, list[Any]]] = [
    ("DATABASE", [*HOSTILE, None, "", "nope"]),
    ("STORE", [*HOSTILE, ""]),
    ("VISIBILITY_TIMEOUT", [*NUMBERS, MAX_SECONDS + 1]),
    ("HEARTBEAT_INTERVAL", [*NUMBERS, MAX_SECONDS + 1]),
    ("POLL_INTERVAL", [*NUMBERS, MAX_SECONDS + 1]),
    ("RETENTION_DAYS", [*HOSTILE, "14", -1, 36_501, 1e300]),
    ("PRUNE_SCHEDULE", [*HOSTILE, "", "61 * * * *"]),
    ("PRUNE_TIMEZONE", [*HOSTILE, "", "localtime"]),
    ("UNKNOWN_JOB_TIMEOUT", [*HOSTILE, "7d", 0, -1, MAX_DELAY + 1, 1e300]),
    ("UNKNOWN_JOB_DELAY", [*NUMBERS, MAX_DELAY + 1]),
    ("JOB_MODULES", [*HOSTILE, None, "my.tasks", ["a..b"]]),
    # Past PostgreSQL's limit, however far, is W022: the worker compares a length with it.
    ("MAX_RESULT_BYTES", [*(v for v in HOSTILE if v not in (HUGE, ENORMOUS)), None, "4MB", 0,
                          1.5]),
    ("GAUGE_INTERVAL", [*NUMBERS, MAX_SECONDS + 1]),
]
CASES = [(key, value) for key, values in REFUSED for value in values]


def errors_about(key: str, value: Any) -> list[str]:
    """The errors ``manage.py check``'s checks of the app report with ``ULTJOBS[key] = value``."""
    with override_settings(ULTJOBS={key: value}):
        found = [*check_settings(), *check_schedules()]
    return [m.msg for m in found if m.level >= ERROR]


@pytest.mark.parametrize(("key", "value"), CASES,
                         ids=[f"{k}={shown(v)[:30]}" for k, v in CASES])
def test_a_setting_no_reader_takes_is_an_error_naming_it(key: str, value: Any) -> None:
    # rule 18 (start-mistake-named): an error naming the setting, not an exception out of `manage.py
    # check`
    errors = errors_about(key, value)
    assert any(f"ULTJOBS[{key!r}]" in m for m in errors), errors


@pytest.mark.parametrize(("key", "value"), [
    ("VISIBILITY_TIMEOUT", MAX_SECONDS), ("HEARTBEAT_INTERVAL", 0.001), ("POLL_INTERVAL", 1),
    ("RETENTION_DAYS", None), ("RETENTION_DAYS", 0), ("RETENTION_DAYS", 36_500),
    ("UNKNOWN_JOB_TIMEOUT", None), ("UNKNOWN_JOB_TIMEOUT", MAX_DELAY),
    ("UNKNOWN_JOB_DELAY", MAX_DELAY), ("GAUGE_INTERVAL", MAX_SECONDS), ("STORE", None),
    ("DATABASE", "postgres"), ("PRUNE_SCHEDULE", None), ("MAX_RESULT_BYTES", HUGE),
    ("MAX_RESULT_BYTES", ENORMOUS),
], ids=lambda v: shown(v)[:30])
def test_a_setting_at_its_bound_passes(key: str, value: Any) -> None:
    assert errors_about(key, value) == []


@pytest.mark.parametrize("value", [HUGE, ENORMOUS, math.nan], ids=shown)
def test_the_worker_refuses_a_timing_setting_by_the_flag_it_defaults(value: Any) -> None:
    # rule 18 (start-mistake-named): the OverflowError of math.isfinite(2**1024), or the ValueError
    # of its repr.
    with override_settings(ULTJOBS={"VISIBILITY_TIMEOUT": value}), \
            pytest.raises(CommandError, match=r"^--visibility-timeout must be a number"):
        call_command("runjobworker", "--burst")
    with pytest.raises(JobConfigurationError, match=r"^--poll-interval must be a number"):
        WorkerOptions(poll_interval=value)


@pytest.mark.parametrize("value", [HUGE, ENORMOUS, "14"], ids=shown)
def test_prunejobs_refuses_a_retention_setting_by_its_name(value: Any) -> None:
    with override_settings(ULTJOBS={"RETENTION_DAYS": value}), \
            pytest.raises(CommandError, match=r"^ULTJOBS\['RETENTION_DAYS'\] must be a number"):
        call_command("prunejobs", "--dry-run")
