"""A workflow's rows on both engines: SQLite writes each node once, whole, and the rows are
the ones an insert and the link UPDATE write (rule 152 (graph-insert-same-rows)); a released
dependent keeps its own due time (rule 150 (release-keeps-due-time)); and the corners a user
meets: a condition with nothing to wait for, a node pruned, a wait and the connection it
takes, a retry of a dependent itself."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_ultjobs import Batch, Workflow, WorkflowError, chain
from django_ultjobs.jobs.enqueue import bulk_enqueue
from django_ultjobs.jobs.workflows import node_graph_rows
from django_ultjobs.models import Batch as BatchRow
from django_ultjobs.models import Job
from django_ultjobs.models import Workflow as WorkflowRow
from django_ultjobs.operations import retry_jobs
from django_ultjobs.store import JobStore, get_store
from django_ultjobs.store.dependencies import write_graph_rows
from django_ultjobs.testing import run_jobs
from tests.doubles import FakeClock
from tests.testapp.jobs import wf_step

from .helpers import claim, row, settlement

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


@pytest.fixture
def clock() -> FakeClock:
    """A minute ahead of the database's clock, so the jobs enqueued on it are due."""
    ahead = FakeClock()
    ahead.advance(60)
    return ahead


def _graph() -> Workflow:
    """Nodes of every shape: options of their own, arguments JSON writes with escapes, each
    condition, a node with two dependencies and one with two dependents."""
    wf = Workflow(name="shapes")
    a = wf.add(wf_step.using(queue="north", priority=3, tags=["t1", "é"],
                             expires_in=timedelta(hours=2)).call("été \u2603 \"q\""))
    b = wf.add(wf_step.using(delay=timedelta(minutes=5), timeout=9.5).call("b", path="x/y"))
    c = wf.add(wf_step.call("c"), after=[a, b])
    wf.add(wf_step.using(max_attempts=7).call("d"), after=[c], when="failed")
    wf.add(wf_step.call("e"), after=[a, c], when="finished")
    return wf


#: Columns that differ between two enqueues of one graph: ids, the group, the clock's reading.
_VARYING = {"id", "workflow_id", "depends_on", "dependents", "wait_key", "created_at",
            "updated_at", "visible_at", "expires_at"}


def _shape(alias: str, ids: list[int]) -> list[dict[str, Any]]:
    """The rows of ``ids`` as an enqueue made them: every column, the edges as node indexes,
    the times as offsets from the row's creation."""
    index = {job_id: i for i, job_id in enumerate(ids)}
    rows = {r["id"]: r for r in Job.objects.using(alias).filter(pk__in=ids).values()}
    shaped = []
    for job_id in ids:
        r = rows[job_id]
        shaped.append({
            **{k: v for k, v in r.items() if k not in _VARYING},
            "depends_on": None if r["depends_on"] is None else [index[i] for i in r["depends_on"]],
            "dependents": None if r["dependents"] is None else [index[i] for i in r["dependents"]],
            "wait_key": r["wait_key"] == f"w{r['workflow_id']}",
            "due_after": r["visible_at"] - r["created_at"],
            "expires_after": r["expires_at"] and r["expires_at"] - r["created_at"],
            "raw_args": _raw(alias, "args", job_id), "raw_tags": _raw(alias, "tags", job_id),
        })
    return shaped


def _raw(alias: str, column: str, job_id: int) -> str:
    """A JSON column's text as stored, which the admin's search and ``--tag`` read."""
    with connections[alias].cursor() as cur:
        cur.execute(f"SELECT {column} FROM django_ultjobs_job WHERE id = %s", [job_id])
        return str(cur.fetchone()[0])


def _inserted_then_linked(alias: str, wf: Workflow) -> list[int]:
    """``wf``'s jobs the other way: inserted as any bulk enqueue, then linked by one UPDATE."""
    store = get_store(alias)
    with transaction.atomic(using=alias):
        group = WorkflowRow.objects.using(alias).create(name=wf.name)
        ids = bulk_enqueue(node.call for node in wf.nodes)
        with store.cursor() as cur:
            write_graph_rows(store, cur, node_graph_rows(wf.nodes, ids, group.pk))
    return ids


