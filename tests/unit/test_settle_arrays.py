"""The settle's arrays (``store/settle_arrays.py``): one per column the settle unnests, a column
no run uses sent as NULL, and a value that is no text refused as the run's own."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from django_ultjobs.sql import queries
from django_ultjobs.store import Settlement
from django_ultjobs.store.settle_arrays import numbers, settle_arrays, texts


def test_an_array_of_only_nulls_is_sent_as_null() -> None:
    # unnest pads a NULL array with NULLs: a column no run uses costs the server no parsing.
    assert texts([None, None]) is None and numbers([None]) is None
    assert texts([None, "NULL", ""]) == '{NULL,"NULL",""}'
    assert texts(['a"b\\c']) == '{"a\\"b\\\\c"}'
    assert numbers([1, None, 0.5]) == "{1,NULL,0.5}"


def test_every_array_is_a_parameter_of_the_settle() -> None:
    run = Settlement(job_id=1, token="00000000-0000-0000-0000-000000000001", status="succeeded",
                     attempt_no=1, started_at=datetime.now(UTC), outcome="succeeded")
    placeholders = set(re.findall(r"%\((\w+)\)s", queries("postgresql")["settle"]))
    assert set(settle_arrays([run], datetime.isoformat)) == placeholders - {"worker_id", "now",
                                                                             "dependents"}


def test_a_value_that_is_no_text_is_a_type_error() -> None:
    # A TypeError is a refusal of that run's values (rule 30 (refused-outcome-no-wedge)), which the
    # completer isolates.
    with pytest.raises(TypeError):
        texts([1])  # type: ignore[list-item]
