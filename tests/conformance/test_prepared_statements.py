"""Prepared statements on PostgreSQL: the queue works on them, and never prepares two queries.

Django opens psycopg connections with ``prepare_threshold`` off; a site that sets
``OPTIONS["prepare_threshold"]`` gets its statements prepared after that many runs on a
connection, ours included. claim_capped and event_find must stay out: a prepared statement
may switch to its generic plan after five runs, and theirs ignore the values that make them fast
(docs/deployment.md). The claim without caps and the capped kinds' own claim are prepared: their
generic plans are their custom ones, which tests below hold.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, connections, transaction
from django.db.utils import ConnectionHandler
from psycopg import sql

from django_ultjobs.models import Job, JobAttempt
from django_ultjobs.store import JobStore, get_store
from django_ultjobs.store.postgresql import PostgresStore, claim_text
from django_ultjobs.worker.settlements import UNKNOWN_JOB_PREFIX
from tests.doubles import FakeClock

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


def test_the_queue_runs_on_generic_plans_and_never_prepares_claim_capped_or_event_find(
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
        # A stale heartbeat is an explicit "no" on a generic plan too: rules 1 (leased-claim) and
        # 2 (heartbeat-retried).
        assert store.heartbeat([(claimed.id, "00000000-0000-0000-0000-000000000000")], 30) == {}
        event_id = store.send_event(f"paid-{i}", {"order": i})
        assert store.find_event(job_id=job_id, name=f"paid-{i}", match={"order": i},
                                after=0) == (event_id, {"order": i})
        assert store.settle([settlement(claimed)], "w1") == {job_id}
        store.release(slot)
        assert row(pg_alias, job_id).status == "succeeded"
        # A stale settle is still refused on a prepared, generic plan: rule 4 (fenced-settle).
        assert store.settle([settlement(claimed)], "w1") == set()
        # The claim of a worker with no capped kind registered: a statement of its own.
        (uncapped_id,) = enqueue(store, new_job(args=[i, 2]))
        (claimed,) = claim(store)
        assert claimed.id == uncapped_id
        assert store.settle([settlement(claimed)], "w1") == {uncapped_id}
        # The capped kinds' scans alone (the other kinds' scan not due): a statement of its own.
        (capped_id,) = enqueue(store, new_job("capped", args=[i, 3]))
        (claimed,) = claim(store, caps={"capped": 2}, uncapped=False)
        assert claimed.id == capped_id
        assert store.settle([settlement(claimed)], "w1") == {capped_id}
        clock.advance(1)
    prepared = _prepared(pg_alias)
    assert {"enqueue_one", "heartbeat", "settle", "slot_acquire", "slot_renew",
            "event_insert", "event_wake", "claim", "claim_capped_kinds"} <= prepared
    # Their generic plans ignore the values that make them fast (docs/deployment.md); the claim
    # without caps and the capped kinds' own claim are prepared, their plans fixed by a fence
    # (their own tests below).
    assert not {"claim_capped", "event_find"} & prepared


def _explain_prepared(pg_alias: str, name: str, params: dict[str, Any],
                      text: str | None = None) -> dict[str, Any]:
    """Run query ``name``'s statement (or ``text``, the text sent for it) as the connection
    prepared it (its cached plan), under EXPLAIN (ANALYZE, BUFFERS), and return the plan."""
    raw = connections[pg_alias].connection
    text = text or PostgresStore(pg_alias).sql[name]
    order = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", text)))  # psycopg's $1, $2, ...
    prepared = raw.execute("SELECT name FROM pg_prepared_statements WHERE statement = %s",
                           [re.sub(r"%\((\w+)\)s", lambda m: f"${order.index(m[1]) + 1}",
                                   text)]).fetchone()
    assert prepared is not None, f"{name} is not prepared on this connection"
    explain = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {}({})").format(
        sql.Identifier(prepared[0]), sql.SQL(", ").join(sql.Literal(params[p]) for p in order))
    (plan,) = raw.execute(explain.as_string(raw), prepare=False).fetchone()
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def _lockable(pg_alias: str) -> int:
    """How many job rows another session could lock now (``FOR UPDATE SKIP LOCKED``): every row
    but those a transaction still open holds."""
    params = connections[pg_alias].settings_dict
    with psycopg.connect(dbname=params["NAME"], host=params["HOST"] or None,
                         port=params["PORT"] or None, user=params["USER"] or None,
                         password=params["PASSWORD"] or None) as other:
        (count,) = other.execute("SELECT count(*) FROM (SELECT id FROM django_ultjobs_job"
                                 " FOR UPDATE SKIP LOCKED) AS s").fetchone()
        other.rollback()
    return count


def _insert_queued(pg_alias: str, name: str, count: int) -> None:
    """``count`` jobs of ``name`` due a minute ago in three priorities, inserted in random order
    in one statement (faster than enqueuing them), and the table analyzed, as autovacuum would
    have it."""
    raw = connections[pg_alias].connection
    raw.execute(
        "INSERT INTO django_ultjobs_job (name, queue, priority, args, kwargs, status, attempt,"
        " max_attempts, visible_at, worker_id, cancel_requested, traceparent, tracestate,"
        " enqueued_by, last_error, wait_after, wait_event, created_at, updated_at,"
        " concurrency_key, unique_for, cancel_reason, tags)"
        " SELECT %s, 'default', (i %% 3), '[]', '{}', 'queued', 0, 1,"
        " now() - interval '1 minute' + (i %% 1000) * interval '1 ms', '', false, '', '',"
        " '', '', 0, '', now(), now(), '', 0, '', '[]'"
        " FROM generate_series(1, %s) AS i ORDER BY random()", [name, count])
    raw.execute("ANALYZE django_ultjobs_job")


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


#: Queued rows for the prepared claim's test: where the generic plan of an unfenced claim was
#: costed far above its custom one.
CLAIM_BACKLOG = 40_000


#: The two prepared claims: the query, the kind queued, the claim's caps and whether it scans the
#: other kinds, the index its scans must take, and its parameters beyond the plain claim's.
PREPARED_CLAIMS = {
    "claim": ("noop", {}, True, "ultjobs_job_claim", {}),
    "claim_capped_kinds": ("capped", {"capped": 64}, False, "ultjobs_job_claim_kind",
                           {"cap_names": ["capped"], "cap_limits": [64], "cap_kept": [0]}),
}


@pytest.mark.parametrize("query", sorted(PREPARED_CLAIMS))
def test_the_prepared_claim_runs_its_generic_plan_down_the_claim_index(
        pg_alias: str, query: str) -> None:
    """At 40,000 queued, PostgreSQL's own choice (plan_cache_mode auto)
    keeps the prepared claim's generic plan after its five custom ones (the claim before them was
    costed ten to a hundred times above its custom plan there and planned at every run), and that
    plan takes the first row down the claim index, reading a few pages, not the backlog. The
    same for the capped kinds' own claim, down the index by kind."""
    name, caps, uncapped, index, extra = PREPARED_CLAIMS[query]
    conn = connections[pg_alias]
    conn.ensure_connection()
    raw = conn.connection
    before = raw.prepare_threshold
    raw.prepare_threshold = 0
    store = get_store(pg_alias)  # the database's clock: the rows below are due on it
    try:
        _insert_queued(pg_alias, name, CLAIM_BACKLOG)
        for _ in range(RUNS):
            assert len(claim(store, limit=1, caps=caps, uncapped=uncapped)) == 1
        text = claim_text(store.sql[query], 1, kinds=len(caps))
        (generic,) = raw.execute("SELECT generic_plans FROM pg_prepared_statements"
                                 " WHERE statement LIKE %s", [f"/* django_ultjobs:{query} */%"]
                                 ).fetchone()
        assert generic >= RUNS - 5, f"PostgreSQL chose custom plans for the prepared {query}"
        raw.execute("SET plan_cache_mode = force_generic_plan")
        plan = _explain_prepared(pg_alias, query, {
            "queues": ["default"], "limit": 1, "token": "00000000-0000-0000-0000-000000000001",
            "worker_id": "w1", "timeout": 30.0, "now": None, **extra}, text)
        scans = [n for n in _nodes(plan) if n.get("Relation Name") == "django_ultjobs_job"
                 and n["Node Type"] != "ModifyTable"]
        assert {n.get("Index Name") for n in scans} == {index, "django_ultjobs_job_pkey"}, scans
        assert not [n for n in _nodes(plan) if n["Node Type"] in ("Sort", "Bitmap Heap Scan")
                    and n["Actual Loops"] and n["Actual Rows"] > 1], plan
        pages = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
        assert pages <= 100, pages  # 20-30 measured; the backlog is about 1,000 pages
    finally:
        raw.execute("RESET plan_cache_mode")
        raw.execute("DEALLOCATE ALL")
        raw.prepare_threshold = before