def test_a_workflows_rows_are_what_an_insert_and_a_link_write(alias: str) -> None:
    # rule 152 (graph-insert-same-rows): on SQLite each node is inserted whole, with its ids
    # chosen first; the rows must be the ones the insert and the link UPDATE make
    linked = _inserted_then_linked(alias, _graph())
    direct = _graph().enqueue().job_ids
    assert _shape(alias, direct) == _shape(alias, linked)
    assert [r["status"] for r in _shape(alias, direct)] == [
        "queued", "queued", "pending", "pending", "pending"]


def test_sqlite_writes_each_node_once(alias: str) -> None:
    # rule 152 (graph-insert-same-rows): no UPDATE after the insert on SQLite, where the
    # 10,000-node enqueue spent most of its time writing every row and its index entries twice
    if connections[alias].vendor != "sqlite":
        pytest.skip("PostgreSQL takes its ids from the insert (COPY), then links the rows")
    with CaptureQueriesContext(connections[alias]) as sent:
        _graph().enqueue()
    statements = [q["sql"] for q in sent.captured_queries]
    assert not [s for s in statements if re.search(r"\bUPDATE\s", s.upper())], statements
    assert len([s for s in statements if "nodes_insert" in s]) == 1, statements


def test_a_workflows_ids_follow_every_id_the_table_gave(alias: str) -> None:
    # rule 152 (graph-insert-same-rows): the ids chosen before the insert are past every id
    # ever given (a deleted row's too), and the next plain enqueue's is past them
    gone = wf_step.enqueue("gone")
    Job.objects.using(alias).filter(pk=gone.pk).delete()
    ids = _graph().enqueue().job_ids
    after = wf_step.enqueue("after")
    assert ids == list(range(ids[0], ids[0] + 5)) and ids[0] > gone.pk
    assert after.pk > ids[-1]
    assert row(alias, ids[2]).depends_on == [ids[0], ids[1]]


def test_a_workflow_whose_transaction_rolls_back_leaves_its_ids_free(alias: str) -> None:
    # rule 152 (graph-insert-same-rows)
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        _graph().enqueue()
        raise RuntimeError("rolled back")
    again = _graph().enqueue()
    assert Job.objects.using(alias).count() == 5
    assert row(alias, again.job_ids[4]).depends_on == again.job_ids[:1] + again.job_ids[2:3]


def test_a_released_dependent_keeps_its_own_due_time(alias: str, cstore: JobStore,
                                                      clock: FakeClock) -> None:
    # rule 150 (release-keeps-due-time): released by its dependency's settle, a node with a
    # run_at an hour away is queued, and due at its run_at, not at the settle
    run_at = timezone.now() + timedelta(hours=1)
    wf = Workflow()
    a = wf.add(wf_step.call("a"))
    wf.add(wf_step.using(run_at=run_at).call("later"), after=[a])
    wf.add(wf_step.call("now"), after=[a])
    first, later, now = wf.enqueue().job_ids
    (claimed,) = claim(cstore)
    assert cstore.settle([settlement(claimed)], "w1") == {first}
    assert [row(alias, i).status for i in (later, now)] == ["queued", "queued"]
    assert row(alias, later).visible_at >= run_at
    (running,) = claim(cstore)
    assert running.id == now and cstore.settle([settlement(running)], "w1") == {now}
    clock.advance(3600 + 60)
    assert [j.id for j in claim(cstore)] == [later]


def test_a_condition_with_nothing_to_wait_for_is_refused(alias: str) -> None:
    # rule 118 (bad-graph-refused): a node with no dependencies runs at once, so an alert
    # written when="failed" without after= would run at once
    wf = Workflow()
    for when in ("failed", "finished"):
        with pytest.raises(WorkflowError, match=f"when='{when}' needs after="):
            wf.add(wf_step.call("alert"), when=when)
    assert wf.nodes == [] and not Job.objects.using(alias).exists()


def test_the_jobs_of_a_workflow_name_a_node_that_is_gone(alias: str) -> None:
    run = _graph().enqueue()
    Job.objects.using(alias).filter(pk__in=run.job_ids[3:]).delete()
    with pytest.raises(Job.DoesNotExist,
                       match=rf"job {run.job_ids[3]} of workflow {run.id} does not exist "
                             r"\(nor 1 more of its jobs\): pruned or deleted"):
        run.jobs()


