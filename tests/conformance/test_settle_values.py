"""Generated: whatever text a settle carries (an error, a result, step names, an event's
name and match, a slot key) is stored as it was given, on both engines. PostgreSQL's settle sends
its batch as one array literal per column (``store/settle_arrays.py``): quotes, backslashes,
braces, commas, spaces and the word NULL must come back as themselves."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from django_ultjobs.core.jsonargs import storable_text
from django_ultjobs.models import JobAttempt
from django_ultjobs.store import JobStore
from django_ultjobs.store.settle_arrays import numbers
from tests.doubles import FakeClock

from .helpers import claim, enqueue, new_job, row, settlement

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

# Text every engine stores (no NUL, no lone surrogate), weighted towards what an array literal
# treats specially.
_text = st.text(st.sampled_from('"\\{},; \t\nNULLnull\'é€😀') | st.characters(
    exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)
_json = st.recursive(st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text,
                     lambda children: st.lists(children, max_size=3)
                     | st.dictionaries(_text, children, max_size=3), max_leaves=8)
_queues = (f"sv{i}" for i in itertools.count())
_HOSTILE = 'NULL", "{a,b}" \\" \\\\ } { , NULL'


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(error=_text, result=_json, steps=st.lists(_text, max_size=3), event=_text,
       match=st.dictionaries(_text, _json, max_size=3), slot_key=_text)
@example(error=_HOSTILE, result=[_HOSTILE, {_HOSTILE: None}], steps=[_HOSTILE, "", "NULL"],
         event=_HOSTILE, match={_HOSTILE: _HOSTILE}, slot_key=_HOSTILE)
@example(error="", result="", steps=[""], event="", match={"": ""}, slot_key="")
def test_a_settle_stores_its_text_as_given(cstore: JobStore, alias: str, clock: FakeClock,
                                           error: str, result: Any, steps: list[str],
                                           event: str, match: dict[str, Any],
                                           slot_key: str) -> None:
    queue = next(_queues)
    enqueue(cstore, *(new_job(queue=queue) for _ in range(4)))
    done, failed, waiting, handed = claim(cstore, queues=[queue], limit=4)
    result_json = json.dumps(result)
    assert cstore.settle([
        settlement(done, result_json=result_json, steps_run=tuple(steps),
                   steps_replayed=tuple(reversed(steps)), slot_key=slot_key, slot=7),
        settlement(failed, "failed", outcome="failed", error=error),
        settlement(waiting, "waiting", outcome=None, wait_event=event, wait_match=match,
                   wait_after=3, delay=60.0),
        settlement(handed, "queued", outcome=None, attempt_delta=-1),
    ], "w1") == {done.id, failed.id, waiting.id, handed.id}

    assert row(alias, done.id).result == result
    (ran,) = JobAttempt.objects.using(alias).filter(job_id=done.id)
    assert (ran.steps_run, ran.steps_replayed, ran.slot_key, ran.slot) == (
        steps, list(reversed(steps)), slot_key, 7)
    (fell,) = JobAttempt.objects.using(alias).filter(job_id=failed.id)
    assert fell.error == row(alias, failed.id).last_error == storable_text(error)
    parked = row(alias, waiting.id)
    assert (parked.status, parked.wait_event, parked.wait_match, parked.wait_after) == (
        "waiting", event, match, 3)
    assert parked.visible_at == clock.now + timedelta(seconds=60)
    back = row(alias, handed.id)
    assert (back.status, back.attempt) == ("queued", handed.attempt - 1)


def test_numbers_read_back_as_the_same_values(pg_alias: str) -> None:
    floats = [0.0, -0.0, 1e-05, 5e-324, 3153600000.0, 0.1 + 0.2, 1.7976931348623157e308, None]
    ints = [0, -1, 2**63 - 1, -(2**63), None]
    with connections[pg_alias].cursor() as cur:
        cur.execute("SELECT %s::float8[], %s::bigint[]", [numbers(floats), numbers(ints)])
        assert cur.fetchone() == (floats, ints)
