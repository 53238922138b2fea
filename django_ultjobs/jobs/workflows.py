"""Workflows: jobs that run once the jobs they depend on finished (docs/workflows.md).

```python
wf = Workflow(name="close-month")
a = wf.add(fetch_sales.call("north", month))
b = wf.add(fetch_sales.call("south", month))
c = wf.add(merge.call(month), after=[a, b])          # once a and b succeeded
d = wf.add(alert.call(month), after=[c], when="failed")
run = wf.enqueue()                                   # every row in the caller's transaction
chain(export.call(7), compress.call(7), upload.call(7)).enqueue()
```

A node may depend only on nodes added before it, so a graph is acyclic by construction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from ..exceptions import WorkflowError
from ..models import UNFINISHED_STATUSES, Job
from ..models import Workflow as WorkflowRow
from ..store import get_store
from ..store.dependencies import CONDITIONS, GraphRow
from . import enqueue, waiting
from .spec import JobCall, JobSpec
from .unique import key_of


@dataclass(frozen=True, eq=False)
class Node:
    """A job added to a workflow (``wf.add``), to name in a later node's ``after=``."""

    workflow: Workflow
    index: int
    call: JobCall
    after: tuple[Node, ...]
    when: str

    def __repr__(self) -> str:
        return f"<Node {self.index} {self.call.spec.name}>"


def checked_call(call: object, where: str) -> JobCall:
    """``call`` if it is a job's ``.call(...)`` that may wait for others; else refused by name."""
    if isinstance(call, JobSpec):
        raise WorkflowError(f"{where}: got the job {call.name} itself; pass a call of it, "
                            f"with its arguments: {call.name.rpartition('.')[2]}.call(...)")
    if isinstance(call, Job):
        raise WorkflowError(f"{where}: got job {call.pk}, enqueued already; pass a call of "
                            f"its job to enqueue a new one: .call(...), not .enqueue(...)")
    if not isinstance(call, JobCall):
        raise WorkflowError(f"{where}: expected a job's .call(...), got {_short(call)}")
    if key_of(call.spec, call.args, call.kwargs) is not None:
        raise WorkflowError(
            f"{where}: {call.spec.name} holds a unique key; a job that may answer with another "
            f"job already enqueued cannot be part of a workflow or be a batch's callback")
    return call


def _named(call: object) -> str:
    """How an error message names ``call``: its job's name, or what it is."""
    if isinstance(call, JobCall):
        return call.spec.name
    return call.name if isinstance(call, JobSpec) else _short(call)