def test_a_wait_for_a_finished_job_opens_no_connection(alias: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # rule 116 (wait-for-result): only a wait that has to wait listens on a connection of its own
    job = wf_step.enqueue("done")
    run_jobs(database=alias)
    conn = connections[alias]

    def refused(*args: object) -> None:
        raise AssertionError("a wait for a finished job opened a connection")

    monkeypatch.setattr(conn, "get_new_connection", refused)
    assert job.wait(timeout=5).status == "succeeded"


@pytest.fixture
def pooled(pg_alias: str) -> Iterator[str]:
    """A second alias of the PostgreSQL test database through Django's pool, two connections
    at most, a checkout waiting 2 s at most."""
    settings = {**connections[pg_alias].settings_dict, "CONN_MAX_AGE": 0}
    settings["OPTIONS"] = {**settings["OPTIONS"],
                           "pool": {"min_size": 1, "max_size": 2, "timeout": 2}}
    # Made here, not declared in the settings: the test case allows such a connection.
    wrapper = type(connections[pg_alias])(settings, "pooled")
    connections["pooled"] = wrapper
    try:
        yield "pooled"
    finally:
        wrapper.close()
        wrapper.close_pool()
        del connections["pooled"]


def test_a_wait_takes_no_connection_from_djangos_pool(pooled: str) -> None:
    # rule 116 (wait-for-result): the listening connection is the driver's own; one taken from
    # the pool and closed never went back, and the third wait found the pool empty
    # (PoolTimeout after 2 s instead of the wait's TimeoutError)
    job = Job.objects.using(pooled).get(pk=wf_step.enqueue("never run").pk)
    for _ in range(3):
        with pytest.raises(TimeoutError, match=f"job {job.pk} did not finish in time"):
            job.wait(timeout=0.2)
    assert Job.objects.using(pooled).filter(pk=job.pk, status="queued").exists()


def test_retrying_a_cancelled_dependent_itself_runs_it_now(alias: str) -> None:
    # rule 114 (retry-takes-finish-back) takes back a dependency's finish; a retry of the
    # dependent itself is the operator's decision to run it, whatever its dependencies did
    wf = Workflow()
    a = wf.add(wf_step.call("a", fail=True))
    b = wf.add(wf_step.call("b"), after=[a])
    wf.add(wf_step.call("c"), after=[b])
    ia, ib, ic = wf.enqueue().job_ids
    run_jobs(database=alias)
    assert [row(alias, i).status for i in (ia, ib, ic)] == ["failed", "cancelled", "cancelled"]
    retry_jobs([ib], using=alias)
    assert [row(alias, i).status for i in (ib, ic)] == ["queued", "pending"]
    run_jobs(database=alias)
    assert [row(alias, i).status for i in (ia, ib, ic)] == ["failed", "succeeded", "succeeded"]


def test_a_batch_or_workflow_read_later_waits_as_the_one_enqueued(alias: str) -> None:
    # rule 116 (wait-for-result): another request, another process knows only the group's id
    with Batch(on_finish=wf_step.call("done")) as batch:
        wf_step.enqueue("m")
    run = chain(wf_step.call("x"), wf_step.call("y")).enqueue()
    batch_row = BatchRow.objects.using(alias).get(pk=batch.id)
    workflow_row = WorkflowRow.objects.using(alias).get(pk=run.id)
    with pytest.raises(TimeoutError, match=f"batch {batch.id} did not finish in time"):
        batch_row.wait(timeout=0.2)
    with pytest.raises(TimeoutError, match=f"workflow {run.id} did not finish in time"):
        asyncio.run(workflow_row.wait_async(timeout=0.2))
    run_jobs(database=alias)
    assert batch_row.wait(timeout=5) == batch_row
    assert asyncio.run(batch_row.wait_async(timeout=5)) == batch_row
    assert [j.id for j in workflow_row.wait(timeout=5)] == run.job_ids
    assert [j.id for j in asyncio.run(workflow_row.wait_async(timeout=5))] == run.job_ids
