"""A paused queue, on both engines: no claim takes from it, all else as before
(rule 75 (paused-queue))."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from django_ultjobs.core.slot_keys import keyed_slot_key
from django_ultjobs.exceptions import OperationInputError
from django_ultjobs.models import Job, QueuePause
from django_ultjobs.operations import pause_queue, paused_queues, resume_queue
from django_ultjobs.store import JobStore

from .helpers import claim, enqueue, new_job, settlement

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


def _ids(jobs: list) -> list[int]:
    return sorted(j.id for j in jobs)


def test_a_paused_queue_is_not_claimed_and_the_others_are(cstore: JobStore) -> None:
    a, b = enqueue(cstore, new_job(queue="a"), new_job(queue="b"))
    assert pause_queue("a", using=cstore.alias) is True
    assert _ids(claim(cstore, queues=["a", "b"])) == [b]
    assert claim(cstore, queues=["a", "b"]) == []
    assert resume_queue("a", using=cstore.alias) is True
    assert _ids(claim(cstore, queues=["a", "b"])) == [a]


def test_a_paused_queue_is_not_claimed_by_the_capped_claim_either(cstore: JobStore) -> None:
    capped, other = enqueue(cstore, new_job("capped", queue="a"), new_job("other", queue="a"))
    pause_queue("a", using=cstore.alias)
    assert claim(cstore, queues=["a"], caps={"capped": 2}) == []
    resume_queue("a", using=cstore.alias)
    assert _ids(claim(cstore, queues=["a"], caps={"capped": 2})) == [capped, other]


def test_a_lapsed_run_of_a_paused_queue_waits_for_the_resume(cstore: JobStore) -> None:
    enqueue(cstore, new_job(queue="a"))
    first = claim(cstore, queues=["a"], timeout=0.0)
    assert len(first) == 1
    pause_queue("a", using=cstore.alias)
    assert claim(cstore, worker="w2", queues=["a"]) == []
    resume_queue("a", using=cstore.alias)
    assert _ids(claim(cstore, worker="w2", queues=["a"])) == _ids(first)


def test_enqueue_and_settle_still_work_in_a_paused_queue(cstore: JobStore) -> None:
    enqueue(cstore, new_job(queue="a"))
    running = claim(cstore, queues=["a"])
    pause_queue("a", using=cstore.alias)
    added = enqueue(cstore, new_job(queue="a"))
    assert Job.objects.using(cstore.alias).get(id=added[0]).status == "queued"
    assert cstore.settle([settlement(running[0])], "w1") == {running[0].id}
    assert Job.objects.using(cstore.alias).get(id=running[0].id).status == "succeeded"


def test_pause_and_resume_say_whether_they_changed_anything(cstore: JobStore) -> None:
    alias = cstore.alias
    assert pause_queue("a", reason="deploy", by="cli:ops", using=alias) is True
    assert pause_queue("a", reason="again", using=alias) is False
    kept = paused_queues(using=alias)["a"]
    assert (kept.reason, kept.paused_by) == ("deploy", "cli:ops")
    assert resume_queue("a", using=alias) is True
    assert resume_queue("a", using=alias) is False
    assert paused_queues(using=alias) == {}


@pytest.mark.parametrize("name", ["", "x" * 101, "a\x00b", "\ud800", None, 5])
def test_a_bad_queue_name_is_refused_before_any_sql(cstore: JobStore, name: object) -> None:
    with CaptureQueriesContext(connections[cstore.alias]) as queries:
        with pytest.raises(OperationInputError, match="queue name"):
            pause_queue(name, using=cstore.alias)  # type: ignore[arg-type]
        with pytest.raises(OperationInputError, match="queue name"):
            resume_queue(name, using=cstore.alias)  # type: ignore[arg-type]
    assert len(queries) == 0
    assert not QueuePause.objects.using(cstore.alias).exists()


def test_a_paused_queue_is_not_claimed_by_the_per_key_claim_either(cstore: JobStore) -> None:
    job = replace(new_job("export", queue="a"), concurrency_key=keyed_slot_key("export", "k"))
    [job_id] = enqueue(cstore, job)
    pause_queue("a", using=cstore.alias)

    def take() -> list:
        return cstore.claim(worker_id="w1", queues=["a"], limit=10, visibility_timeout=30.0,
                            caps={"export": 1}, keyed=["export"])

    assert take() == []
    resume_queue("a", using=cstore.alias)
    assert [j.id for j in take()] == [job_id]
