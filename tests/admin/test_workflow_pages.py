"""The admin's pages of batches and workflows, and what a job's page says about its
dependencies (docs/workflows.md), on SQLite and PostgreSQL: words, links, the graph's SVG, the
filters by batch and workflow, the cancel action, and the bounds that keep them fast."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from django_ultjobs import Batch, Workflow
from django_ultjobs.admin import group_figures
from django_ultjobs.models import Job
from django_ultjobs.testing import run_jobs
from tests.admin.conftest import JOBS, client_for, page, post_action
from tests.testapp.jobs import wf_step

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

BATCHES = reverse("admin:django_ultjobs_batch_changelist")
WORKFLOWS = reverse("admin:django_ultjobs_workflow_changelist")


def job_page(client, job_id: int) -> str:  # type: ignore[no-untyped-def]
    return page(client, reverse("admin:django_ultjobs_job_change", args=[job_id]))


def _diamond() -> tuple[Workflow, list[int]]:
    wf = Workflow(name="close-month")
    a = wf.add(wf_step.call("a"))
    b = wf.add(wf_step.call("b"))
    c = wf.add(wf_step.call("c"), after=[a, b])
    run = wf.enqueue()
    return wf, [run.job_ids[n.index] for n in (a, b, c)]


def test_a_pending_job_says_what_it_waits_for_and_links_both_ways(alias: str, viewer) -> None:
    _, (a, b, c) = _diamond()
    Job.objects.using(alias).filter(id=a).update(status="succeeded")
    Job.objects.using(alias).filter(id=c).update(deps_done=1)
    client = client_for(viewer)
    html = job_page(client, c)
    assert "1 of 2 dependencies finished; runs when every one succeeded" in html
    for dep in (a, b):
        assert reverse("admin:django_ultjobs_job_change", args=[dep]) in html
    assert f"#{a}</a> succeeded" in html and f"#{b}</a> queued" in html
    workflow_id = Job.objects.using(alias).get(id=c).workflow_id
    assert reverse("admin:django_ultjobs_workflow_change", args=[workflow_id]) in html
    # Its dependency links back to it.
    assert reverse("admin:django_ultjobs_job_change", args=[c]) in job_page(client, a)
    # A plain job's page has no dependencies section.
    plain = wf_step.enqueue("plain")
    assert "Dependencies" not in job_page(client, plain.id)


def test_a_cancelled_dependent_names_the_dependency_and_the_graph_writes_it(
        alias: str, viewer) -> None:
    wf = Workflow(name="cut")
    a = wf.add(wf_step.call("a", fail=True))
    b = wf.add(wf_step.call("b"), after=[a])
    run = wf.enqueue()
    run_jobs(database=alias)
    first, second = run.job_ids[a.index], run.job_ids[b.index]
    client = client_for(viewer)
    assert f"cancelled: dependency {first} failed" in job_page(client, second)
    html = page(client, reverse("admin:django_ultjobs_workflow_change", args=[run.id]))
    svg = re.search(r'<svg class="ultjobs-chart".*?</svg>', html, re.S).group(0)
    assert 'role="img"' in svg and "style=" not in svg
    assert "ultjobs-node-failed" in svg and "ultjobs-node-cancelled" in svg
    assert "ultjobs-edge-cancelled" in svg and f"dependency {first} failed" in svg
    assert reverse("admin:django_ultjobs_job_change", args=[second]) in svg
    assert "failed" in html and "cancelled" in html  # the counts by status


def test_the_graph_draws_a_bounded_number_of_nodes_and_says_so(alias: str, viewer,
                                                              monkeypatch) -> None:
    monkeypatch.setattr(group_figures, "MAX_DRAWN", 5)
    wf = Workflow(name="wide")
    root = wf.add(wf_step.call("root"))
    for i in range(8):
        wf.add(wf_step.call(f"leaf{i}"), after=[root])
    run = wf.enqueue()
    html = page(client_for(viewer), reverse("admin:django_ultjobs_workflow_change",
                                            args=[run.id]))
    svg = re.search(r'<svg class="ultjobs-chart".*?</svg>', html, re.S).group(0)
    assert svg.count('class="ultjobs-node ') == 5
    assert "Only its first 5 jobs are drawn" in html
    assert f"{JOBS}?workflow={run.id}" in html


def test_a_batch_page_shows_progress_members_by_status_and_callbacks(alias: str,
                                                                     viewer) -> None:
    with Batch(on_success=wf_step.call("report"), on_failure=wf_step.call("alert"),
               description="nightly import") as batch:
        ids = [wf_step.enqueue(f"m{i}").id for i in range(3)]
    Job.objects.using(alias).filter(id=ids[0]).update(status="succeeded")
    client = client_for(viewer)
    html = page(client, reverse("admin:django_ultjobs_batch_change", args=[batch.id]))
    assert "1 of 3 members finished" in html
    assert f"{JOBS}?batch={batch.id}&amp;status=queued" in html
    assert "on_success" in html and "on_failure" in html
    assert "0 of 3 dependencies finished" in html  # the callbacks wait
    assert "nightly import" in page(client, BATCHES)
    # A member links its batch; a callback links its batch's members.
    assert reverse("admin:django_ultjobs_batch_change", args=[batch.id]) in job_page(
        client, ids[1])
    assert f"the 3 members of batch {batch.id}" in job_page(
        client, batch.callback_ids["on_success"])


def test_the_status_counts_say_when_they_cover_only_the_first_jobs(alias: str, viewer,
                                                                   monkeypatch) -> None:
    monkeypatch.setattr(group_figures, "MAX_COUNTED", 2)
    with Batch(description="big") as batch:
        for i in range(4):
            wf_step.enqueue(f"m{i}")
    counts = group_figures.status_counts("batch_id", batch.id, alias)
    assert (counts.counts, counts.counted, counts.capped) == ({"queued": 2}, 2, True)
    html = page(client_for(viewer), reverse("admin:django_ultjobs_batch_change",
                                            args=[batch.id]))
    assert "Counted over its first 2 jobs only" in html
    assert "more than 2 of 4 members still to finish" in html


def test_the_jobs_list_filters_by_batch_and_by_workflow(alias: str, viewer) -> None:
    with Batch() as batch:
        members = [wf_step.enqueue(f"m{i}").id for i in range(2)]
    _, nodes = _diamond()
    wf_step.enqueue("alone")
    workflow_id = Job.objects.using(alias).get(id=nodes[0]).workflow_id
    client = client_for(viewer)
    listed = [int(i) for i in re.findall(r'class="field-job_id"><a href="[^"]+">#(\d+)</a>',
                                         page(client, f"{JOBS}?batch={batch.id}"))]
    assert listed == sorted(members, reverse=True)
    listed = [int(i) for i in re.findall(r'class="field-job_id"><a href="[^"]+">#(\d+)</a>',
                                         page(client, f"{JOBS}?workflow={workflow_id}"))]
    assert listed == sorted(nodes, reverse=True)
    # Not an id: Django's "bad filter" answer, never a server error.
    response = client.get(f"{JOBS}?batch=abc")
    assert response.status_code == 302 and "e=1" in response["Location"]


def test_the_cancel_action_cancels_a_workflow_and_what_waits_follows(alias: str,
                                                                    operator) -> None:
    _, (a, b, c) = _diamond()
    workflow_id = Job.objects.using(alias).get(id=a).workflow_id
    response = post_action(client_for(operator), WORKFLOWS, "cancel_workflows", [workflow_id])
    assert response.status_code == 302
    statuses = dict(Job.objects.using(alias).values_list("id", "status"))
    assert (statuses[a], statuses[b], statuses[c]) == ("cancelled", "cancelled", "cancelled")
    assert Job.objects.using(alias).get(id=c).cancelled_by in (a, b)


def test_a_viewer_sees_the_group_pages_and_may_not_cancel(alias: str, viewer) -> None:
    with Batch() as batch:
        wf_step.enqueue("m")
    client = client_for(viewer)
    page(client, BATCHES)
    page(client, WORKFLOWS)
    post_action(client, BATCHES, "cancel_batches", [batch.id])
    assert Job.objects.using(alias).get(batch_id=batch.id).status == "queued"


def test_the_group_pages_read_a_fixed_number_of_queries(alias: str, viewer) -> None:
    """A batch's and a workflow's pages cost the same queries at 2 jobs or 40: bounded reads,
    none per member or per node (rule 80 (bounded-charts), as the charts)."""
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    client = client_for(viewer)

    def cost(url: str) -> int:
        page(client, url)  # the session and the permissions, read once
        with CaptureQueriesContext(connections[alias]) as seen:
            page(client, url)
        return len(seen)

    sizes = {}
    for size in (2, 40):
        with Batch(on_finish=wf_step.call("report")) as batch:
            for i in range(size):
                wf_step.enqueue(f"m{i}")
        wf = Workflow()
        previous = wf.add(wf_step.call("root"))
        for i in range(size):
            previous = wf.add(wf_step.call(f"n{i}"), after=[previous])
        run = wf.enqueue()
        sizes[size] = (cost(reverse("admin:django_ultjobs_batch_change", args=[batch.id])),
                       cost(reverse("admin:django_ultjobs_workflow_change", args=[run.id])))
    assert sizes[2] == sizes[40]
