"""Acceptance: SQLite as a small production site runs it — several worker processes, one file.

The suite's SQLite runs in Django's default (deferred) transaction mode: a transaction that reads,
then writes, fails at once with "database is locked" if another connection committed between its
first read and its first write (its snapshot cannot move forward, so the busy timeout never
applies). The library's own transactions must not do that (rules 21 (sqlite-begins-as-writer) and
22 (sqlite-actor-read-outside)); what it cannot do for a caller's own transaction, the system check
(django_ultjobs.W010) tells the site to fix with ``OPTIONS["transaction_mode"] = "IMMEDIATE"``, and
the last test holds that the fix is enough.

"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from django.contrib.auth import get_user_model
from django.db import connections, transaction
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from django_ultjobs.checks import check_settings
from django_ultjobs.models import Job
from tests.conftest import WorkerProcesses, wait_until
from tests.stepsapp.jobs import atomic_read_then_write
from tests.testapp.jobs import noop
from tests.testapp.models import RunLog

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True, databases=["default"]),
]

ALIAS = "default"
FLAGS = ("--threads", "8", "--poll-interval", "0.02", "--visibility-timeout", "30",
         "--heartbeat-interval", "5")
#: Concurrent clients in the web tests, and requests (or enqueues) each.
CLIENTS = 8
PER_CLIENT = 40


# -- a view that enqueues as the first write of its transaction -----------------------------------


@csrf_exempt
def enqueue_in_atomic(request: HttpRequest) -> HttpResponse:
    """Enqueue a job as the first statement of the view's own transaction."""
    with transaction.atomic():
        queued = noop.enqueue()
    return HttpResponse(str(queued.id))


urlpatterns = [path("enqueue/", enqueue_in_atomic)]


# -- helpers ---------------------------------------------------------------------------------------


def start_workers(procs: WorkerProcesses, count: int, env: dict[str, str] | None = None) -> None:
    for _ in range(count):
        procs.start(ALIAS, *FLAGS, env=env)


def wait_all_finished(procs: WorkerProcesses, total: int) -> None:
    def finished() -> bool:
        dead = [p.returncode for p in procs.procs if p.poll() is not None]
        assert not dead, f"a worker exited ({dead}):\n{procs.logs()[-4000:]}"
        return Job.objects.using(ALIAS).filter(
            status__in=("succeeded", "failed")).count() >= total

    wait_until(finished, timeout=180, interval=0.2, message=f"{total} jobs to finish")


def failed_jobs() -> Counter[str]:
    """The failed jobs' errors (last line), counted."""
    return Counter(
        (error.strip().splitlines() or [""])[-1]
        for error in Job.objects.using(ALIAS).filter(status="failed")
        .values_list("last_error", flat=True)
    )


def in_threads(count: int, body: Callable[[int], None]) -> list[BaseException]:
    """Run ``body(i)`` on ``count`` threads at once; return what they raised."""
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(count)

    def target(i: int) -> None:
        try:
            start.wait()
            body(i)
        except BaseException as exc:  # counted by the test
            with lock:
                errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return errors


def count_each(body: Callable[[], None], times: int, failures: list[BaseException],
               lock: threading.Lock) -> None:
    """Call ``body`` ``times`` times, keeping each exception (a failed enqueue) and going on."""
    for _ in range(times):
        try:
            body()
        except Exception as exc:  # counted by the test
            with lock:
                failures.append(exc)


@contextmanager
def sqlite_transaction_mode(monkeypatch: pytest.MonkeyPatch, mode: str) -> Iterator[None]:
    """Run the block with ``OPTIONS["transaction_mode"] = mode`` on every thread's connection.

    Every thread's connection shares one settings dict, and reads the mode from it when it
    connects: the test's own connection is closed on the way in and out."""
    options = connections[ALIAS].settings_dict["OPTIONS"]
    with monkeypatch.context() as patch:
        patch.setitem(options, "transaction_mode", mode)
        connections[ALIAS].close()
        try:
            yield
        finally:
            connections[ALIAS].close()
    connections[ALIAS].close()


# -- 1. atomic steps whose function reads first ---------------------------------------------------


