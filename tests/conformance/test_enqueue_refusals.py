"""Rule 16 (bad-input-refused): what enqueue refuses, identically on both engines, before any SQL.

Each refusal is one error naming the argument (and the path inside it) or the option, raised
before a statement is sent, so the caller's transaction stays usable: on PostgreSQL a statement
that fails aborts the whole transaction, and a view's own writes with it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
from django.db import transaction

from django_ultjobs import JobArgumentError, JobConfigurationError, JobOptionError
from django_ultjobs.core.jsonargs import MAX_DEPTH
from django_ultjobs.core.retry import MAX_DELAY
from django_ultjobs.jobs.options import INT_MAX, INT_MIN
from django_ultjobs.models import Job
from django_ultjobs.observability import tracing as tracing_module
from django_ultjobs.observability.tracing import acting_as
from django_ultjobs.store import JobStore
from tests.hostile import nested_list
from tests.testapp.jobs import add, flaky, record

from .helpers import claim, enqueue, new_job

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


def depth_of(value: Any) -> int:
    depth = 0
    while isinstance(value, list):
        depth += 1
        value = value[0] if value else None
    return depth


ARGUMENT_REFUSALS: list[tuple[str, Callable[[], Any], str]] = [
    ("NUL in a string", lambda: add.enqueue("a\x00b", 1),
     "argument 0 of add() is a string that contains a NUL character"),
    ("NUL in a keyword's name", lambda: add.enqueue(1, **{"b\x00": 2}),
     "argument 'b\\x00' of add() has a name that contains a NUL character"),
    ("lone surrogate in a keyword's name", lambda: add.enqueue(1, **{"k\udfff": 2}),
     "argument 'k\\udfff' of add() has a name that contains a lone surrogate"),
    ("lone surrogate in a key", lambda: add.enqueue(1, b={"k\udfff": 2}),
     "argument 'b' of add() has a key that contains a lone surrogate"),
    ("10,000 levels", lambda: add.enqueue(nested_list(10_000), 1),
     f"argument 0 of add() at {'[0]' * MAX_DEPTH} nests lists or objects deeper than "
     f"{MAX_DEPTH} levels"),
    (f"{MAX_DEPTH + 1} levels", lambda: add.enqueue(1, b={"x": nested_list(MAX_DEPTH)}),
     f"argument 'b' of add() at ['x']{'[0]' * (MAX_DEPTH - 1)} nests lists or objects deeper"),
    ("10**5000", lambda: add.enqueue(10**5000, 1),
     "argument 0 of add() is an int of more than 4300 digits"),
    ("a 4,301-digit int", lambda: add.enqueue(1, b=[-(10**4300)]),
     "argument 'b' of add() at [0] is an int of more than 4300 digits"),
    ("nan", lambda: add.enqueue(float("nan"), 1), "argument 0 of add() is nan"),
    ("inf", lambda: add.enqueue(1, b=[float("inf")]), "argument 'b' of add() at [0] is inf"),
    ("a call in a bulk enqueue", lambda: add.bulk_enqueue([(1, 2), (1, {"k\x00": 1})]),
     "argument 1 of add() has a key that contains a NUL character"),
    # A call the body could never take would fail every attempt: refused at enqueue instead.
    ("a missing argument", lambda: add.enqueue(1),
     "add(a, b): missing a required argument: 'b'"),
    ("one argument too many", lambda: add.enqueue(1, 2, 3),
     "add(a, b): too many positional arguments"),
    ("an unknown keyword", lambda: add.enqueue(1, 2, c=3),
     "add(a, b): got an unexpected keyword argument 'c'"),
    ("a bad call in a bulk enqueue", lambda: add.bulk_enqueue([(1, 2), (1,)]),
     "add(a, b): missing a required argument: 'b'"),
    # A misspelt keyword is named with the parameter it most likely meant, though Python says
    # only that the real one is missing.
    ("a misspelt keyword", lambda: flaky.enqueue(failtimes=1),
     "flaky(ctx, fail_times): missing a required argument: 'fail_times'; unexpected keyword "
     "'failtimes' (did you mean 'fail_times'?)"),
    ("a misspelt keyword of a call()", lambda: flaky.call(fail_time=1),
     "flaky(ctx, fail_times): missing a required argument: 'fail_times'; unexpected keyword "
     "'fail_time' (did you mean 'fail_times'?)"),
    ("a misspelt keyword in a bulk enqueue",
     lambda: record.bulk_enqueue([("a",), record.call(label="a", second=1)]),
     "record(ctx, label='', seconds=0.0): got an unexpected keyword argument 'second' (did you "
     "mean 'seconds'?)"),
]

OPTION_REFUSALS: list[tuple[str, Callable[[], Any], str]] = [
    ("delay=nan", lambda: add.using(delay=float("nan")), "delay must be a number, not nan"),
    ("delay=inf", lambda: add.using(delay=float("inf")), "delay cannot be more than 100 years"),
    ("delay=1e13", lambda: add.using(delay=1e13), "delay cannot be more than 100 years"),
    ("delay=-inf", lambda: add.using(delay=float("-inf")), "delay cannot be negative"),
    ("delay=a huge timedelta", lambda: add.using(delay=timedelta(days=999_999_999)),
     "delay cannot be more than 100 years"),
    ("delay='5'", lambda: add.using(delay="5"),
     "delay must be a number of seconds or a timedelta, not '5'"),
    ("priority=1.7", lambda: add.using(priority=1.7), "priority must be an int, not 1.7"),
    ("priority='5'", lambda: add.using(priority="5"), "priority must be an int, not '5'"),
    ("priority=True", lambda: add.using(priority=True), "priority must be an int, not True"),
    ("priority=2**31", lambda: add.using(priority=INT_MAX + 1),
     f"priority must be at most {INT_MAX}"),
    ("priority=-2**31-1", lambda: add.using(priority=INT_MIN - 1),
     f"priority must be at least {INT_MIN}"),
    ("max_attempts=2.5", lambda: add.using(max_attempts=2.5), "max_attempts must be an int"),
    ("max_attempts=0", lambda: add.using(max_attempts=0), "max_attempts must be at least 1"),
    ("max_attempts=2**31", lambda: add.using(max_attempts=INT_MAX + 1),
     f"max_attempts must be at most {INT_MAX}"),
    ("run_at naive", lambda: add.using(run_at=datetime(2030, 1, 1)),
     "run_at must be timezone-aware"),
    ("run_at a date", lambda: add.using(run_at=date(2030, 1, 1)),
     "run_at must be a datetime"),
    ("run_at past year 9999 in UTC",
     lambda: add.using(run_at=datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))),
     "run_at must be a moment both engines can keep"),
    ("queue ''", lambda: add.using(queue=""), "queue must be 1 to 100 characters"),
    ("queue of 101", lambda: add.using(queue="q" * 101), "queue must be 1 to 100 characters"),
    ("queue with NUL", lambda: add.using(queue="a\x00b"),
     "queue cannot contain a NUL character"),
    ("queue with a lone surrogate", lambda: add.using(queue="q\udfff"),
     "queue cannot contain a lone surrogate"),
    # A queue runjobworker --queue refuses to serve takes no job either: it would wait for ever.
    ("queue with a tab", lambda: add.using(queue="a\tb"),
     "queue cannot contain a character that is not printable"),
    ("queue with a line break", lambda: add.using(queue="emails\n"),
     "queue cannot contain a character that is not printable"),
    ("queue with ESC", lambda: add.using(queue="\x1b[31mred"),
     "queue cannot contain a character that is not printable"),
    ("queue with DEL", lambda: add.using(queue="a\x7f"),
     "queue cannot contain a character that is not printable"),
    ("queue with a zero-width space", lambda: add.using(queue="emails\u200b"),
     "queue cannot contain a character that is not printable"),
    # Past a float's range, or the 4,300 digits Python prints: the refusal still names the
    # option (it was a bare OverflowError, or ValueError, naming none).
    ("delay=10**400", lambda: add.using(delay=10**400),
     "delay cannot be more than 100 years (3,155,760,000 seconds), not an int of 1329 bits"),
    ("delay=-2**1024", lambda: add.using(delay=-(2**1024)), "delay cannot be negative"),
    ("timeout=10**400", lambda: add.using(timeout=10**400),
     "timeout cannot be more than 100 years"),
    ("timeout=2**1024", lambda: add.using(timeout=2**1024),
     "timeout cannot be more than 100 years"),
    ("expires_in=10**400", lambda: add.using(expires_in=10**400),
     "expires_in cannot be more than 100 years"),
    ("priority=10**5000", lambda: add.using(priority=10**5000),
     "priority must be at most 2147483647, not an int of 16610 bits"),
    ("max_attempts=-10**5000", lambda: add.using(max_attempts=-(10**5000)),
     "max_attempts must be at least 1, not a negative int of 16610 bits"),
    # Past what the database's clock can add, like delay.
    ("timeout past 100 years", lambda: add.using(timeout=MAX_DELAY + 1),
     "timeout cannot be more than 100 years"),
    ("expires_in a timedelta past 100 years",
     lambda: add.using(expires_in=timedelta(days=36_526)),
     "expires_in cannot be more than 100 years"),
]


def _refused_in_a_transaction(alias: str, attempt: Callable[[], Any],
                              error: type[Exception]) -> Exception:
    """Run ``attempt`` inside the caller's atomic() between two good enqueues; return what it
    raised. The transaction must still take writes and reads after it, and commit them."""
    with transaction.atomic(using=alias):
        before = add.enqueue(1, 2)
        with pytest.raises(error) as caught:
            attempt()
        after = add.enqueue(3, 4)
        assert Job.objects.using(alias).filter(id__in=[before.id, after.id]).count() == 2
    assert sorted(Job.objects.using(alias).values_list("id", flat=True)) == [before.id,
                                                                              after.id]
    return caught.value


@pytest.mark.parametrize(("case", "attempt", "message"), ARGUMENT_REFUSALS,
                         ids=[c[0] for c in ARGUMENT_REFUSALS])
def test_an_argument_the_queue_cannot_keep_is_refused_by_name_and_the_transaction_lives_on(
        alias: str, case: str, attempt: Callable[[], Any], message: str) -> None:
    # rule 16 (bad-input-refused)
    error = _refused_in_a_transaction(alias, attempt, JobArgumentError)
    assert isinstance(error, TypeError)
    assert str(error).startswith(message), str(error)


@pytest.mark.parametrize(("case", "attempt", "message"), OPTION_REFUSALS,
                         ids=[c[0] for c in OPTION_REFUSALS])
def test_an_option_the_queue_cannot_keep_is_refused_by_name_and_the_transaction_lives_on(
        alias: str, case: str, attempt: Callable[[], Any], message: str) -> None:
    # rule 16 (bad-input-refused)
    error = _refused_in_a_transaction(alias, lambda: attempt().enqueue(1, 2), JobOptionError)
    assert isinstance(error, (JobConfigurationError, ValueError))
    assert str(error).startswith("job 'add': ") and message in str(error), str(error)


def test_values_at_each_limit_are_kept_exactly_on_both_engines(cstore: JobStore) -> None:
    # rule 16 (bad-input-refused): the limits refuse only what a column or a reader could not give
    # back.
    args = [nested_list(MAX_DEPTH), 10**4300 - 1, -(10**4300 - 1), INT_MAX]
    enqueue(cstore, new_job(args=args, kwargs={"k": nested_list(MAX_DEPTH - 1)},
                            priority=INT_MAX, max_attempts=INT_MAX))
    enqueue(cstore, new_job(priority=INT_MIN))
    first, second = claim(cstore)
    assert depth_of(first.args[0]) == MAX_DEPTH and depth_of(first.kwargs["k"]) == MAX_DEPTH - 1
    assert first.args[1:] == args[1:]
    assert (first.priority, first.max_attempts, second.priority) == (INT_MAX, INT_MAX, INT_MIN)
    add.using(priority=INT_MAX, max_attempts=INT_MAX, delay=timedelta(days=36_500),
              run_at=datetime(9999, 12, 30, tzinfo=UTC)).enqueue(1, 2)  # accepted
    add.using(delay=MAX_DELAY, timeout=MAX_DELAY, expires_in=timedelta(days=36_525)
              ).enqueue(1, 2)  # accepted: the database's clock adds a hundred years


def test_enqueued_by_is_cut_to_its_column_and_escaped_alike_on_both_engines(alias: str) -> None:
    # rule 16 (bad-input-refused): who enqueued is a label; no label may fail the enqueue it names.
    with acting_as("x" * 300):
        long = add.enqueue(1, 2)
    with acting_as("a\x00b\udfff"):
        odd = add.enqueue(1, 2)
    stored = dict(Job.objects.using(alias).values_list("id", "enqueued_by"))
    assert stored[long.id] == "x" * 200 == long.enqueued_by
    assert stored[odd.id] == "a\\x00b\\udfff" == odd.enqueued_by


class _Propagator:
    """A site's own propagator writing whatever it likes into the carrier."""

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers

    def inject(self, carrier: dict[str, str]) -> None:
        carrier.update(self.headers)


