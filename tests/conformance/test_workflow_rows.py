"""A workflow's rows on both engines: SQLite writes each node once, whole, and the rows are
the ones an insert and a placement write (rule 152 (placed-insert-same-rows))."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from django_ultjobs import Workflow
from django_ultjobs.jobs.enqueue import bulk_enqueue
from django_ultjobs.jobs.workflows import node_placements
from django_ultjobs.models import Job
from django_ultjobs.models import Workflow as WorkflowRow
from django_ultjobs.store import get_store
from django_ultjobs.store.dependencies import place
from tests.testapp.jobs import wf_step

from .helpers import row

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


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


def _inserted_then_placed(alias: str, wf: Workflow) -> list[int]:
    """``wf``'s jobs the other way: inserted as any bulk enqueue, then placed by one UPDATE."""
    store = get_store(alias)
    with transaction.atomic(using=alias):
        group = WorkflowRow.objects.using(alias).create(name=wf.name)
        ids = bulk_enqueue(node.call for node in wf.nodes)
        with store.cursor() as cur:
            place(store, cur, node_placements(wf.nodes, ids, group.pk))
    return ids


def test_a_workflows_rows_are_what_an_insert_and_a_placement_write(alias: str) -> None:
    # rule 152 (placed-insert-same-rows): on SQLite each node is inserted whole, with its ids
    # chosen first; the rows must be the ones the insert and the placement's UPDATE make
    placed = _inserted_then_placed(alias, _graph())
    direct = _graph().enqueue().job_ids
    assert _shape(alias, direct) == _shape(alias, placed)
    assert [r["status"] for r in _shape(alias, direct)] == [
        "queued", "queued", "pending", "pending", "pending"]


def test_sqlite_writes_each_node_once(alias: str) -> None:
    # rule 152 (placed-insert-same-rows): no UPDATE after the insert on SQLite, where the
    # 10,000-node enqueue spent most of its time writing every row and its index entries twice
    if connections[alias].vendor != "sqlite":
        pytest.skip("PostgreSQL takes its ids from the insert (COPY), then places the rows")
    with CaptureQueriesContext(connections[alias]) as sent:
        _graph().enqueue()
    statements = [q["sql"] for q in sent.captured_queries]
    assert not [s for s in statements if re.search(r"\bUPDATE\s", s.upper())], statements
    assert len([s for s in statements if "nodes_insert" in s]) == 1, statements


def test_a_workflows_ids_follow_every_id_the_table_gave(alias: str) -> None:
    # rule 152 (placed-insert-same-rows): the ids chosen before the insert are past every id
    # ever given (a deleted row's too), and the next plain enqueue's is past them
    gone = wf_step.enqueue("gone")
    Job.objects.using(alias).filter(pk=gone.pk).delete()
    ids = _graph().enqueue().job_ids
    after = wf_step.enqueue("after")
    assert ids == list(range(ids[0], ids[0] + 5)) and ids[0] > gone.pk
    assert after.pk > ids[-1]
    assert row(alias, ids[2]).depends_on == [ids[0], ids[1]]


def test_a_workflow_whose_transaction_rolls_back_leaves_its_ids_free(alias: str) -> None:
    # rule 152 (placed-insert-same-rows)
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        _graph().enqueue()
        raise RuntimeError("rolled back")
    again = _graph().enqueue()
    assert Job.objects.using(alias).count() == 5
    assert row(alias, again.job_ids[4]).depends_on == again.job_ids[:1] + again.job_ids[2:3]
