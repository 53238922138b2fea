"""Rule 15 (undecodable-row-fails-alone) at the store: a claim hands back a row it cannot decode
instead of raising."""

from __future__ import annotations

import pytest
from django.db import connections

from django_ultjobs.store import JobStore
from tests.hostile import nested, write_raw_args

from .helpers import claim, enqueue, new_job, row

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


def test_a_claim_returns_an_undecodable_row_with_why_and_decodes_the_others(
        cstore: JobStore, alias: str) -> None:
    # rule 15 (undecodable-row-fails-alone): the claim's UPDATE has committed when the arguments are
    # read, so raising here would leave every row of the batch running under a lease nobody renews.
    ids = enqueue(cstore, new_job(args=[1]), new_job(args=[2]), new_job(args=[3], kwargs={"k": 3}))
    depth = 3000 if connections[alias].vendor == "postgresql" else 1500  # SQLite's own cap: 2000
    write_raw_args(alias, ids[1], nested(depth))
    got = {job.id: job for job in claim(cstore)}
    assert set(got) == set(ids)
    assert (got[ids[0]].args, got[ids[0]].kwargs, got[ids[0]].undecodable) == ([1], {}, None)
    assert (got[ids[2]].args, got[ids[2]].kwargs, got[ids[2]].undecodable) == ([3], {"k": 3},
                                                                                 None)
    bad = got[ids[1]]
    assert (bad.args, bad.kwargs) == ([], {})
    assert bad.undecodable == ("the stored args nest deeper than this Python's JSON reader "
                               "allows (RecursionError)")
    assert all(row(alias, i).status == "running" for i in (ids[0], ids[2]))


def test_sqlite_text_that_is_not_utf8_fails_its_row_not_the_claim(cstore: JobStore,
                                                                  alias: str) -> None:
    # rule 15 (undecodable-row-fails-alone): SQLite keeps any bytes; read as text, the driver failed
    # the whole claim (rolled back, so every claim after it failed the same way: the queue stopped).
    if connections[alias].vendor != "sqlite":
        pytest.skip("PostgreSQL refuses text that is not valid in the database's encoding")
    ids = enqueue(cstore, new_job(args=[1]), new_job(args=[2]))
    write_raw_args(alias, ids[0], hex_bytes="5b22ff225d")
    got = {job.id: job for job in claim(cstore)}
    assert set(got) == set(ids)
    assert got[ids[0]].undecodable is not None
    assert got[ids[0]].undecodable.startswith("the stored args are not UTF-8 text")
    assert (got[ids[1]].args, got[ids[1]].undecodable) == ([2], None)
