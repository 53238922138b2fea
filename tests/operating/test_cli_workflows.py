"""``manage.py ultjobs`` over batches and workflows (docs/workflows.md), on SQLite and
PostgreSQL: ``show`` lists a job's dependencies and dependents, bounded; ``list --batch`` and
``--workflow`` keep a group's jobs; an id no group has is refused in one line."""

from __future__ import annotations

import json

import pytest

from django_ultjobs import Batch, Workflow
from django_ultjobs.management import reports
from tests.operating.test_cli import listed, refused, run
from tests.testapp.jobs import wf_step

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_show_lists_dependencies_and_dependents(alias: str) -> None:
    wf = Workflow(name="close-month")
    a = wf.add(wf_step.call("a"))
    b = wf.add(wf_step.call("b"))
    c = wf.add(wf_step.call("c"), after=[a, b])
    run_ = wf.enqueue()
    ids = [run_.job_ids[n.index] for n in (a, b, c)]
    out, _ = run("show", str(ids[2]))
    assert "\ndependencies:\n" in out and "dependents:" not in out
    deps = out.split("\ndependencies:\n")[1]
    assert str(ids[0]) in deps and str(ids[1]) in deps and "queued" in deps
    out, _ = run("show", str(ids[0]))
    assert "\ndependents:\n" in out and str(ids[2]) in out.split("\ndependents:\n")[1]
    shown = json.loads(run("show", str(ids[2]), "--json")[0])
    assert [j["id"] for j in shown["dependencies"]["jobs"]] == ids[:2]
    assert shown["dependencies"]["total"] == 2 and shown["dependents"]["total"] == 0
    assert shown["status"] == "pending" and shown["deps_done"] == 0


def test_show_of_a_batch_callback_lists_a_bounded_number_of_members(alias: str,
                                                                   monkeypatch) -> None:
    monkeypatch.setattr(reports, "MAX_LINKED", 2)
    with Batch(on_finish=wf_step.call("report")) as batch:
        members = [wf_step.enqueue(f"m{i}").id for i in range(3)]
    callback = batch.callback_ids["on_finish"]
    out, _ = run("show", str(callback))
    assert "dependencies (the first 2 of 3):" in out
    assert str(members[0]) in out and str(members[2]) not in out.split("dependencies")[1]
    out, _ = run("show", str(members[0]))
    assert "\ndependents:\n" in out and str(callback) in out.split("\ndependents:\n")[1]


def test_list_keeps_a_batch_or_a_workflow(alias: str) -> None:
    with Batch() as batch:
        members = [wf_step.enqueue(f"m{i}").id for i in range(2)]
    run_ = Workflow(name="w")
    run_.add(wf_step.call("x"))
    enqueued = run_.enqueue()
    wf_step.enqueue("alone")
    assert listed("--batch", str(batch.id)) == sorted(members, reverse=True)
    assert listed("--workflow", str(enqueued.id)) == enqueued.job_ids
    assert listed("--batch", str(batch.id), "--status", "failed") == []
    assert refused("list", "--batch", "99999") == (
        f"no batch has id 99999 in database {alias!r}")
    assert refused("list", "--workflow", "99999") == (
        f"no workflow has id 99999 in database {alias!r}")


def _statuses(alias: str, ids: list[int]) -> list[str]:
    from django_ultjobs.models import Job
    found = dict(Job.objects.using(alias).filter(id__in=ids).values_list("id", "status"))
    return [found[i] for i in ids]


def test_cancel_a_workflow_leaves_what_waits_to_its_when(alias: str) -> None:
    """``cancel --workflow`` cancels as ``cancel_jobs`` on the run does: the jobs that do not
    wait; a dependent follows its ``when=`` (rule 115 (group-cancel))."""
    wf = Workflow(name="w")
    a = wf.add(wf_step.call("a"))
    b = wf.add(wf_step.call("b"), after=[a])
    d = wf.add(wf_step.call("d"), after=[a], when="finished")
    enqueued = wf.enqueue()
    ids = [enqueued.job_ids[n.index] for n in (a, b, d)]
    out, _ = run("cancel", "--workflow", str(enqueued.id))
    assert "1" in out
    assert _statuses(alias, ids) == ["cancelled", "cancelled", "queued"]
    assert refused("cancel", "--workflow", "99999") == (
        f"no workflow has id 99999 in database {alias!r}")


def test_cancel_and_retry_a_batch_by_its_id(alias: str) -> None:
    with Batch() as batch:
        members = [wf_step.enqueue(f"m{i}").id for i in range(3)]
    wf_step.enqueue("alone")
    run("cancel", "--batch", str(batch.id))
    assert _statuses(alias, members) == ["cancelled"] * 3
    run("retry", "--batch", str(batch.id))
    assert _statuses(alias, members) == ["queued"] * 3
    assert listed("--status", "queued") != [] and len(listed("--status", "cancelled")) == 0