@pytest.mark.parametrize("limit", [127, 128, 129, 1024, 1025])
@pytest.mark.parametrize("query", sorted(PREPARED_CLAIMS))
def test_a_prepared_claim_takes_exactly_its_limit_about_each_fence(
        prepared_store: JobStore, pg_alias: str, clock: FakeClock, limit: int,
        query: str) -> None:
    """The claim's fence has a constant limit of its own (128, 1024, 8192...): a claim takes
    its limit's rows in priority order, no fewer and none past it, on either side of each
    fence, prepared and on its generic plan; rows past the limit stay queued and unlocked. The
    capped kinds' own claim alike, its cap above the limit."""
    store = prepared_store
    name, caps, uncapped, _, _ = PREPARED_CLAIMS[query]
    caps = {kind: limit + 10 for kind in caps}  # above the limit: the limit binds
    enqueue(store, *[new_job(name, args=[i], priority=i % 3) for i in range(limit + 2)])
    for _ in range(2):  # the second on the prepared statement's cached generic plan
        with transaction.atomic(using=pg_alias):
            batch = claim(store, limit=limit, caps=caps, uncapped=uncapped)
            assert len(batch) == limit
            # While the claim's transaction is open, nothing past the limit is locked.
            assert _lockable(pg_alias) == 2
        assert [j.priority for j in batch] == sorted((j.priority for j in batch), reverse=True)
        assert Job.objects.using(pg_alias).exclude(claim_token=next(iter(batch)).token).count() == 2
        assert len(claim(store, "w2", limit=limit, caps=caps, uncapped=uncapped)) == 2
        clock.advance(60)  # every lease lapses: all of them runnable again
    assert query in _prepared(pg_alias)


