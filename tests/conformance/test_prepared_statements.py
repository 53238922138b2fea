"""Prepared statements on PostgreSQL: the queue works on them, and never prepares two queries.

Django opens psycopg connections with ``prepare_threshold`` off; a site that sets
``OPTIONS["prepare_threshold"]`` gets its statements prepared after that many runs on a
connection, ours included. The claim and event_find must stay out: a prepared statement may switch
to its generic plan after five runs, and theirs ignore the values that make them fast (the claim's
seq-scans and sorts every live row, 13 ms against 3 at 20,000 queued; docs/deployment.md).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import DatabaseError, connections

from django_ultjobs.store import JobStore, get_store
from tests.conftest import FakeClock

from .helpers import claim, enqueue, new_job, row, settlement

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])

# More runs than any statement needs to be prepared and to run on its prepared plan again.
RUNS = 8


@pytest.fixture
def prepared_store(pg_alias: str, clock: FakeClock) -> Iterator[JobStore]:
    """The PostgreSQL store on a connection that prepares every statement at its first run
    (``prepare_threshold=0``; the store takes whatever the site's connection does)."""
    conn = connections[pg_alias]
    conn.ensure_connection()
    raw = conn.connection
    before = raw.prepare_threshold
    raw.prepare_threshold = 0
    # Generic plans from the first run: what PostgreSQL may switch a prepared statement to after
    # five, so every fence below is proved on the plan a long-running worker may end up with.
    raw.execute("SET plan_cache_mode = force_generic_plan")
    try:
        yield get_store(pg_alias, clock=clock)
    finally:
        if not raw.closed:  # a test may have had the store replace it
            raw.prepare_threshold = before
            raw.execute("DEALLOCATE ALL")
            raw.execute("RESET plan_cache_mode")


def _prepared(pg_alias: str) -> set[str]:
    """The ``django_ultjobs:<name>`` tags of the statements prepared on this connection."""
    with connections[pg_alias].connection.cursor() as cur:
        cur.execute("SELECT statement FROM pg_prepared_statements")
        statements = [r[0] for r in cur.fetchall()]
    return {s.split("*/", 1)[0].removeprefix("/* django_ultjobs:").strip()
            for s in statements if s.startswith("/* django_ultjobs:")}


def test_the_queue_runs_on_generic_plans_and_never_prepares_claim_or_event_find(
        prepared_store: JobStore, pg_alias: str, clock: FakeClock) -> None:
    store = prepared_store
    for i in range(RUNS):
        (job_id,) = enqueue(store, new_job(args=[i, 1]))
        (claimed,) = claim(store, caps={"capped": 2})
        assert claimed.id == job_id
        slot = store.acquire("job:capped", 2, 30, f"w1:{job_id}")
        assert slot is not None
        assert store.renew(slot, 30)
        assert store.heartbeat([(claimed.id, claimed.token)], 30) == {job_id: False}
        # A stale heartbeat is an explicit "no" on a generic plan too: rules 1-2.
        assert store.heartbeat([(claimed.id, "00000000-0000-0000-0000-000000000000")], 30) == {}
        event_id = store.send_event(f"paid-{i}", {"order": i})
        assert store.find_event(job_id=job_id, name=f"paid-{i}", match={"order": i},
                                after=0) == (event_id, {"order": i})
        assert store.settle([settlement(claimed)], "w1", release=[slot]) == {job_id}
        assert row(pg_alias, job_id).status == "succeeded"
        # A stale settle is still refused on a prepared, generic plan: rule 4.
        assert store.settle([settlement(claimed)], "w1") == set()
        clock.advance(1)
    prepared = _prepared(pg_alias)
    assert {"enqueue_one", "heartbeat", "settle", "lease_acquire", "lease_renew",
            "event_insert", "event_wake"} <= prepared
    # Their generic plans ignore the values that make them fast (docs/deployment.md).
    assert not {"claim", "event_find"} & prepared


def test_a_connection_whose_prepared_statements_the_server_forgot_is_replaced(
        prepared_store: JobStore, pg_alias: str) -> None:
    """The server can forget what psycopg prepared (DEALLOCATE or DISCARD ALL behind its back, a
    pooler that moved the session); psycopg does not notice, and every later run of the statement
    on that connection fails. The store closes such a connection, so one failure is all it costs:
    the worker's next heartbeat (or settle, or claim) runs on a new connection."""
    store = prepared_store
    (job_id,) = enqueue(store, new_job())
    (claimed,) = claim(store)
    runs = [(claimed.id, claimed.token)]
    assert store.heartbeat(runs, 30) == {job_id: False}  # prepared now
    spoiled = connections[pg_alias].connection
    spoiled.pgconn.exec_(b"DEALLOCATE ALL")  # behind psycopg's back
    with pytest.raises(DatabaseError, match="does not exist"):
        store.heartbeat(runs, 30)
    assert store.heartbeat(runs, 30) == {job_id: False}
    assert connections[pg_alias].connection is not spoiled
    assert store.settle([settlement(claimed)], "w1") == {job_id}
