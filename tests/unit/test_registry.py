"""@job: registration, validated frozen specs, .using() copies; no database needed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_ultjobs import JobArgumentError, JobConfigurationError, job
from django_ultjobs.jobs.registry import get_job, registered, registered_jobs
from django_ultjobs.jobs.spec import JobCall, JobSpec
from django_ultjobs.testing import unregister
from tests.testapp.jobs import add


@pytest.fixture
def names() -> Iterator[list[str]]:
    """Names of throwaway jobs, unregistered after the test."""
    made: list[str] = []
    yield made
    for name in made:
        unregister(name)


def _register(names: list[str], name: str, func: Callable[..., Any] | None = None,
              **options: Any) -> JobSpec:
    names.append(name)

    def body(*args: Any, **kwargs: Any) -> Any:
        return (args, kwargs)

    return job(name=name, **options)(func or body)


def test_bare_decorator_registers_under_the_function_name(names: list[str]) -> None:
    def unit_bare_job(x: int) -> int:
        return x * 2

    names.append("unit_bare_job")
    spec = job(unit_bare_job)
    assert isinstance(spec, JobSpec)
    assert get_job("unit_bare_job") is spec is registered("unit_bare_job")
    assert (spec.name, spec.queue, spec.priority, spec.max_attempts, spec.concurrency) == (
        "unit_bare_job", "default", 0, 3, None)
    assert "unit_bare_job" in registered_jobs()


def test_the_spec_calls_the_function_in_process(names: list[str]) -> None:
    spec = _register(names, "unit.call")
    assert spec(1, 2, k="v") == ((1, 2), {"k": "v"})
    assert add(2, 3) == 5


def test_a_duplicate_name_from_a_different_function_is_refused(names: list[str]) -> None:
    _register(names, "unit.dup")

    def other() -> None: ...

    with pytest.raises(JobConfigurationError, match=r"two jobs are registered as 'unit\.dup'"
                                                    r".*Give one of them @job\(name=\.\.\.\)"):
        job(name="unit.dup")(other)
    assert get_job("unit.dup") is not None and get_job("unit.dup").func is not other


def test_the_same_function_registered_again_replaces_itself(names: list[str]) -> None:
    # What the autoreloader does when it re-imports a module: same module, same qualname.
    specs = []
    for _ in range(2):
        def reloaded() -> str:
            return "again"

        specs.append(_register(names, "unit.reloaded", reloaded))
    assert get_job("unit.reloaded") is specs[1]


def test_a_job_named_after_an_existing_one_is_refused_before_it_is_registered() -> None:
    def add() -> None: ...

    with pytest.raises(JobConfigurationError, match=r"tests\.testapp\.jobs\.add"):
        job(add)
    assert get_job("add") is not None and get_job("add").func.__module__ == "tests.testapp.jobs"


@pytest.mark.parametrize(("options", "message"), [
    ({"max_attempts": 0}, "max_attempts must be at least 1"),
    ({"max_attempts": -1}, "max_attempts must be at least 1"),
    ({"concurrency": 0}, "concurrency must be a whole number from 1 to 2147483647"),
    ({"concurrency": -2}, "concurrency must be a whole number from 1 to 2147483647"),
    ({"concurrency": True}, "concurrency must be a whole number from 1 to 2147483647"),
    ({"concurrency": False}, "concurrency must be a whole number from 1 to 2147483647"),
    ({"backoff": -1.0}, "backoff is -1.0; it must be a finite number of seconds from 0"),
    ({"max_backoff": -1.0}, "max_backoff is -1.0; it must be a finite number of seconds from 0"),
    # Rule 31 (bounded-outcomes): a non-finite or absurd float would reach the settle's timestamp
    # arithmetic (and once refused every settle batch holding it): refused at import, naming the
    # option.
    ({"backoff": float("inf")}, "backoff is inf; it must be a finite number"),
    ({"backoff": float("nan")}, "backoff is nan; it must be a finite number"),
    ({"max_backoff": float("inf")}, "max_backoff is inf; it must be a finite number"),
    ({"max_backoff": float("-inf")}, "max_backoff is -inf; it must be a finite number"),
    ({"max_backoff": 1e300}, r"max_backoff is 1e\+300; .* \(a hundred years\)"),
    ({"backoff": "2"}, "backoff must be a number of seconds, not str '2'"),
    ({"backoff": None}, "backoff must be a number of seconds, not NoneType None"),
    ({"max_backoff": True}, "max_backoff must be a number of seconds, not bool True"),
    ({"queue": ""}, "queue must be 1 to 100 characters"),
    ({"queue": "q" * 101}, "queue must be 1 to 100 characters"),
])
def test_invalid_options_are_refused_and_nothing_is_registered(options: dict[str, Any],
                                                                message: str) -> None:
    with pytest.raises(JobConfigurationError, match=message):
        job(name="unit.invalid", **options)(lambda: None)
    assert get_job("unit.invalid") is None


@pytest.mark.parametrize("name", ["", "n" * 201])
def test_a_job_name_must_be_1_to_200_characters(name: str) -> None:
    with pytest.raises(JobConfigurationError, match="1 to 200 characters"):
        JobSpec(func=lambda: None, name=name)


def test_a_non_callable_is_refused() -> None:
    with pytest.raises(JobConfigurationError, match="is not callable"):
        JobSpec(func=42, name="unit.not-callable")  # type: ignore[arg-type]


def test_using_refuses_a_naive_run_at_and_a_negative_delay() -> None:
    with pytest.raises(JobConfigurationError, match="run_at must be timezone-aware"):
        add.using(run_at=datetime(2030, 1, 1))
    with pytest.raises(JobConfigurationError, match="delay cannot be negative"):
        add.using(delay=-1)
    with pytest.raises(JobConfigurationError, match="delay cannot be negative"):
        add.using(delay=timedelta(seconds=-1))
    with pytest.raises(JobConfigurationError, match="max_attempts must be at least 1"):
        add.using(max_attempts=0)


def test_using_returns_a_changed_copy_and_leaves_the_registered_spec_alone() -> None:
    when = timezone.now() + timedelta(hours=1)
    changed = add.using(queue="emails", priority=7, delay=timedelta(seconds=90), run_at=when,
                        max_attempts=9)
    assert (changed.queue, changed.priority, changed.delay, changed.run_at,
            changed.max_attempts) == ("emails", 7, 90.0, when, 9)
    assert (add.queue, add.priority, add.delay, add.run_at, add.max_attempts) == (
        "default", 0, 0.0, None, 3)
    assert changed.func is add.func and changed.name == add.name
    assert get_job("add") is add
    assert add.using() == add and add.using() is not add


def test_a_spec_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        add.queue = "other"  # type: ignore[misc]


def test_call_checks_the_arguments_before_anything_is_written() -> None:
    assert add.call(1, b=2) == JobCall(add, (1,), {"b": 2})
    with pytest.raises(JobArgumentError, match=r"argument 'b' of add\(\)"):
        add.call(1, b=object())


def test_an_unregistered_plain_name_is_unknown_and_imports_nothing() -> None:
    assert get_job("unit.missing") is None and registered("unit.missing") is None