@pytest.mark.parametrize("cap", [1, 5, 127])
def test_a_prepared_claim_of_the_capped_kinds_takes_no_more_than_their_free_slots(
        prepared_store: JobStore, pg_alias: str, cap: int) -> None:
    """Rule 5 (fleet-cap) on the generic plan: the kind's own limit (its free slots) sits outside
    the fence, so a claim asking for more takes exactly the free slots, and leaves the rest
    unlocked."""
    store = prepared_store
    for _ in range(2):  # the second on the prepared statement's cached generic plan
        enqueue(store, *[new_job("capped", args=[i]) for i in range(cap + 3)])
        with transaction.atomic(using=pg_alias):
            batch = claim(store, limit=129, caps={"capped": cap}, uncapped=False)
            assert len(batch) == cap
            # While the claim's transaction is open, only the claimed rows are locked.
            assert _lockable(pg_alias) == Job.objects.using(pg_alias).count() - cap
        rest = claim(store, "w2", limit=129, caps={"capped": cap + 3}, uncapped=False)
        assert len(rest) == 3
        assert store.settle([settlement(job) for job in batch], "w1") == {j.id for j in batch}
        assert store.settle([settlement(job) for job in rest], "w2") == {j.id for j in rest}
    assert "claim_capped_kinds" in _prepared(pg_alias)


def test_a_prepared_settle_reads_no_attempt_row_when_no_run_extends(
        prepared_store: JobStore, pg_alias: str) -> None:
    """The generic plan a prepared settle keeps was made at its first runs,
    when the attempts table was small (a whole-table scan there is cheapest), and stays while the
    table grows by a row per settled run; the episode update must not run that scan for a batch
    that extends no episode."""
    store = prepared_store
    ids = enqueue(store, new_job(), new_job())
    first, second = claim(store, limit=2)
    assert store.settle([settlement(first)], "w1") == {first.id}  # prepared, attempts tiny
    JobAttempt.objects.using(pg_alias).bulk_create(
        JobAttempt(job_id=first.id, attempt=n, worker_id="w1", outcome="failed", error="")
        for n in range(2, 2002))
    plan = _explain_prepared(pg_alias, "settle", store.settle_params([settlement(second)], "w1"))
    read = [(n["Node Type"], n["Actual Loops"]) for n in _nodes(plan)
            if n["Node Type"] != "ModifyTable"
            and ("jobattempt" in n.get("Relation Name", "")
                 or n.get("Index Name", "").startswith(("django_ultjobs_jobattempt",
                                                        "ultjobs_attempt")))]
    assert read, "the settle has no plan for the episode update"
    assert all(loops == 0 for _, loops in read), read
    assert {r.status for r in Job.objects.using(pg_alias).filter(id__in=ids)} == {"succeeded"}