@pytest.mark.parametrize(("headers", "kept"), [
    ({"traceparent": "garbage"}, ("", "")),
    ({"traceparent": "00-" + "0" * 31 + "-b7ad6b7169203331-01", "tracestate": "a=b"}, ("", "")),
    ({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\x00"}, ("", "")),
    ({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
      "tracestate": "k=v\x00"}, ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "")),
    ({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
      "tracestate": "k=v"}, ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v")),
])
def test_a_malformed_traceparent_is_dropped_not_stored(
        alias: str, monkeypatch: pytest.MonkeyPatch, headers: dict[str, str],
        kept: tuple[str, str]) -> None:
    # rule 16 (bad-input-refused), and rule 14 (trace-never-fails): the worker would ignore it
    # anyway
    monkeypatch.setattr(tracing_module, "propagate", _Propagator(headers))
    job = add.enqueue(1, 2)
    stored = Job.objects.using(alias).values_list("traceparent", "tracestate").get(id=job.id)
    assert stored == kept == (job.traceparent, job.tracestate)


def test_no_statement_is_sent_for_a_refused_enqueue(alias: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # rule 16 (bad-input-refused): "before any SQL", not "after a statement that failed".
    sent: list[str] = []
    monkeypatch.setattr(JobStore, "cursor", lambda self: sent.append("cursor"))
    for _, attempt, _ in ARGUMENT_REFUSALS:
        with pytest.raises(JobArgumentError):
            attempt()
    for _, attempt, _ in OPTION_REFUSALS:
        with pytest.raises(JobOptionError):
            attempt().enqueue(1, 2)
    assert sent == []
