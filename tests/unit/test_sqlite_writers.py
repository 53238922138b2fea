"""SQLite writers: the store's ``write_transaction``, the middleware's actor, the system checks.

Under Django's default (deferred) SQLite transaction mode a transaction that reads, then writes,
fails with "database is locked" when another connection wrote in between.
Rule 21 (sqlite-begins-as-writer): the library's own such transactions begin as the writer;
rule 22 (sqlite-actor-read-outside): the request's actor is not read inside the view's transaction.
The multi-process proofs are in tests/acceptance/test_sqlite_production.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import DatabaseError, OperationalError, connections, transaction
from django.http import HttpRequest, JsonResponse
from django.test import Client, override_settings
from django.urls import path
from django.utils.functional import empty

from django_ultjobs.checks import check_settings
from django_ultjobs.models import Job
from django_ultjobs.store import get_store
from tests.testapp.jobs import noop
from tests.testapp.models import RunLog

SQLITE = "default"


@pytest.fixture
def other_writer() -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection to the test database that never waits for a lock."""
    conn = sqlite3.connect(connections[SQLITE].settings_dict["NAME"], timeout=0,
                           isolation_level=None)
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()


def _log(label: str, alias: str = SQLITE) -> None:
    RunLog.objects.using(alias).create(job_id=1, attempt=1, label=label, pid=0)


# -- write_transaction ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_write_transaction_commits_or_rolls_back_as_one(alias: str) -> None:
    # rule 21 (sqlite-begins-as-writer): on both engines it is an atomic() block first of all.
    store = get_store(alias)
    with store.write_transaction():
        _log("kept", alias)
    with pytest.raises(RuntimeError), store.write_transaction():
        _log("undone", alias)
        raise RuntimeError("boom")
    assert list(RunLog.objects.using(alias).values_list("label", flat=True)) == ["kept"]


@pytest.mark.django_db(transaction=True)
def test_write_transaction_holds_the_write_lock_before_its_first_statement(
        other_writer: sqlite3.Connection) -> None:
    # rule 21 (sqlite-begins-as-writer): begun as the writer under the project's deferred mode, so
    # nobody can write between its reads and its writes; savepoints and later transactions are
    # deferred again.
    conn = connections[SQLITE]
    assert conn.settings_dict["OPTIONS"].get("transaction_mode") is None
    conn.close()  # connecting reads the mode from the settings: the block must connect first
    with get_store(SQLITE).write_transaction():
        assert conn.transaction_mode is None
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other_writer.execute("BEGIN IMMEDIATE")
    assert conn.transaction_mode is None
    with transaction.atomic():
        other_writer.execute("BEGIN IMMEDIATE")  # a deferred BEGIN took no lock
        other_writer.execute("ROLLBACK")


@pytest.mark.django_db(transaction=True)
def test_write_transaction_that_cannot_begin_leaves_the_connection_as_it_was(
        other_writer: sqlite3.Connection) -> None:
    # rule 21 (sqlite-begins-as-writer): a busy timeout spent at BEGIN raises, and the project's
    # mode is back.
    conn = connections[SQLITE]
    conn.ensure_connection()
    conn.connection.execute("PRAGMA busy_timeout = 20")
    other_writer.execute("BEGIN IMMEDIATE")
    with pytest.raises(OperationalError, match="locked"), \
            get_store(SQLITE).write_transaction():
        pytest.fail("the block ran without the write lock")
    assert conn.transaction_mode is None and not conn.in_atomic_block
    other_writer.execute("ROLLBACK")
    conn.close()


@pytest.mark.django_db(transaction=True)
def test_write_transaction_inside_a_callers_atomic_is_a_savepoint(
        other_writer: sqlite3.Connection) -> None:
    # rule 21 (sqlite-begins-as-writer): the caller's transaction began as the caller's did
    # (deferred here, so it took no lock); the block is a savepoint of it, rolled back alone.
    with transaction.atomic():
        RunLog.objects.count()
        with get_store(SQLITE).write_transaction():
            other_writer.execute("BEGIN IMMEDIATE")
            other_writer.execute("ROLLBACK")
        with pytest.raises(RuntimeError), get_store(SQLITE).write_transaction():
            _log("undone")
            raise RuntimeError("boom")
        _log("kept")
    assert list(RunLog.objects.values_list("label", flat=True)) == ["kept"]


# -- EnqueuedByMiddleware -------------------------------------------------------------------------


def _enqueue(request: HttpRequest) -> JsonResponse:
    loaded = request.user._wrapped is not empty  # type: ignore[attr-defined]
    with transaction.atomic(using=get_store().alias):
        queued = noop.enqueue()
    return JsonResponse({"loaded_before_view": loaded, "job_id": queued.id})


def _nothing(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"loaded_before_view": request.user._wrapped is not empty})  # type: ignore[attr-defined]


urlpatterns = [path("enqueue/", _enqueue), path("nothing/", _nothing)]


def _logged_in(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.create_user(username))
    return client


@pytest.mark.django_db(databases="__all__")
@override_settings(ROOT_URLCONF=__name__)
def test_on_sqlite_a_session_users_actor_is_read_before_the_view(alias: str) -> None:
    # rule 22 (sqlite-actor-read-outside): on SQLite the user is looked up before the view's
    # transaction; on PostgreSQL only when a job is enqueued. Either way the job names the user.
    client = _logged_in("ada")
    response = client.post("/enqueue/").json()
    assert response["loaded_before_view"] is (alias == "default")
    assert Job.objects.using(alias).get(pk=response["job_id"]).enqueued_by == "user:ada"


