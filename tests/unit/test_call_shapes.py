"""A call's signature is checked once per shape: nothing it refused is let through
(rule 101 (bulk-shortcuts-same-outcome))."""

from __future__ import annotations

from typing import Any

import pytest

from django_ultjobs import JobArgumentError
from django_ultjobs.jobs.registry import JobSpec
from django_ultjobs.jobs.spec import MAX_BOUND_SHAPES


def _body(a: int, b: int = 2, *, c: int = 3) -> None:
    return None


def _refusal(spec: JobSpec, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(JobArgumentError) as caught:
        spec.call(*args, **kwargs)
    return str(caught.value)


def test_a_shape_that_bound_lets_every_call_of_it_through_and_no_other() -> None:
    # rules 16 (bad-input-refused) and 101 (bulk-shortcuts-same-outcome)
    fresh = JobSpec(func=_body, name="shapes_fresh")
    spec = JobSpec(func=_body, name="shapes_fresh")
    spec.call(1)
    spec.call(1, 2)
    spec.call(1, c=4)
    # Every call refused by a spec that never bound anything is refused, with the same message,
    # by the spec that has bound these shapes.
    for args, kwargs in [((), {}), ((1, 2, 3), {}), ((1,), {"d": 1}), ((1,), {"a": 1}),
                         ((), {"c": 1}), ((1, 2), {"b": 1})]:
        assert _refusal(spec, *args, **kwargs) == _refusal(fresh, *args, **kwargs)
        assert _refusal(spec, *args, **kwargs) == _refusal(fresh, *args, **kwargs)


def test_a_refused_shape_is_never_remembered() -> None:
    # rule 101 (bulk-shortcuts-same-outcome)
    spec = JobSpec(func=_body, name="shapes_refused")
    for _ in range(3):
        _refusal(spec)
    assert _refusal(spec) == _refusal(JobSpec(func=_body, name="shapes_refused"))
    spec.call(a=1)
    spec.call(1)


def test_keyword_bodies_with_ever_new_names_are_still_checked() -> None:
    # rule 101 (bulk-shortcuts-same-outcome): past MAX_BOUND_SHAPES shapes a call is bound each
    # time, as before.
    def body(a: int, **extra: Any) -> None:
        return None

    spec = JobSpec(func=body, name="shapes_many")
    for i in range(MAX_BOUND_SHAPES * 2):
        spec.call(1, **{f"k{i}": i})
    assert "missing a required argument" in _refusal(spec, **{f"k{MAX_BOUND_SHAPES * 3}": 1})


def test_a_job_taking_its_context_is_checked_by_shape_too() -> None:
    # rule 101 (bulk-shortcuts-same-outcome)
    def body(ctx: Any, a: int) -> None:
        return None

    spec = JobSpec(func=body, name="shapes_ctx", takes_context=True)
    spec.call(1)
    spec.call(2)
    assert _refusal(spec) == _refusal(JobSpec(func=body, name="shapes_ctx", takes_context=True))
    assert "too many" in _refusal(spec, 1, 2)


class _CountingSignature:
    def __init__(self, signature: Any) -> None:
        self.signature, self.binds = signature, 0

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        self.binds += 1
        return self.signature.bind(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.signature, name)


def test_a_shape_is_bound_once_per_spec() -> None:
    # rule 101 (bulk-shortcuts-same-outcome): what bulk enqueue of many calls of one shape saves.
    spec = JobSpec(func=_body, name="shapes_once")
    counting = _CountingSignature(spec.signature)
    spec.__dict__["signature"] = counting
    for i in range(100):
        spec.call(i)
        spec.call(i, c=i)
    assert counting.binds == 2
    for _ in range(3):
        _refusal(spec)
    assert counting.binds == 5
