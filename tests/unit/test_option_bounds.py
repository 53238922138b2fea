"""Every ``@job`` option is checked against what its column (or the worker) can hold, not only
its Python type: a refusal is a ``JobOptionError`` naming the option, at declaration, and nothing
is registered (rules 16 (bad-input-refused), 54 (bad-flow-option-refused) and
64 (bad-schedule-refused)). ``.using()``'s options are refused the same way on both engines in
tests/conformance/test_enqueue_refusals.py.

Before, a number past a float's range raised a bare ``OverflowError`` ("int too large to convert
to float"), one past 4,300 digits a bare ``ValueError`` from the refusal's own message, a
non-text name an ``AttributeError``; ``concurrency=1.5`` was accepted and wedged every worker
(tests/worker/test_option_bounds.py); a time zone that is no IANA name (``localtime``) was
accepted and read differently on each host.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

import pytest

from django_ultjobs import JobConfigurationError, JobOptionError, job
from django_ultjobs.core import schedules
from django_ultjobs.core.numeric import shown
from django_ultjobs.core.retry import MAX_DELAY
from django_ultjobs.core.schedules import MAX_EVERY, Schedule, iana_zones
from django_ultjobs.jobs.options import INT_MAX
from django_ultjobs.jobs.registry import registered
from django_ultjobs.testing import unregister

HUGE = 2**1024  # past a float's range
ENORMOUS = 10**5000  # past the 4,300 digits Python prints

#: (options, words the refusal says after the job's name): every option, each bound.
REFUSED: list[tuple[dict[str, Any], str]] = [
    *[({"concurrency": cap}, "concurrency must be a whole number from 1 to 2147483647 (or "
                             "None for no cap), not ")
      for cap in (1.5, math.nan, math.inf, -math.inf, 2**31, 10**30, 0, True, "3", ENORMOUS)],
    ({"priority": ENORMOUS}, "priority must be at most 2147483647, not an int of 16610 bits"),
    ({"priority": -ENORMOUS},
     "priority must be at least -2147483648, not a negative int of 16610 bits"),
    ({"max_attempts": HUGE}, "max_attempts must be at most 2147483647, not an int of 1025 bits"),
    ({"timeout": HUGE}, "timeout cannot be more than 100 years"),
    ({"timeout": ENORMOUS}, "timeout cannot be more than 100 years"),
    ({"timeout": MAX_DELAY + 1}, "timeout cannot be more than 100 years"),
    ({"expires_in": HUGE}, "expires_in cannot be more than 100 years"),
    ({"expires_in": -HUGE}, "expires_in must be a finite number of seconds greater than 0"),
    ({"backoff": HUGE}, "backoff is an int of 1025 bits; it must be a finite number of seconds"),
    ({"max_backoff": -HUGE}, "max_backoff is a negative int of 1025 bits; it must be a finite"),
    ({"unique_for": HUGE}, "unique_for must be a finite number of seconds from 0 to 3155760000"),
    ({"takes_context": 1}, "takes_context must be True or False, not 1"),
    ({"takes_context": "yes"}, "takes_context must be True or False, not 'yes'"),
    ({"rate_limit": "9" * 5000 + "/s"}, 'rate_limit must be a text like "100/m"'),
    ({"rate_limit": f"{INT_MAX + 1}/s"}, 'rate_limit must be a text like "100/m"'),
]

#: The schedule's options, refused by the job's name as the others are.
REFUSED_SCHEDULES: list[tuple[dict[str, Any], str]] = [
    ({"every": HUGE}, "every must be from 1 second to 31,622,400 seconds (366 days), not an int"),
    ({"every": ENORMOUS}, "every must be from 1 second"),
    ({"cron": "0 9 * * *", "timezone": "localtime"},
     "timezone 'localtime' is no IANA time zone (e.g. 'Europe/Paris', 'UTC'): it is each "
     "host's own zone"),
    ({"cron": "0 9 * * *", "timezone": "right/UTC"}, "timezone 'right/UTC' is no IANA time "
                                                     "zone (e.g. 'Europe/Paris', 'UTC'): give "
                                                     "its IANA name, 'UTC'"),
    ({"cron": "0 9 * * *", "timezone": "posix/Europe/Paris"},
     "timezone 'posix/Europe/Paris' is no IANA time zone (e.g. 'Europe/Paris', 'UTC'): give "
     "its IANA name, 'Europe/Paris'"),
    ({"cron": "0 9 * * *", "timezone": "posixrules"}, "timezone 'posixrules' is no IANA"),
    ({"cron": "0 9 * * *", "timezone": "Factory"}, "timezone 'Factory' is no IANA time zone"),
    ({"cron": "0 9 * * *", "timezone": ""}, "timezone must be an IANA zone name like "
                                             "'Europe/Paris' (leave it out for UTC), not ''"),
]


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    """A declaration a test expected refused and that was accepted leaves no job behind."""
    yield
    unregister("unholdable")
    unregister("holdable")


def body(label: str = "") -> None: ...


def case(options: dict[str, Any]) -> str:
    """A test id: ``repr`` would raise for an int past 4,300 digits."""
    return ",".join(f"{name}={shown(value)}"[:40] for name, value in options.items())


@pytest.mark.parametrize(("options", "says"), REFUSED, ids=[case(o) for o, _ in REFUSED])
def test_an_option_its_column_cannot_hold_is_refused_at_declaration_by_name(
        options: dict[str, Any], says: str) -> None:
    # rule 16 (bad-input-refused); rule 54 (bad-flow-option-refused) for concurrency and rate_limit
    with pytest.raises(JobOptionError) as refused:
        job(name="unholdable", **options)(body)
    assert isinstance(refused.value, JobConfigurationError | ValueError)
    assert str(refused.value).startswith(f"job 'unholdable': {says}"), str(refused.value)
    assert registered("unholdable") is None


@pytest.mark.parametrize(("options", "says"), REFUSED_SCHEDULES,
                         ids=[case(o) for o, _ in REFUSED_SCHEDULES])
def test_a_schedule_its_workers_cannot_agree_on_is_refused_at_declaration(
        options: dict[str, Any], says: str) -> None:
    # rule 64 (bad-schedule-refused)
    with pytest.raises(JobOptionError) as refused:
        job(name="unholdable", **options)(body)
    assert str(refused.value).startswith(f"job 'unholdable': {says}"), str(refused.value)
    assert registered("unholdable") is None


def test_a_schedule_refused_names_the_function_of_a_job_without_name() -> None:
    # rule 64 (bad-schedule-refused): the name a job takes from its function, as every other
    # option's refusal says.
    with pytest.raises(JobOptionError, match=r"^job 'body': every must be from 1 second"):
        job(every=0)(body)
    with pytest.raises(JobOptionError, match=r"^job 'body': timezone= and catch_up= apply"):
        job(catch_up="all")(body)
    assert registered("body") is None


def test_a_name_that_is_no_text_is_refused_by_the_option() -> None:
    # rule 16 (bad-input-refused): it raised AttributeError ('int' object has no attribute 'strip').
    with pytest.raises(JobOptionError, match=r"@job\(name=\.\.\.\) of .*body must be a str, "
                                             r"not 5"):
        job(name=5)(body)  # type: ignore[arg-type]


@pytest.mark.parametrize("options", [
    {"concurrency": INT_MAX}, {"concurrency": 1}, {"priority": -(2**31)},
    {"max_attempts": INT_MAX}, {"timeout": MAX_DELAY}, {"expires_in": MAX_DELAY},
    {"backoff": MAX_DELAY}, {"max_backoff": 0}, {"unique_for": MAX_DELAY},
    {"timeout": 10**9}, {"rate_limit": f"{INT_MAX}/s"}, {"rate_limit": " 0000000001 / h "},
    {"takes_context": False}, {"every": MAX_EVERY}, {"every": 1}, {"every": 2**20},
    {"cron": "0 9 * * *"}, {"cron": "0 9 * * *", "timezone": "UTC"},
    {"cron": "0 9 * * *", "timezone": "Etc/UTC"}, {"cron": "0 9 * * *", "timezone": "US/Eastern"},
    {"cron": "0 9 * * *", "timezone": "America/Argentina/ComodRivadavia"},
], ids=case)
def test_the_values_at_each_bound_are_accepted(options: dict[str, Any]) -> None:
    spec = job(name="holdable", **options)(body)
    assert registered("holdable") is spec


def test_the_zones_accepted_are_the_iana_names_less_the_hosts_own() -> None:
    # rule 64 (bad-schedule-refused): what zoneinfo lists (no posix/, right/ nor posixrules there),
    # less localtime and Factory; each loads.
    listed = available_timezones()
    assert iana_zones() == listed - {"localtime", "Factory"}
    assert not any(name.startswith(("posix/", "right/")) for name in iana_zones())
    assert {"UTC", "Europe/Paris", "America/New_York"} <= iana_zones()
    for name in sorted(iana_zones()):
        assert Schedule(cron="0 9 * * *", timezone=name).zone == ZoneInfo(name)


def test_a_cron_without_timezone_is_still_read_in_utc() -> None:
    # rule 64 (bad-schedule-refused): the documented default (timezone left out, or None) is kept.
    assert Schedule(cron="0 9 * * *").zone == ZoneInfo("UTC")
    assert Schedule(cron="0 9 * * *", timezone=None).zone == ZoneInfo("UTC")


def test_a_host_without_a_time_zone_database_is_told_to_install_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # rule 64 (bad-schedule-refused): not "'UTC' is no IANA time zone".
    monkeypatch.setattr(schedules, "iana_zones", frozenset)
    with pytest.raises(JobOptionError, match="'UTC' cannot be read: this host has no time zone "
                                             "database; install the tzdata package"):
        Schedule(cron="0 9 * * *")


#: Queue names no worker may serve: ``runjobworker --queue`` refuses each, so a job in one would
#: wait for ever.
UNSERVABLE_QUEUES = ["", "q" * 101, "a\tb", "emails\n", "\x1b[31mred", "a\x7f", "a\x00b",
                     "q\udcff", "emails\u200b", "a\u2028b", 5, None]


@pytest.mark.parametrize("queue", UNSERVABLE_QUEUES, ids=repr)
def test_a_queue_no_worker_may_serve_is_refused_at_declaration_as_by_runjobworker(
        queue: Any) -> None:
    # rule 16 (bad-input-refused): one rule for both (rule 18 (start-mistake-named)), so the refusal
    # says the same after the name.
    from django_ultjobs.worker.options import WorkerOptions

    with pytest.raises(JobOptionError) as declared:
        job(name="unholdable", queue=queue)(body)
    assert registered("unholdable") is None
    with pytest.raises(JobConfigurationError) as flagged:
        WorkerOptions(queues=(queue,))
    if queue:  # runjobworker refuses an empty --queue before its text is checked
        said = str(declared.value).removeprefix("job 'unholdable': queue ").split(", not ")[0]
        assert str(flagged.value).startswith(f"--queue {said}, not "), str(flagged.value)


@pytest.mark.parametrize("queue", ["default", "q" * 100, "e-mails.fr/é", "file d'attente",
                                   "队列", "a b"])
def test_a_queue_any_worker_may_serve_is_declared_and_served(queue: str) -> None:
    from django_ultjobs.worker.options import WorkerOptions

    assert job(name="holdable", queue=queue)(body).queue == queue
    assert WorkerOptions(queues=(queue,)).queues == (queue,)