def test_a_prepared_plain_settle_keeps_its_generic_plan(pg_alias: str, clock: FakeClock) -> None:
    """Left to choose (plan_cache_mode auto), PostgreSQL planned the prepared settle afresh at
    nearly every run, its batch's arrays estimated at ten rows: a worker settling one or two
    runs at a time (the process pool's children) paid the planning of the whole statement for
    each. The settle now keeps its generic plan from its first prepared run."""
    conn = connections[pg_alias]
    conn.ensure_connection()
    raw = conn.connection
    before = raw.prepare_threshold
    raw.prepare_threshold = 0
    try:
        store = get_store(pg_alias, clock=clock)
        enqueue(store, *[new_job() for _ in range(RUNS)])
        for job in claim(store, limit=RUNS):
            assert store.settle([settlement(job)], "w1") == {job.id}
        with raw.cursor() as cur:
            cur.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                        "WHERE statement LIKE '/* django_ultjobs:settle */%%'")
            plans = cur.fetchall()
    finally:
        if not raw.closed:
            raw.prepare_threshold = before
            raw.execute("DEALLOCATE ALL")
    assert plans == [(RUNS, 0)]
    assert set(Job.objects.using(pg_alias).values_list("status", flat=True)) == {"succeeded"}


#: Rows in the settle's plan test: under about 15,000 the settle read the whole table per batch.
SMALL_TABLE = 3_000


@pytest.mark.parametrize("prepared", [True, False], ids=["generic-plan", "custom-plan"])
def test_the_settle_reads_its_rows_by_primary_key_on_a_small_table(
        pg_alias: str, prepared: bool) -> None:
    """Item 107: the batch (estimated at 100 rows whatever it holds) joined to a table of a few
    thousand rows was planned as a hash join over a sequential scan of every row, prepared or
    not: each settle read the whole table. Its rows are now read by primary key."""
    conn = connections[pg_alias]
    conn.ensure_connection()
    raw = conn.connection
    before = raw.prepare_threshold
    store = get_store(pg_alias)  # the database's clock: the rows below are due on it
    try:
        _insert_queued(pg_alias, "noop", SMALL_TABLE)
        if prepared:
            raw.prepare_threshold = 0
            raw.execute("SET plan_cache_mode = force_generic_plan")
            first = claim(store, limit=64)
            assert len(store.settle([settlement(j) for j in first], "w1")) == 64
        batch = claim(store, limit=64)
        params = store.settle_params([settlement(j) for j in batch], "w1")
        if prepared:
            plan = _explain_prepared(pg_alias, "settle", params)
        else:
            (found,) = raw.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + store.sql["settle"],
                                   params, prepare=False).fetchone()
            plan = (json.loads(found) if isinstance(found, str) else found)[0]["Plan"]
        scans = [n["Node Type"] for n in _nodes(plan) if n.get("Relation Name") ==
                 "django_ultjobs_job" and n["Node Type"] != "ModifyTable"]
        assert scans and set(scans) == {"Index Scan"}, scans
        # Nor a join that reads the batch again for each row (quadratic in the batch's size).
        assert not [n for n in _nodes(plan) if n["Node Type"] == "CTE Scan"
                    and n.get("Actual Loops", 0) > 1], plan
        assert Job.objects.using(pg_alias).filter(status="succeeded").count() == \
            64 * (1 + prepared)
    finally:
        raw.execute("RESET plan_cache_mode")
        raw.execute("DEALLOCATE ALL")
        raw.prepare_threshold = before


def test_a_settle_that_puts_a_run_to_wait_on_an_event_is_planned_afresh(
        prepared_store: JobStore, pg_alias: str, clock: FakeClock) -> None:
    """Item 85: such a batch reads the events table (an event already sent wakes the run at
    once), which a generic plan made when that table was small would scan whole."""
    store = prepared_store
    (job_id,) = enqueue(store, new_job())
    for _ in range(RUNS):
        (again,) = claim(store)
        assert store.settle([settlement(again, "waiting", outcome="suspended", delay=30.0,
                                        wait_event="paid")], "w1") == {job_id}
        clock.advance(31)
    assert "settle" not in _prepared(pg_alias)
    assert row(pg_alias, job_id).status == "waiting"