@pytest.mark.django_db
@override_settings(ROOT_URLCONF=__name__)
def test_on_sqlite_begun_as_the_writer_the_actor_stays_lazy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # rule 22 (sqlite-actor-read-outside): an IMMEDIATE transaction has no window for a stale read,
    # so the lookup waits for the enqueue, as on PostgreSQL (the mode is read from the settings on
    # each request).
    client = _logged_in("linus")
    monkeypatch.setitem(connections[SQLITE].settings_dict["OPTIONS"], "transaction_mode",
                        "IMMEDIATE")
    response = client.post("/enqueue/").json()
    assert response["loaded_before_view"] is False
    assert Job.objects.get(pk=response["job_id"]).enqueued_by == "user:linus"


@pytest.mark.django_db(databases="__all__")
@override_settings(ROOT_URLCONF=__name__)
def test_a_request_without_a_session_pays_nothing(alias: str) -> None:
    # rule 22 (sqlite-actor-read-outside): no session cookie, nothing to read: the actor stays lazy
    # and is "anonymous".
    response = Client().post("/enqueue/").json()
    assert response["loaded_before_view"] is False
    assert Job.objects.using(alias).get(pk=response["job_id"]).enqueued_by == "anonymous"


@pytest.mark.django_db
@override_settings(ROOT_URLCONF=__name__)
def test_a_database_error_looking_up_the_user_is_left_to_the_view(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # rule 22 (sqlite-actor-read-outside): a view that never needs the user still answers when the
    # early lookup fails.
    client = _logged_in("grace")
    from django.contrib import auth

    real_get_user = auth.get_user
    calls: list[int] = []

    def failing_once(request: HttpRequest) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise DatabaseError("the session table is busy")
        return real_get_user(request)

    monkeypatch.setattr(auth, "get_user", failing_once)
    assert client.get("/nothing/").json() == {"loaded_before_view": False}
    job_id = client.post("/enqueue/").json()["job_id"]
    assert Job.objects.get(pk=job_id).enqueued_by == "user:grace"


# -- the system checks ----------------------------------------------------------------------------


SQLiteOptions = Callable[..., None]


@pytest.fixture
def sqlite_options(monkeypatch: pytest.MonkeyPatch) -> Iterator[SQLiteOptions]:
    """Set the SQLite alias's OPTIONS for the test only (ULTJOBS pointing at it)."""
    with override_settings(ULTJOBS={"DATABASE": SQLITE}):
        yield lambda **options: monkeypatch.setitem(
            connections[SQLITE].settings_dict, "OPTIONS", options)


def _sqlite_ids() -> set[str]:
    return {m.id for m in check_settings()} & {"django_ultjobs.W010", "django_ultjobs.W011"}


def test_check_warns_for_sqlite_in_deferred_mode_with_the_fix_in_its_hint(
        sqlite_options: SQLiteOptions) -> None:
    sqlite_options(timeout=30)
    (warning,) = [m for m in check_settings() if m.id == "django_ultjobs.W010"]
    assert "database is locked" in warning.msg
    assert "['OPTIONS']['transaction_mode'] = 'IMMEDIATE'" in (warning.hint or "")
    sqlite_options(timeout=30, transaction_mode="deferred")
    assert _sqlite_ids() == {"django_ultjobs.W010"}


@pytest.mark.parametrize("mode", ["IMMEDIATE", "immediate", "EXCLUSIVE"])
def test_check_is_silent_when_transactions_begin_as_the_writer(
        sqlite_options: SQLiteOptions, mode: str) -> None:
    sqlite_options(timeout=30, transaction_mode=mode)
    assert _sqlite_ids() == set()


def test_check_says_what_to_do_on_a_django_without_transaction_mode(
        sqlite_options: SQLiteOptions, monkeypatch: pytest.MonkeyPatch) -> None:
    sqlite_options(timeout=30)
    monkeypatch.delattr(type(connections[SQLITE]), "transaction_modes")
    (warning,) = [m for m in check_settings() if m.id == "django_ultjobs.W010"]
    assert "Django 5.1" in (warning.hint or "")


@pytest.mark.parametrize(("options", "warns"), [
    ({"timeout": 1}, True),
    ({"timeout": 4.9}, True),
    ({}, False),  # Python's default, 5 s
    ({"timeout": 5}, False),
    ({"timeout": 30}, False),
    ({"timeout": 1, "init_command": "PRAGMA journal_mode=WAL; PRAGMA busy_timeout = 30000"},
     False),
    ({"timeout": 30, "init_command": "PRAGMA busy_timeout=100;"}, True),
])
def test_check_warns_for_a_busy_timeout_under_five_seconds(
        sqlite_options: SQLiteOptions, options: dict[str, Any], warns: bool) -> None:
    sqlite_options(transaction_mode="IMMEDIATE", **options)
    assert _sqlite_ids() == ({"django_ultjobs.W011"} if warns else set())
    if warns:
        (warning,) = [m for m in check_settings() if m.id == "django_ultjobs.W011"]
        assert "['OPTIONS']['timeout'] = 30" in (warning.hint or "")


def test_check_is_silent_for_postgresql() -> None:
    with override_settings(ULTJOBS={"DATABASE": "postgres"}):
        assert _sqlite_ids() == set()
