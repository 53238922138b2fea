"""Dependencies on both engines (rules 110 (released-in-settle) to 115 (group-cancel)): a dependent
is released or cancelled in the
transaction that settles its last dependency, fenced on that settle's claim token."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from django.db import connections, transaction

from django_ultjobs import Batch, Workflow, WorkflowError, chain
from django_ultjobs.jobs import waiting
from django_ultjobs.models import Job
from django_ultjobs.operations import cancel_jobs, retry_jobs
from django_ultjobs.store import ClaimedJob, JobStore
from django_ultjobs.testing import run_jobs
from tests.doubles import FakeClock
from tests.testapp.jobs import add, wf_gather, wf_step

from .helpers import claim, row, settlement

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


@pytest.fixture
def clock() -> FakeClock:
    """The store's clock a minute ahead of the database's, so the jobs the public API enqueues
    (on the database's clock) are due for the clocked claims."""
    ahead = FakeClock()
    ahead.advance(60)
    return ahead


def _claimed(store: JobStore, worker: str = "w1", **kw: object) -> dict[int, ClaimedJob]:
    return {job.id: job for job in claim(store, worker, limit=50, **kw)}  # type: ignore[arg-type]


def _status(alias: str, *ids: int) -> list[str]:
    return [row(alias, i).status for i in ids]


def _failed(job: ClaimedJob):  # type: ignore[no-untyped-def]
    return settlement(job, "failed", outcome="failed", error="boom")


def _diamond() -> tuple[Workflow, list]:  # type: ignore[type-arg]
    wf = Workflow(name="close-month")
    a = wf.add(wf_step.call("a"))
    b = wf.add(wf_step.call("b"))
    c = wf.add(wf_step.call("c"), after=[a, b])
    return wf, [a, b, c]


# -- enqueue: rule 110 (released-in-settle) --------------------------------------------------------


def test_a_waiting_node_is_pending_and_never_claimed(alias: str, cstore: JobStore) -> None:
    # rule 110 (released-in-settle)
    wf, _ = _diamond()
    run = wf.enqueue()
    a, b, c = run.job_ids
    assert _status(alias, a, b, c) == ["queued", "queued", "pending"]
    assert set(_claimed(cstore)) == {a, b}
    waiting = row(alias, c)
    assert (waiting.deps_total, waiting.deps_done, waiting.depends_when) == (2, 0, "succeeded")
    assert waiting.workflow_id == run.id and row(alias, a).has_dependents
    assert (waiting.depends_on, row(alias, a).dependents) == ([a, b], [c])


def test_a_workflow_rolled_back_leaves_no_row(alias: str) -> None:
    # rule 110 (released-in-settle): every row in the caller's transaction
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        _diamond()[0].enqueue()
        raise RuntimeError("rolled back")
    assert not Job.objects.using(alias).exists()


def test_bad_graphs_are_refused_by_name_before_any_sql(alias: str) -> None:
    # rule 118 (bad-graph-refused), as rule 16 (bad-input-refused): by name, nothing written
    wf = Workflow()
    other = Workflow().add(wf_step.call("x"))
    with pytest.raises(WorkflowError, match=r"expected a job's \.call\(\.\.\.\), got 42"):
        wf.add(42)  # type: ignore[arg-type]
    with pytest.raises(WorkflowError, match=r"got the job \S*wf_step itself; pass a call of it, "
                                            r"with its arguments: wf_step\.call\(\.\.\.\)"):
        wf.add(wf_step)  # type: ignore[arg-type]
    with pytest.raises(WorkflowError, match=r"got job 812, enqueued already; pass a call"):
        Batch(on_success=Job(pk=812, name=wf_step.name))  # type: ignore[arg-type]
    with pytest.raises(WorkflowError, match="when= must be one of succeeded, failed, finished"):
        wf.add(wf_step.call("a"), when="done")
    with pytest.raises(WorkflowError, match="after= takes nodes this workflow"):
        wf.add(wf_step.call("a"), after=[other])
    a = wf.add(wf_step.call("a"))
    with pytest.raises(WorkflowError, match="names a node twice"):
        wf.add(wf_step.call("b"), after=[a, a])
    with pytest.raises(WorkflowError, match="unique key"):
        wf.add(wf_step.using(unique_key="k").call("a"))
    with pytest.raises(WorkflowError, match="no job was added"):
        Workflow().enqueue()
    assert not Job.objects.using(alias).exists()


# -- release on settle: rules 110 (released-in-settle) to 112 (impossible-condition-cancels) -------


def test_the_settle_of_the_last_dependency_releases_the_dependent(alias: str,
                                                                   cstore: JobStore) -> None:
    # rule 110 (released-in-settle)
    run = _diamond()[0].enqueue()
    a, b, c = run.job_ids
    claimed = _claimed(cstore)
    assert cstore.settle([settlement(claimed[a])], "w1") == {a}
    assert row(alias, c).status == "pending" and row(alias, c).deps_done == 1
    assert cstore.settle([settlement(claimed[b])], "w1") == {b}
    assert row(alias, c).status == "queued"
    assert set(_claimed(cstore)) == {c}


def test_both_dependencies_settled_in_one_batch_release_once(alias: str,
                                                              cstore: JobStore) -> None:
    # rule 110 (released-in-settle); rule 113 (constant-bookkeeping): one row per dependent per
    # settle batch
    run = _diamond()[0].enqueue()
    a, b, c = run.job_ids
    claimed = _claimed(cstore)
    assert cstore.settle([settlement(claimed[a]), settlement(claimed[b])], "w1") == {a, b}
    released = row(alias, c)
    assert (released.status, released.deps_done, released.deps_failed) == ("queued", 2, 0)


def test_a_retry_is_not_a_finish(alias: str, cstore: JobStore) -> None:
    # rule 111 (finished-for-good): a run that will be retried is not finished
    run = _diamond()[0].enqueue()
    a, _, c = run.job_ids
    claimed = _claimed(cstore)
    retried = settlement(claimed[a], "queued", outcome="retrying", error="again", delay=5.0)
    assert cstore.settle([retried], "w1") == {a}
    assert (row(alias, c).status, row(alias, c).deps_done) == ("pending", 0)


def test_a_stale_settle_releases_nothing(alias: str, cstore: JobStore, clock: FakeClock) -> None:
    # rules 4 (fenced-settle) and 110 (released-in-settle): a fenced-out settle finishes nothing,
    # so it releases nothing
    wf = Workflow()
    a = wf.add(wf_step.call("a"))
    wf.add(wf_step.call("b"), after=[a])
    first, second = wf.enqueue().job_ids
    (stale,) = claim(cstore, "w1", timeout=10)
    clock.advance(10)
    (current,) = claim(cstore, "w2", timeout=10)
    assert cstore.settle([_failed(stale)], "w1") == set()
    assert cstore.settle([settlement(stale)], "w1") == set()
    dependent = row(alias, second)
    assert (dependent.status, dependent.deps_done, dependent.deps_failed) == ("pending", 0, 0)
    assert cstore.settle([settlement(current)], "w2") == {first}
    assert row(alias, second).status == "queued"


def test_a_failure_cancels_the_dependents_naming_it_and_theirs(alias: str,
                                                                cstore: JobStore) -> None:
    # rule 112 (impossible-condition-cancels): cancelled with a reason naming the dependency,
    # cascading in one transaction
    wf = Workflow()
    a = wf.add(wf_step.call("a"))
    b = wf.add(wf_step.call("b"), after=[a])
    c = wf.add(wf_step.call("c"), after=[b])
    d = wf.add(wf_step.call("d"), after=[b], when="failed")
    wf.add(wf_step.call("e"), after=[c, d], when="finished")
    ia, ib, ic, id_, ie = wf.enqueue().job_ids
    (claimed,) = claim(cstore)
    assert cstore.settle([_failed(claimed)], "w1") == {ia}
    assert _status(alias, ib, ic, id_, ie) == ["cancelled", "cancelled", "queued", "pending"]
    assert row(alias, ib).cancel_reason == f"dependency {ia} failed"
    assert row(alias, ib).cancelled_by == ia
    assert row(alias, ic).cancel_reason == f"dependency {ib} was cancelled"
    assert row(alias, ie).deps_done == 1


def test_when_failed_is_cancelled_once_every_dependency_succeeded(alias: str,
                                                                  cstore: JobStore) -> None:
    # rule 112 (impossible-condition-cancels)
    wf = Workflow()
    a = wf.add(wf_step.call("a"))
    wf.add(wf_step.call("alert"), after=[a], when="failed")
    wf.add(wf_step.call("always"), after=[a], when="finished")
    _, alert, always = wf.enqueue().job_ids
    (claimed,) = claim(cstore)
    cstore.settle([settlement(claimed)], "w1")
    assert _status(alias, alert, always) == ["cancelled", "queued"]
    assert row(alias, alert).cancel_reason == "every dependency succeeded"


def test_a_chain_runs_in_order_through_the_worker(alias: str, tmp_path: Path) -> None:
    # rule 110 (released-in-settle), through the worker's own claim, executor and settle (run_jobs)
    path = str(tmp_path / "order")
    run = chain(*(wf_step.call(label, path=path) for label in "xyz"),
                wf_gather.call(path=path)).enqueue()
    outcomes = run_jobs(database=alias)
    assert [o.outcome for o in outcomes] == ["succeeded"] * 4
    assert Path(path).read_text().split() == ["x", "y", "z", "gather"]
    assert run.jobs()[-1].result == {"results": ["z"], "batch": None}


def test_dependency_results_come_in_the_order_of_after(alias: str) -> None:
    wf = Workflow()
    a = wf.add(add.call(1, 1))
    b = wf.add(add.call(2, 2))
    wf.add(wf_gather.call(), after=[b, a])
    run = wf.enqueue()
    run_jobs(database=alias)
    assert run.jobs()[-1].result == {"results": [4, 2], "batch": None}


# -- retry and cancel: rules 114 (retry-takes-finish-back) to 115 (group-cancel) -------------------


def test_a_retried_dependency_brings_its_cancelled_dependents_back(alias: str,
                                                                   cstore: JobStore) -> None:
    # rule 114 (retry-takes-finish-back)
    wf = Workflow()
    a = wf.add(wf_step.call("a"))
    b = wf.add(wf_step.call("b"), after=[a])
    wf.add(wf_step.call("c"), after=[b])
    alert = wf.add(wf_step.call("alert"), after=[a], when="failed")
    ia, ib, ic, ialert = wf.enqueue().job_ids
    (claimed,) = claim(cstore)
    cstore.settle([_failed(claimed)], "w1")
    assert _status(alias, ib, ic, ialert) == ["cancelled", "cancelled", "queued"]
    assert retry_jobs([ia], using=alias).retried_ids == (ia,)
    assert _status(alias, ia, ib, ic, ialert) == ["queued", "pending", "pending", "queued"]
    assert (row(alias, ib).deps_done, row(alias, ib).deps_failed) == (0, 0)
    assert row(alias, ib).cancel_reason == "" and row(alias, ib).cancelled_by is None
    assert (row(alias, ialert).deps_done, row(alias, ialert).deps_failed) == (0, 0)
    claimed = _claimed(cstore)
    cstore.settle([settlement(claimed[ia]), settlement(claimed[ialert])], "w1")
    assert _status(alias, ib, ic) == ["queued", "pending"]
    assert alert  # the alert ran once, for the first failure; the retry leaves it as it is


def test_a_dependent_cancelled_by_two_failures_comes_back_after_both_retries(
        alias: str, cstore: JobStore) -> None:
    # rule 114 (retry-takes-finish-back): the counters stay exact whatever the dependent's status
    wf, _ = _diamond()
    ia, ib, ic = wf.enqueue().job_ids
    claimed = _claimed(cstore)
    cstore.settle([_failed(claimed[ia])], "w1")
    cstore.settle([_failed(claimed[ib])], "w1")
    assert (row(alias, ic).status, row(alias, ic).deps_failed) == ("cancelled", 2)
    retry_jobs([ia], using=alias)
    assert (row(alias, ic).status, row(alias, ic).deps_failed) == ("cancelled", 1)
    retry_jobs([ib], using=alias)
    assert (row(alias, ic).status, row(alias, ic).deps_done) == ("pending", 0)


def test_cancelling_a_workflow_fires_only_what_failed_or_finished_asks_for(
        alias: str, cstore: JobStore) -> None:
    # rule 115 (group-cancel)
    wf = Workflow()
    a = wf.add(wf_step.call("a"))
    b = wf.add(wf_step.call("b"))
    nxt = wf.add(wf_step.call("next"), after=[a, b])
    wf.add(wf_step.call("cleanup"), after=[a, b], when="finished")
    wf.add(wf_step.call("alert"), after=[nxt], when="failed")
    run = wf.enqueue()
    ia, ib, inext, icleanup, ialert = run.job_ids
    claim(cstore, limit=1)  # a is running: asked to stop, its worker settles it
    result = cancel_jobs(run, using=alias, reason="month reopened")
    assert result.cancelled_ids == (ib,) and result.requested_ids == (ia,)
    assert _status(alias, inext, icleanup, ialert) == ["cancelled", "pending", "queued"]
    assert row(alias, inext).cancel_reason == f"dependency {ib} was cancelled"


def test_cancelling_a_pending_node_cascades(alias: str) -> None:
    # rules 112 (impossible-condition-cancels) and 115 (group-cancel): a cancel is a finish like a
    # settle's
    wf = Workflow()
    a = wf.add(wf_step.call("a"))
    b = wf.add(wf_step.call("b"), after=[a])
    wf.add(wf_step.call("c"), after=[b])
    ia, ib, ic = wf.enqueue().job_ids
    assert cancel_jobs([ib], using=alias).cancelled_ids == (ib,)
    assert _status(alias, ia, ib, ic) == ["queued", "cancelled", "cancelled"]


# -- batches: rules 110 (released-in-settle) to 113 (constant-bookkeeping) -------------------------


def test_a_batch_collects_every_enqueue_of_its_block(alias: str) -> None:
    # rule 117 (batch-members)
    with Batch(on_success=wf_step.call("report"), description="nightly") as batch:
        one = wf_step.enqueue("one")
        many = wf_step.bulk_enqueue([("two",), ("three",)])
        other = wf_step.using(queue="other", priority=3).enqueue("four")
    assert batch.member_ids == [one.pk, *many, other.pk]
    members = Job.objects.using(alias).filter(batch_id=batch.id)
    assert sorted(members.values_list("id", flat=True)) == sorted(batch.member_ids)
    callback = row(alias, batch.callback_ids["on_success"])
    assert (callback.status, callback.deps_total, callback.callback_of_id) == (
        "pending", 4, batch.id)
    assert batch.row is not None and batch.row.total == 4


def test_a_keyed_enqueue_answered_by_its_holder_is_no_member(alias: str) -> None:
    # rule 117 (batch-members)
    held = wf_step.using(unique_key="k").enqueue("held")
    with Batch(on_finish=wf_step.call("done")) as batch:
        again = wf_step.using(unique_key="k").enqueue("again")
        new = wf_step.enqueue("new")
    assert again.pk == held.pk and batch.member_ids == [new.pk]


def test_a_batch_whose_block_raises_writes_nothing(alias: str) -> None:
    # rule 117 (batch-members)
    with pytest.raises(RuntimeError), Batch(on_success=wf_step.call("report")):
        wf_step.enqueue("one")
        raise RuntimeError("import failed")
    assert not Job.objects.using(alias).exists()


def test_batch_callbacks_fire_by_outcome(alias: str) -> None:
    # rules 110 (released-in-settle) to 112 (impossible-condition-cancels) for a batch: on_success
    # cancelled by the failure, naming it
    with Batch(on_success=wf_step.call("ok"), on_failure=wf_step.call("alert"),
               on_finish=wf_gather.call()) as batch:
        ids = wf_step.bulk_enqueue([("m1",), ("m2", True), ("m3",)])
    ok, alert, finish = (batch.callback_ids[n] for n in ("on_success", "on_failure", "on_finish"))
    outcomes = run_jobs(database=alias)
    assert [o.job_id for o in outcomes[:3]] == ids
    assert row(alias, ok).status == "cancelled"
    assert row(alias, ok).cancel_reason == f"dependency {ids[1]} failed"
    assert _status(alias, alert, finish) == ["succeeded", "succeeded"]
    assert row(alias, finish).result == {"results": ["m1", None, "m3"], "batch": batch.id}


def test_an_empty_batch_runs_on_success_and_on_finish(alias: str) -> None:
    # rule 117 (batch-members)
    with Batch(on_success=wf_step.call("ok"), on_failure=wf_step.call("alert"),
               on_finish=wf_step.call("done")) as batch:
        pass
    assert set(batch.callback_ids) == {"on_success", "on_finish"}
    assert _status(alias, *batch.callback_ids.values()) == ["queued", "queued"]


def test_a_retried_member_brings_on_success_back(alias: str, cstore: JobStore) -> None:
    # rule 114 (retry-takes-finish-back)
    with Batch(on_success=wf_step.call("ok")) as batch:
        (member,) = wf_step.bulk_enqueue([("m",)])
    (claimed,) = claim(cstore)
    cstore.settle([_failed(claimed)], "w1")
    ok = batch.callback_ids["on_success"]
    assert row(alias, ok).status == "cancelled"
    retry_jobs([member], using=alias)
    assert row(alias, ok).status == "pending"
    (claimed,) = claim(cstore)
    cstore.settle([settlement(claimed)], "w1")
    assert row(alias, ok).status == "queued"


def test_cancelling_a_batch_cancels_its_members_not_its_callbacks(alias: str) -> None:
    # rule 115 (group-cancel)
    with Batch(on_success=wf_step.call("ok"), on_finish=wf_step.call("done")) as batch:
        ids = wf_step.bulk_enqueue([("m1",), ("m2",)])
    assert cancel_jobs(batch, using=alias).cancelled_ids == tuple(ids)
    ok, done = batch.callback_ids["on_success"], batch.callback_ids["on_finish"]
    assert _status(alias, ok, done) == ["cancelled", "queued"]


def test_batches_do_not_nest(alias: str) -> None:
    # rule 117 (batch-members)
    with pytest.raises(WorkflowError, match="do not nest"), Batch(), Batch():
        pass


# -- waiting: rule 116 (wait-for-result) -----------------------------------------------------------


def test_wait_raises_timeout_error_and_refuses_a_transaction(alias: str) -> None:
    # rule 116 (wait-for-result)
    job = wf_step.enqueue("never run")
    with pytest.raises(TimeoutError, match=f"job {job.pk} did not finish in time"):
        job.wait(timeout=0.2)
    with transaction.atomic(using=alias), pytest.raises(Exception, match="inside a transaction"):
        job.wait(timeout=0.2)
    assert not connections[alias].in_atomic_block


def test_wait_returns_the_finished_row(alias: str) -> None:
    # rule 116 (wait-for-result)
    job = wf_step.enqueue("done")
    run_jobs(database=alias)
    assert job.wait(timeout=5).result == "done"
    with Batch(on_finish=wf_step.call("cb")) as batch:
        wf_step.enqueue("m")
    run = chain(wf_step.call("x"), wf_step.call("y")).enqueue()
    run_jobs(database=alias)
    assert batch.wait(timeout=5).pk == batch.id
    assert [j.status for j in run.wait(timeout=5)] == ["succeeded", "succeeded"]


def test_wait_wakes_on_the_settles_commit_not_on_a_poll(alias: str, cstore: JobStore,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # rule 116 (wait-for-result): PostgreSQL wakes on the notify (its safety-net look pushed to 30
    # s here), SQLite
    # on its 50 ms poll
    monkeypatch.setattr(waiting, "RECHECK", 30.0)
    job = wf_step.enqueue("w")
    (claimed,) = claim(cstore)
    woke: dict[str, object] = {}

    def wait() -> None:
        try:
            woke["job"] = job.wait(timeout=20)
            woke["at"] = time.monotonic()
        finally:
            connections.close_all()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.5)  # the waiter is listening and has looked once
    settled_at = time.monotonic()
    assert cstore.settle([settlement(claimed, result_json='"w"')], "w1") == {job.pk}
    waiter.join(20)
    done = woke["job"]
    assert isinstance(done, Job) and (done.status, done.result) == ("succeeded", "w")
    assert float(woke["at"]) - settled_at < 0.25  # type: ignore[arg-type]


def _settle_at_once(store: JobStore, runs: list[ClaimedJob]) -> None:
    """Settle each of ``runs`` from a thread (and connection) of its own, all at one instant."""
    barrier = threading.Barrier(len(runs))
    errors: list[BaseException] = []

    def settle(run: ClaimedJob) -> None:
        try:
            barrier.wait(5)
            store.settle([settlement(run)], f"w{run.id}")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=settle, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors


def test_the_last_two_dependencies_settled_at_once_release_once(alias: str,
                                                                cstore: JobStore) -> None:
    # rule 110 (released-in-settle): two workers settle a dependent's last two dependencies at
    # the same instant, each on its own connection; the dependent is judged under its row lock
    # on the latest counters, so neither settle misses the other's finish
    for _ in range(5):
        a, b, c = _diamond()[0].enqueue().job_ids
        claimed = _claimed(cstore)
        _settle_at_once(cstore, [claimed[a], claimed[b]])
        released = row(alias, c)
        assert (released.status, released.deps_done) == ("queued", 2)
        assert cstore.settle([settlement(_claimed(cstore)[c])], "w1") == {c}


def test_wait_async_is_the_async_twin(alias: str) -> None:
    # rule 116 (wait-for-result)
    job = wf_step.enqueue("async")
    run_jobs(database=alias)
    done = asyncio.run(job.wait_async(timeout=5))
    assert (done.pk, done.result) == (job.pk, "async")
    pending = wf_step.enqueue("never run")
    with pytest.raises(TimeoutError):
        asyncio.run(pending.wait_async(timeout=0.2))
