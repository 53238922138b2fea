"""Rule 16 (bad-input-refused), generated: whatever enqueue accepts comes back from a claim as the
same value, with the same types, on both engines; whatever it refuses is refused before any row is
written."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_ultjobs import JobArgumentError
from django_ultjobs.core.jsonargs import check_arguments
from django_ultjobs.store import JobStore

from .helpers import claim, enqueue, new_job

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

_text = st.text(st.characters(exclude_categories=()), max_size=8)  # NUL, lone surrogates too
_json = st.recursive(
    st.none() | st.booleans()
    | st.integers() | st.integers(min_value=-(10**4400), max_value=10**4400)
    | st.floats() | _text,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(_text, children, max_size=4),
    max_leaves=24,
)
_queues = (f"rt{i}" for i in itertools.count())


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same type all the way down (1 is not 1.0, True is not 1).

    Floats compare with ``==``: PostgreSQL's numbers have no negative zero, so -0.0 comes back
    as 0.0 there (docs/enqueue.md says so)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(args=st.lists(_json, max_size=3), kwargs=st.dictionaries(_text, _json, max_size=3))
def test_what_enqueue_accepts_comes_back_unchanged(cstore: JobStore, args: list[Any],
                                                   kwargs: dict[str, Any]) -> None:
    # rule 16 (bad-input-refused)
    try:
        check_arguments("rt", tuple(args), kwargs)
    except JobArgumentError:
        return  # refused before any SQL (test_enqueue_refusals proves the kinds, by name)
    queue = next(_queues)
    enqueue(cstore, new_job(queue=queue, args=args, kwargs=kwargs))
    (got,) = claim(cstore, queues=[queue])
    assert got.undecodable is None
    assert same(got.args, args) and same(got.kwargs, kwargs), (got.args, got.kwargs)