def _short(value: object) -> str:
    """``value``'s repr, cut to fit a one-line message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def checked_when(when: object, where: str) -> str:
    if when not in CONDITIONS:
        raise WorkflowError(f"{where}: when= must be one of {', '.join(CONDITIONS)}; "
                            f"got {when!r}")
    return str(when)


class Workflow:
    """A graph of job calls, enqueued together by ``enqueue()``."""

    def __init__(self, name: str = "") -> None:
        if not isinstance(name, str) or len(name) > 200:
            raise WorkflowError(f"Workflow(): name must be text of at most 200 characters, "
                                f"not {name!r}")
        self.name = name
        self.nodes: list[Node] = []
        self.run: WorkflowRun | None = None

    def add(self, call: JobCall, *, after: Iterable[Node] = (),
            when: str = "succeeded") -> Node:
        """Add ``call``, to run once every node of ``after`` finished for good and ``when``
        holds: "succeeded" (all of them succeeded), "failed" (all finished, one at least did
        not succeed) or "finished" (all finished). Return its node."""
        where = f"Workflow.add({_named(call)})"
        if self.run is not None:
            raise WorkflowError(f"{where}: this workflow was enqueued already")
        call = checked_call(call, where)
        when = checked_when(when, where)
        deps = tuple(after) if not isinstance(after, Node) else (after,)
        if when != "succeeded" and not deps:
            # Without dependencies a node runs at once: an alert meant for a failure would.
            raise WorkflowError(f"{where}: when={when!r} needs after=, the nodes whose "
                                f"outcome it waits for; a node with none runs at once")
        for dep in deps:
            if not isinstance(dep, Node) or dep.workflow is not self:
                raise WorkflowError(f"{where}: after= takes nodes this workflow's add() "
                                    f"returned; got {dep!r}")
        if len(set(map(id, deps))) != len(deps):
            raise WorkflowError(f"{where}: after= names a node twice")
        node = Node(self, len(self.nodes), call, deps, when)
        self.nodes.append(node)
        return node

    def enqueue(self) -> WorkflowRun:
        """Enqueue every node in one transaction (the caller's, if one is open); the nodes that
        wait are ``pending`` until their dependencies release them
        (rule 110 (released-in-settle))."""
        if self.run is not None:
            raise WorkflowError("Workflow.enqueue(): this workflow was enqueued already")
        if not self.nodes:
            raise WorkflowError("Workflow.enqueue(): no job was added")
        store = get_store()
        with transaction.atomic(using=store.alias), enqueue.members_into(None):
            row = WorkflowRow.objects.using(store.alias).create(name=self.name)
            ids = enqueue.bulk_enqueue_graph(
                (node.call for node in self.nodes),
                lambda ids: node_graph_rows(self.nodes, ids, row.pk))
        self.run = WorkflowRun(row, ids, store.alias)
        return self.run


def node_graph_rows(nodes: Sequence[Node], ids: Sequence[int], workflow_id: int) -> list[GraphRow]:
    """What each of ``nodes`` becomes once its job has the id ``ids[node.index]``: the nodes
    with dependencies wait for them (pending), and each node knows its dependents."""
    dependents: dict[int, list[int]] = {}
    for node in nodes:
        for dep in node.after:
            dependents.setdefault(dep.index, []).append(ids[node.index])
    return [GraphRow(ids[n.index], pending=bool(n.after), total=len(n.after),
                      when=n.when if n.after else "", has_dependents=n.index in dependents,
                      workflow_id=workflow_id,
                      depends_on=[ids[d.index] for d in n.after] if n.after else None,
                      dependents=dependents.get(n.index))
            for n in nodes]


def chain(*calls: JobCall) -> Workflow:
    """A workflow in which each call runs once the one before it succeeded."""
    if not calls:
        raise WorkflowError("chain(): give it at least one job's .call(...)")
    wf = Workflow()
    previous: Node | None = None
    for call in calls:
        previous = wf.add(call, after=() if previous is None else (previous,))
    return wf


class WorkflowRun:
    """An enqueued workflow: its row, and its jobs' ids in the order they were added."""

    def __init__(self, row: WorkflowRow, job_ids: Sequence[int], alias: str) -> None:
        self.row = row
        self.id: int = row.pk
        self.job_ids = list(job_ids)
        self.alias = alias

    def job(self, node: Node) -> Job:
        """The job of ``node``, read now."""
        return Job.objects.using(self.alias).get(pk=self.job_ids[node.index])

    def jobs(self) -> list[Job]:
        """Every job of the workflow, read now, in the order they were added. Raises
        ``Job.DoesNotExist`` naming the first one gone (pruned, or deleted)."""
        found = Job.objects.using(self.alias).in_bulk(self.job_ids)
        gone = [i for i in self.job_ids if i not in found]
        if gone:
            raise Job.DoesNotExist(
                f"job {gone[0]} of workflow {self.id} does not exist"
                + (f" (nor {len(gone) - 1} more of its jobs)" if len(gone) > 1 else "")
                + ": pruned or deleted")
        return [found[i] for i in self.job_ids]

    def finished(self) -> bool:
        """Whether every job of the workflow finished for good."""
        return not Job.objects.using(self.alias).filter(
            workflow_id=self.id, status__in=UNFINISHED_STATUSES).exists()

    def wait(self, timeout: float | None = None) -> list[Job]:
        """Block until every job of the workflow finished for good; return them (``jobs()``).
        Raises ``TimeoutError`` past ``timeout`` seconds (rule 116 (wait-for-result))."""
        token = f"w{self.id}"
        return waiting.wait_until(self.alias, lambda: self.jobs() if self.finished() else None,
                                  lambda payload: payload == token, timeout,
                                  f"workflow {self.id}")

    async def wait_async(self, timeout: float | None = None) -> list[Job]:
        """``wait`` for async code."""
        result: list[Job] = await waiting.run_closing(self.wait)(timeout)
        return result


def dependency_results(job_id: int, alias: str) -> list[Any]:
    """The results of job ``job_id``'s dependencies, in the order given to ``after=`` (None for
    one that did not succeed)."""
    depends_on = Job.objects.using(alias).filter(pk=job_id).values_list(
        "depends_on", flat=True).first() or []
    results = dict(Job.objects.using(alias).filter(pk__in=depends_on)
                   .values_list("id", "result"))
    return [results.get(dep) for dep in depends_on]