def test_atomic_steps_that_read_then_write_all_succeed_under_deferred_mode(
        worker_processes: WorkerProcesses) -> None:
    # rule 21 (sqlite-begins-as-writer): 2 worker processes x 8 threads, 300 jobs of one attempt
    # each, every one an atomic step that counts rows and then inserts one. Begun deferred, most of
    # them failed.
    assert "transaction_mode" not in connections[ALIAS].settings_dict["OPTIONS"]
    total = 300
    atomic_read_then_write.bulk_enqueue([()] * total)
    start_workers(worker_processes, 2)
    wait_all_finished(worker_processes, total)
    failed = failed_jobs()
    print(f"atomic read-then-write steps: {sum(failed.values())} of {total} failed {failed}")
    assert not failed, failed
    assert Job.objects.using(ALIAS).filter(status="succeeded").count() == total
    assert RunLog.objects.using(ALIAS).filter(label="fn:atomic").count() == total


# -- 2. logged-in enqueues through EnqueuedByMiddleware ------------------------------------------


@override_settings(ROOT_URLCONF=__name__)
def test_logged_in_enqueues_through_the_middleware_all_succeed_under_deferred_mode(
        worker_processes: WorkerProcesses) -> None:
    # rule 22 (sqlite-actor-read-outside): 8 logged-in clients at once, each enqueueing as the first
    # write of its view's atomic(), while 2 worker processes drain the jobs. The user was looked up
    # inside that transaction, just before the insert: most requests failed.
    users = [get_user_model().objects.create_user(f"shopper{i}", password="x")
             for i in range(CLIENTS)]
    clients = []
    for user in users:
        client = Client()
        client.force_login(user)
        clients.append(client)
    connections[ALIAS].close()
    start_workers(worker_processes, 2)
    failures: list[BaseException] = []
    lock = threading.Lock()

    def post(i: int) -> None:
        def one() -> None:
            response = clients[i].post("/enqueue/")
            assert response.status_code == 200, response.status_code

        count_each(one, PER_CLIENT, failures, lock)

    assert in_threads(CLIENTS, post) == []
    total = CLIENTS * PER_CLIENT
    print(f"logged-in enqueues: {len(failures)} of {total} failed "
          f"{Counter(str(e) for e in failures)}")
    assert not failures, Counter(str(e) for e in failures)
    wait_all_finished(worker_processes, total)
    by_actor = Counter(Job.objects.using(ALIAS).values_list("enqueued_by", flat=True))
    assert by_actor == {f"user:shopper{i}": PER_CLIENT for i in range(CLIENTS)}
    assert not failed_jobs()


# -- 3. a caller's atomic() that reads before it enqueues -----------------------------------------


def test_a_callers_read_then_enqueue_needs_immediate_mode_and_the_check_says_so(
        worker_processes: WorkerProcesses, monkeypatch: pytest.MonkeyPatch) -> None:
    # rule 21 (sqlite-begins-as-writer), the caller's part: the library cannot change how a
    # transaction it did not open began. Under the suite's deferred mode the check warns; with the
    # fix its hint gives, the check is silent and none of the enqueues fails, with 2 worker
    # processes writing meanwhile.
    assert "django_ultjobs.W010" in {m.id for m in check_settings()}
    start_workers(worker_processes, 2, env={"ULTJOBS_TEST_SQLITE_TRANSACTION_MODE": "IMMEDIATE"})

    def read_then_enqueue() -> None:
        with transaction.atomic():
            RunLog.objects.filter(label="never").exists()
            noop.enqueue()

    deferred = run_enqueuers(read_then_enqueue)
    print(f"caller's read-then-enqueue, deferred: {len(deferred)} of {CLIENTS * PER_CLIENT} "
          f"failed")
    with sqlite_transaction_mode(monkeypatch, "IMMEDIATE"):
        assert {m.id for m in check_settings()} & {"django_ultjobs.W010",
                                                   "django_ultjobs.W011"} == set()
        immediate = run_enqueuers(read_then_enqueue)
    print(f"caller's read-then-enqueue, immediate: {len(immediate)} of {CLIENTS * PER_CLIENT} "
          f"failed")
    assert not immediate, Counter(str(e) for e in immediate)
    wait_all_finished(worker_processes, Job.objects.using(ALIAS).count())
    assert not failed_jobs()


def run_enqueuers(body: Callable[[], None]) -> list[BaseException]:
    """``PER_CLIENT`` calls of ``body`` on each of ``CLIENTS`` threads; the failed calls."""
    failures: list[BaseException] = []
    lock = threading.Lock()
    assert in_threads(CLIENTS, lambda i: count_each(body, PER_CLIENT, failures, lock)) == []
    return failures
