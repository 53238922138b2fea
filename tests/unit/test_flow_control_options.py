"""Per-key caps and rate limits as declared (rule 54 (bad-flow-option-refused)): a key or rate limit
that can never work is refused when the job is declared, naming the option; a call whose key cannot
be stored is refused at enqueue, before any SQL. And the rate limiter's arithmetic
(rule 52 (fleet-rate-limit))."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_ultjobs import JobArgumentError, JobConfigurationError, job
from django_ultjobs.core.rate_limits import gcra_take, parse_rate_limit
from django_ultjobs.core.slot_keys import keyed_slot_key, split_slot_key
from django_ultjobs.jobs.registry import JobSpec
from django_ultjobs.testing import unregister


@pytest.fixture
def declare() -> Iterator[Callable[..., JobSpec]]:
    made: list[str] = []

    def make(func: Callable[..., Any], **options: Any) -> JobSpec:
        spec = job(name=f"flow_{len(made)}_{func.__name__}", **options)(func)
        made.append(spec.name)
        return spec

    yield make
    for name in made:
        unregister(name)


def export(customer_id: int, *, fmt: str = "csv") -> None: ...


@pytest.mark.parametrize(("options", "message"), [
    ({"concurrency_key": "customer_id"}, "concurrency_key= needs concurrency="),
    ({"concurrency": 1, "concurrency_key": "customer"}, "'customer' is not a parameter"),
    ({"concurrency": 1, "concurrency_key": ""}, "must be the name of one of the job's"),
    ({"concurrency": 1, "concurrency_key": 3}, "must be the name of one of the job's"),
    ({"rate_limit": "100/d"}, 'rate_limit must be a text like "100/m"'),
    ({"rate_limit": "0/s"}, "rate_limit must be"),
    ({"rate_limit": "1.5/s"}, "rate_limit must be"),
    ({"rate_limit": 100}, "rate_limit must be"),
    ({"rate_limit": "99999999999/s"}, "rate_limit must be"),
    ({"rate_limit_key": "customer_id"}, "rate_limit_key= needs rate_limit="),
    ({"rate_limit": "5/m", "rate_limit_key": "nope"}, "'nope' is not a parameter"),
])
def test_a_key_or_rate_that_cannot_work_is_refused_when_declared(
        declare: Callable[..., JobSpec], options: dict[str, Any], message: str) -> None:  # 54
    with pytest.raises(JobConfigurationError, match=message) as refused:
        declare(export, **options)
    assert "flow_0_export" in str(refused.value)


def test_keys_name_a_positional_or_keyword_parameter_or_are_callables(
        declare: Callable[..., JobSpec]) -> None:  # rule 50 (per-key-cap)
    by_position = declare(export, concurrency=1, concurrency_key="customer_id")
    by_keyword = declare(export, concurrency=1, concurrency_key="fmt")
    by_function = declare(export, concurrency=1,
                          concurrency_key=lambda customer_id, **kw: f"c{customer_id % 2}")
    assert split_slot_key(by_position.slot_key_of((7,), {})) == (by_position.name, "7")
    assert split_slot_key(by_position.slot_key_of((), {"customer_id": 7})) == (
        by_position.name, "7")
    assert split_slot_key(by_keyword.slot_key_of((7,), {})) == (by_keyword.name, "csv")
    assert split_slot_key(by_function.slot_key_of((7,), {})) == (by_function.name, "c1")
    # Without concurrency_key the cap stays per job.
    assert declare(export, concurrency=2).slot_key_of((7,), {}) == ""


def test_a_key_the_queue_cannot_keep_is_refused_at_enqueue_before_any_sql(
        declare: Callable[..., JobSpec]) -> None:  # rule 54 (bad-flow-option-refused)
    spec = declare(export, concurrency=1, concurrency_key="fmt", rate_limit="5/s",
                   rate_limit_key=lambda *a, **kw: kw.get("fmt"))
    with pytest.raises(JobArgumentError, match="concurrency_key 'fmt' is list"):
        spec.slot_key_of((1,), {"fmt": ["x"]})
    with pytest.raises(JobArgumentError, match="too long"):
        spec.slot_key_of((1,), {"fmt": "x" * 300})
    with pytest.raises(JobArgumentError, match="NUL"):
        spec.slot_key_of((1,), {"fmt": "a\x00b"})
    # The rate key is checked by call(), which every enqueue goes through.
    with pytest.raises(JobArgumentError, match=r"rate_limit_key .* returned NoneType"):
        spec.call(1)


def test_slot_keys_of_two_jobs_never_collide() -> None:
    assert keyed_slot_key("a:b", "c") != keyed_slot_key("a", "b:c")
    assert split_slot_key(keyed_slot_key("a:b", "c:d")) == ("a:b", "c:d")
    assert split_slot_key("job:x") == ("x", None)


def test_the_burst_is_one_start_per_ten_of_the_limit() -> None:  # rule 52 (fleet-rate-limit)
    assert [(r.burst, r.window_allowance) for r in
            (parse_rate_limit("j", t) for t in ("1/h", "9/m", "10/m", "50/s", "100/m"))
            ] == [(1, 0), (1, 0), (2, 1), (6, 5), (11, 10)]


@pytest.mark.parametrize("text", ["7/s", "50/s", "100/m"])
def test_gcra_never_lets_a_window_hold_more_than_the_limit_and_its_allowance(
        text: str) -> None:  # rule 52 (fleet-rate-limit)
    rate = parse_rate_limit("j", text)
    assert rate is not None
    rng = random.Random(text)
    tat: int | None = None
    now = 1_800_000_000_000_000  # microseconds since 1970, as the database's clock gives them
    grants: list[int] = []
    period = int(rate.period * 1_000_000)
    end = now + 20 * period
    while now < end:
        granted, tat, _ = gcra_take(tat, now, rate.interval, rate.tolerance, rng.randint(1, 8))
        grants += [now] * granted
        # Takes a quarter of an interval apart on average: each comes that late after its
        # start conformed, which the tolerance (when there is one) makes up for.
        now += int(rng.expovariate(4 / rate.interval)) + 1
    worst = max(sum(1 for g in grants if s <= g < s + period) for s in grants)
    assert worst <= rate.count + rate.window_allowance
    if rate.burst > 1:
        assert len(grants) / 20 == pytest.approx(rate.count, rel=0.05)
    else:
        # No tolerance below 10 a period: the lateness of each take is lost
        # (rule 52 (fleet-rate-limit)).
        assert 0.7 * rate.count < len(grants) / 20 <= rate.count
