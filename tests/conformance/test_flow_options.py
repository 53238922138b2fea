"""Bad flow-control options (rules 55 (timeout-cancels), 57 (retry-on-only),
58 (expired-never-runs), 59 (cancel-reason-kept)) are refused by name before any SQL, the same on
both engines: ``timeout``, ``expires_in`` and ``retry_on`` at declaration and on ``.using()``,
``reason`` at ``cancel_jobs``. The caller's transaction stays usable after each refusal."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction

from django_ultjobs import JobConfigurationError, JobOptionError, job
from django_ultjobs.models import Job
from django_ultjobs.operations import MAX_CANCEL_REASON, cancel_jobs
from django_ultjobs.testing import unregister
from tests.testapp.jobs import add

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

BAD_DURATIONS: list[tuple[Any, str]] = [
    (0, "must be a finite number of seconds greater than 0, not 0"),
    (-1.5, "must be a finite number of seconds greater than 0, not -1.5"),
    (float("nan"), "must be a finite number of seconds greater than 0, not nan"),
    (float("inf"), "must be a finite number of seconds greater than 0, not inf"),
    (1e13, "cannot be more than 100 years"),
    ("5", "must be a number of seconds or a timedelta (or None), not '5'"),
    (True, "must be a number of seconds or a timedelta (or None), not True"),
    (timedelta(seconds=-1), "must be a finite number of seconds greater than 0, not -1.0"),
]


@pytest.mark.parametrize("option", ["timeout", "expires_in"])
@pytest.mark.parametrize(("value", "message"), BAD_DURATIONS)
def test_a_bad_duration_is_refused_at_declaration(option: str, value: Any, message: str) -> None:
    with pytest.raises(JobOptionError, match=f"job 'bad_duration': {option} ") as refused:
        job(name="bad_duration", **{option: value})(lambda: None)
    assert message in str(refused.value)
    assert isinstance(refused.value, JobConfigurationError)
    unregister("bad_duration")


@pytest.mark.parametrize("option", ["timeout", "expires_in"])
@pytest.mark.parametrize(("value", "message"), BAD_DURATIONS)
def test_a_bad_duration_is_refused_on_using_before_any_sql(alias: str, option: str, value: Any,
                                                           message: str) -> None:
    with transaction.atomic(using=alias):
        add.enqueue(1, 2)
        with pytest.raises(JobOptionError, match=f"job 'add': {option} ") as refused:
            add.using(**{option: value}).enqueue(1, 2)
        assert message in str(refused.value)
        assert isinstance(refused.value, ValueError)
        add.enqueue(3, 4)  # the transaction is still usable
    assert Job.objects.using(alias).count() == 2


@pytest.mark.parametrize(("retry_on", "message"), [
    ("ConnectionError", "retry_on must be a tuple of exception classes, not 'ConnectionError'"),
    ([ConnectionError], "retry_on must be a tuple of exception classes"),
    ((ConnectionError, ValueError("x")), "retry_on must hold only exception classes"),
    ((int,), "retry_on must hold only exception classes (such as ConnectionError), not"),
])
def test_a_bad_retry_on_is_refused_at_declaration(retry_on: Any, message: str) -> None:
    with pytest.raises(JobOptionError, match="job 'bad_retry_on': ") as refused:
        job(name="bad_retry_on", retry_on=retry_on)(lambda: None)
    assert message in str(refused.value)
    unregister("bad_retry_on")


def test_good_values_are_kept_in_one_form() -> None:
    """A timedelta is kept as its seconds, one exception class as a tuple of one; ``()``
    retries nothing."""
    spec = job(name="good_options", timeout=timedelta(minutes=2), expires_in=90,
               retry_on=ConnectionError)(lambda: None)
    try:
        assert (spec.timeout, spec.expires_in, spec.retry_on) == (120.0, 90, (ConnectionError,))
        copy = spec.using(timeout=timedelta(seconds=1.5), expires_in=timedelta(hours=1))
        assert (copy.timeout, copy.expires_in) == (1.5, 3600.0)
        assert job(name="good_options", retry_on=())(lambda: None).retry_on == ()
    finally:
        unregister("good_options")


@pytest.mark.parametrize(("reason", "message"), [
    (None, "cancel_jobs(): reason must be text, not None"),
    (42, "cancel_jobs(): reason must be text, not 42"),
    ("x" * (MAX_CANCEL_REASON + 1), f"reason is {MAX_CANCEL_REASON + 1:,} characters"),
])
def test_a_bad_cancel_reason_is_refused_before_any_sql(alias: str, reason: Any,
                                                       message: str) -> None:
    queued = add.enqueue(1, 2)
    with pytest.raises(JobOptionError) as refused:
        cancel_jobs([queued.id], reason=reason)
    assert message in str(refused.value)
    assert Job.objects.using(alias).get(id=queued.id).status == "queued"


def test_a_cancel_reason_is_refused_the_same_on_both_engines_when_no_column_can_keep_it(
        alias: str) -> None:
    """A NUL or a lone surrogate is refused by name before any SQL (rule 16 (bad-input-refused)),
    not refused by one engine and kept by the other; the reason is stored trimmed."""
    queued = add.enqueue(1, 2)
    for bad in ("bad\x00input", "bad \udfff"):
        with pytest.raises(JobOptionError, match="cannot contain a NUL"):
            cancel_jobs([queued.id], reason=bad)
    assert Job.objects.using(alias).get(id=queued.id).status == "queued"
    cancel_jobs([queued.id], reason="  the customer left ")
    assert Job.objects.using(alias).get(id=queued.id).cancel_reason == "the customer left"


