"""The figures of a batch's and a workflow's pages, each read bounded whatever the group holds
(docs/workflows.md): a batch may have a million members, a workflow 10,000 nodes.

* Members by status: grouped over the group's first ``MAX_COUNTED`` jobs (its partial index,
  by id); past it the page says the counts cover only those.
* Progress: the unfinished members, counted on the partial index of a batch's open members,
  up to ``MAX_COUNTED``.
* The graph: the workflow's first ``MAX_DRAWN`` nodes by id. A node depends only on nodes added
  before it (ids ascending), so those nodes hold every edge between them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db.models import Count

from ..models import UNFINISHED_STATUSES, Job, JobStatus

#: Jobs of a group counted at most per page: a grouped count of this many rows stays in the
#: tens of milliseconds on either engine.
MAX_COUNTED = 20_000
#: Nodes a workflow's graph draws at most: past a few hundred boxes a drawing is no longer
#: read, and each costs the page a row with its edge lists.
MAX_DRAWN = 150
#: Status order on the pages: what is still to come, then how it ended.
STATUS_ORDER = (JobStatus.PENDING, JobStatus.QUEUED, JobStatus.WAITING, JobStatus.RUNNING,
                JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(frozen=True)
class StatusCounts:
    """A group's jobs by status, and whether the counts cover only its first jobs."""

    counts: dict[str, int]
    counted: int
    capped: bool


def status_counts(group_field: str, group_id: int, alias: str) -> StatusCounts:
    """The statuses of the group's first ``MAX_COUNTED`` jobs (``batch_id`` or
    ``workflow_id``), in ``STATUS_ORDER``."""
    first = (Job.objects.using(alias).filter(**{group_field: group_id}).order_by("id")
             .values_list("id", flat=True)[:MAX_COUNTED + 1])
    found = dict(Job.objects.using(alias).filter(id__in=first[:MAX_COUNTED]).order_by()
                 .values("status").annotate(n=Count("id")).values_list("status", "n"))
    capped = first[MAX_COUNTED:MAX_COUNTED + 1].exists()
    counts = {str(s): found[s] for s in STATUS_ORDER if found.get(s)}
    counts.update({s: n for s, n in found.items() if s not in counts})  # a status added later
    return StatusCounts(counts, sum(found.values()), capped)


def open_members(batch_id: int, alias: str) -> int:
    """How many of the batch's members are not finished for good, up to ``MAX_COUNTED + 1``
    (the partial index ``ultjobs_job_batch_open``)."""
    return (Job.objects.using(alias).filter(batch_id=batch_id, status__in=UNFINISHED_STATUSES)
            .order_by()[:MAX_COUNTED + 1].count())


def callbacks(batch_id: int, alias: str) -> list[Job]:
    """The batch's callbacks' jobs (three at most), without their payloads."""
    return list(Job.objects.using(alias).filter(callback_of_id=batch_id).order_by("id")
                .only("id", "name", "status", "depends_when", "deps_done", "deps_total",
                      "deps_failed", "cancel_reason", "cancelled_by", "cancel_requested"))


@dataclass
class Node:
    """A workflow's job as the graph draws it."""

    id: int
    name: str
    status: str
    when: str
    depends_on: list[int]
    cancelled_by: int | None
    cancel_reason: str
    #: Its column: one more than its deepest dependency's (0: it waits for nobody).
    layer: int = 0
    #: Its place in its column, from the top.
    row: int = 0


@dataclass
class Graph:
    """The drawn part of a workflow: its first nodes by id, and how many it has past them."""

    nodes: list[Node] = field(default_factory=list)
    more: bool = False


def workflow_graph(workflow_id: int, alias: str) -> Graph:
    """The workflow's first ``MAX_DRAWN`` nodes with their edges, laid out in columns."""
    rows = list(Job.objects.using(alias).filter(workflow_id=workflow_id).order_by("id")
                .values_list("id", "name", "status", "depends_when", "depends_on",
                             "cancelled_by", "cancel_reason")[:MAX_DRAWN + 1])
    graph = Graph(more=len(rows) > MAX_DRAWN)
    by_id: dict[int, Node] = {}
    for job_id, name, status, when, depends_on, cancelled_by, reason in rows[:MAX_DRAWN]:
        deps = [d for d in depends_on or () if isinstance(d, int) and d in by_id]
        node = Node(job_id, name, status, when, deps, cancelled_by, reason or "")
        node.layer = 1 + max((by_id[d].layer for d in deps), default=-1)
        by_id[job_id] = node
        graph.nodes.append(node)
    filled: Counter[int] = Counter()
    for node in graph.nodes:
        node.row = filled[node.layer]
        filled[node.layer] += 1
    return graph