def test_a_settle_that_extends_an_episode_is_planned_afresh(
        prepared_store: JobStore, pg_alias: str, clock: FakeClock) -> None:
    """Item 85: a batch that extends a park's episode (rule 12 (unknown-job-parked)) reads the
    attempts table, which a generic plan made when that table was small would scan whole: it is
    never prepared."""
    store = prepared_store
    park = {"outcome": "suspended", "attempt_delta": -1, "delay": 30.0,
            "error": f'{UNKNOWN_JOB_PREFIX}"gone"'}
    (job_id,) = enqueue(store, new_job("gone"))
    # The episode's row as the first park wrote it (a settle of its own would prepare the
    # statement on this connection first).
    episode = JobAttempt.objects.using(pg_alias).create(
        job_id=job_id, attempt=1, worker_id="w1", outcome=park["outcome"], error=park["error"])
    for _ in range(RUNS):
        (again,) = claim(store)
        assert store.settle([settlement(again, "queued", extends=episode.id, **park)],
                            "w1") == {job_id}
        clock.advance(30)
    assert "settle" not in _prepared(pg_alias)
    assert JobAttempt.objects.using(pg_alias).get(id=episode.id).claims == 1 + RUNS


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


def test_a_pooled_connection_that_lost_them_is_not_handed_out_again(
        pg_alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With Django's pool (OPTIONS["pool"], as deployment.md suggests for workers), closing the
    Django connection hands the psycopg one back to the pool as it is: it must be closed
    itself, or the pool hands the same spoiled connection out again."""
    settings = {**connections[pg_alias].settings_dict,
                "OPTIONS": {"pool": {"min_size": 1, "max_size": 1}, "prepare_threshold": 0}}
    pooled = ConnectionHandler({"default": settings, pg_alias: settings})
    monkeypatch.setattr("django_ultjobs.store.connection.connections", pooled)
    store = PostgresStore(pg_alias)
    try:
        enqueue(store, new_job())  # prepared at its first run
        pooled[pg_alias].connection.pgconn.exec_(b"DEALLOCATE ALL")  # behind psycopg's back
        with pytest.raises(DatabaseError, match="does not exist"):
            enqueue(store, new_job())
        enqueue(store, new_job())  # a new connection from the pool, not the spoiled one
        pooled[pg_alias].close()  # back to the pool between runs, as a worker's thread does
        enqueue(store, new_job())
    finally:
        pooled[pg_alias].close()
        pooled[pg_alias].close_pool()
    assert Job.objects.using(pg_alias).count() == 3


def test_a_connection_in_the_callers_own_transaction_is_left_to_the_caller(
        prepared_store: JobStore, pg_alias: str) -> None:
    """A caller that opened a transaction outside atomic() (autocommit off, a savepoint) keeps
    its connection whatever fails in it: replacing it would drop the caller's earlier writes
    without a word. psycopg forgets its prepared statements at the rollback."""
    store = prepared_store
    conn = connections[pg_alias]
    conn.set_autocommit(False)
    try:
        (kept,) = enqueue(store, new_job())  # prepared at its first run
        savepoint = conn.savepoint()
        conn.connection.pgconn.exec_(b"DEALLOCATE ALL")  # behind psycopg's back
        with pytest.raises(DatabaseError, match="does not exist"):
            enqueue(store, new_job())
        conn.savepoint_rollback(savepoint)
        (also,) = enqueue(store, new_job())  # prepared afresh after the rollback
        conn.commit()
    finally:
        conn.set_autocommit(True)
    assert set(Job.objects.using(pg_alias).values_list("id", flat=True)) == {kept, also}


def test_a_stale_result_type_spoils_the_connection_too(pg_alias: str) -> None:
    """After a migration changes the type of a column a prepared statement returns, PostgreSQL
    refuses that statement on every connection that prepared it; a new connection plans it
    afresh, so the store replaces the connection (and a lost statement does the same)."""
    store = get_store(pg_alias)
    # Server-side binding, as the store's cursors (Django's default client-side ones never
    # prepare).
    params = {**connections[pg_alias].get_connection_params(), "prepare_threshold": 0,
              "cursor_factory": psycopg.Cursor}
    with psycopg.connect(**params, autocommit=True) as worker, \
            psycopg.connect(**params, autocommit=True) as migration:
        migration.execute("CREATE TABLE stale_type (x int)")
        try:
            worker.execute("SELECT x FROM stale_type WHERE x = %s", [1])  # prepared
            # On another connection: psycopg forgets its own statements after its own DDL.
            migration.execute("ALTER TABLE stale_type ALTER COLUMN x TYPE bigint")
            with pytest.raises(psycopg.Error) as stale:
                worker.execute("SELECT x FROM stale_type WHERE x = %s", [1])
            with pytest.raises(psycopg.Error) as other:
                worker.execute("SELECT missing FROM stale_type")
        finally:
            migration.execute("DROP TABLE stale_type")
    assert store.spoils_connection(stale.value)
    assert not store.spoils_connection(other.value)
