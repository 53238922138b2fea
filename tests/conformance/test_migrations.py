"""The queue's migrations on both engines: what an upgrade leaves behind, and the way back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections, transaction

from django_ultjobs.core.slot_keys import slot_key_for
from django_ultjobs.models import ON_ROW_ID, Job, JobAttempt, Worker
from django_ultjobs.store import JobStore
from django_ultjobs.store.attempts import history
from tests.doubles import FakeClock

from .helpers import claim, enqueue, new_job, settlement

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def _migrate(alias: str, to: str | None = None) -> None:
    """Migrate the queue's tables on ``alias`` to ``to``, or to the latest migration."""
    call_command("migrate", "django_ultjobs", *([to] if to else []), database=alias, verbosity=0)


@contextmanager
def _migrated_back(alias: str, to: str) -> Iterator[None]:
    """Hold ``alias`` at migration ``to`` for the block, and at the latest after it, even when
    the block fails: the tests after it need every table as the code expects."""
    try:
        _migrate(alias, to)
        yield
    finally:
        _migrate(alias)


def _attempt_indexes(alias: str) -> dict[str, list[str]]:
    """The attempt table's indexes (its primary key left out), each with its columns."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, JobAttempt._meta.db_table)
    return {name: c["columns"] for name, c in constraints.items()
            if c["index"] and not c["primary_key"]}


def _indexes_on(alias: str, columns: list[str]) -> list[str]:
    return sorted(name for name, on in _attempt_indexes(alias).items() if on == columns)


def test_an_attempt_row_is_indexed_by_job_once(alias: str) -> None:
    # 0005: (job, attempt) serves every lookup by job; the foreign key's own index on job alone
    # was a second index write per attempt row on every settle.
    assert _indexes_on(alias, ["job_id"]) == []
    assert _indexes_on(alias, ["job_id", "attempt"]) == ["ultjobs_attempt_job"]
    with _migrated_back(alias, "0004"):
        # Going back restores the index Django made for the foreign key...
        assert len(_indexes_on(alias, ["job_id"])) == 1
        _migrate(alias)
        # ...and the upgrade drops exactly that one (concurrently on PostgreSQL).
        assert _indexes_on(alias, ["job_id"]) == []
        assert _indexes_on(alias, ["job_id", "attempt"]) == ["ultjobs_attempt_job"]


def _index_names(alias: str) -> set[str]:
    return set(_attempt_indexes(alias))


def _index_definition(alias: str, name: str) -> str:
    connection = connections[alias]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_get_indexdef(%s::regclass)", [name])
        else:
            cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = %s",
                           [name])
        return cursor.fetchone()[0]


def _slot_lost_index_is_used(alias: str) -> bool:
    """Whether the lost-slot page's query reads the partial index (PostgreSQL's plan, SQLite's
    query plan), with sequential scans made expensive so a small table cannot hide it."""
    connection = connections[alias]
    query = ("SELECT id FROM django_ultjobs_jobattempt WHERE outcome = 'slot_lost' "
             "ORDER BY finished_at DESC, id DESC LIMIT 50")
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {query}")
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {query}")
        return "ultjobs_attempt_slot_lost" in " ".join(str(r) for r in cursor.fetchall())


def test_attempts_are_indexed_by_outcome_only_where_slots_were_lost(alias: str) -> None:
    # 0006: only the lost-slot pages read attempts by outcome, and only slot_lost ones; an
    # index on every attempt's outcome was one more index write per job on every settle.
    assert "ultjobs_attempt_outcome" not in _index_names(alias)
    assert "ultjobs_attempt_slot_lost" in _index_names(alias)
    assert "WHERE" in _index_definition(alias, "ultjobs_attempt_slot_lost").upper()  # partial
    with transaction.atomic(using=alias):
        assert _slot_lost_index_is_used(alias)
    with _migrated_back(alias, "0005"):
        names = _index_names(alias)
        assert "ultjobs_attempt_outcome" in names and "ultjobs_attempt_slot_lost" not in names
        with transaction.atomic(using=alias):
            assert not _slot_lost_index_is_used(alias)
        _migrate(alias)
        names = _index_names(alias)
        assert "ultjobs_attempt_outcome" not in names and "ultjobs_attempt_slot_lost" in names


def test_an_interrupted_0006_finishes_when_migrate_runs_again(alias: str) -> None:
    # Each of its operations commits on its own (atomic = False): a deploy killed after the new
    # index was built, before the migration was recorded, runs it again from the start.
    with _migrated_back(alias, "0005"):
        with connections[alias].cursor() as cursor:
            cursor.execute("CREATE INDEX ultjobs_attempt_slot_lost "
                           "ON django_ultjobs_jobattempt (finished_at)")
        _migrate(alias)
        names = _index_names(alias)
        assert "ultjobs_attempt_outcome" not in names and "ultjobs_attempt_slot_lost" in names
        # Built anew by the migration, not the stand-in left behind: partial.
        assert "WHERE" in _index_definition(alias, "ultjobs_attempt_slot_lost").upper()


def test_0007_leaves_the_writes_of_older_code_working(alias: str) -> None:
    # 0007 adds JobAttempt.claims (a database default of 1) and Worker.jobs (nullable), so code
    # from before it (a worker of the last release, mid-deploy) still writes both tables, and its
    # rows read as one claim and as a worker that did not say what it knows
    # (rule 12 (unknown-job-parked)).
    with _migrated_back(alias, "0006"):
        _migrate(alias)
        job = Job.objects.using(alias).create(name="gone")
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "INSERT INTO django_ultjobs_jobattempt (job_id, attempt, worker_id, outcome, "
                "error, slot_key, steps_run, steps_replayed) "
                "VALUES (%s, 1, 'old', 'suspended', '', '', '[]', '[]')", [job.id])
            cursor.execute(
                "INSERT INTO django_ultjobs_worker (id, hostname, pid, threads, queues, "
                "in_flight) VALUES ('old', 'h', 1, 1, '[]', 0)")
        assert JobAttempt.objects.using(alias).get(job_id=job.id).claims == 1
        assert Worker.objects.using(alias).get(id="old").jobs is None


def test_0009_carries_the_held_slots_permissions_over_to_the_renamed_model(alias: str) -> None:
    # An operator granted the held-slots page before the fleet-slot model was renamed keeps it:
    # the permission follows the model (its content type and codename), no second copy appears.
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType

    try:
        _migrate(alias, "0008")
        ContentType.objects.db_manager(alias).clear_cache()
        old_type, _ = ContentType.objects.db_manager(alias).get_or_create(
            app_label="django_ultjobs", model="joblease")
        Permission.objects.using(alias).filter(content_type__app_label="django_ultjobs",
                                               codename__endswith="_slot").delete()
        Permission.objects.using(alias).get_or_create(
            content_type=old_type, codename="view_joblease",
            defaults={"name": "Can view job lease"})
        _migrate(alias)
        views = Permission.objects.using(alias).filter(
            content_type__app_label="django_ultjobs", codename__in=["view_slot", "view_joblease"])
        assert [(p.codename, p.content_type.model) for p in views] == [("view_slot", "slot")]
    finally:
        _migrate(alias)
        ContentType.objects.db_manager(alias).clear_cache()


def test_an_interrupted_0022_finishes_when_migrate_runs_again(alias: str) -> None:
    # rule 97 (attempt-on-row): 0022 is not atomic (its index is built concurrently). A deploy
    # killed after the column and the view were made, before the migration was recorded, runs it
    # again: the column is kept, the view made anew, the index built.
    with _migrated_back(alias, "0021"):
        with connections[alias].cursor() as cursor:
            cursor.execute("ALTER TABLE django_ultjobs_job ADD COLUMN attempt_on_row boolean "
                           "NOT NULL DEFAULT false")
            cursor.execute("CREATE VIEW django_ultjobs_attemptrecord AS SELECT 1 AS id")
        _migrate(alias)
        assert "ultjobs_job_attempt_on_row" in _job_index_names(alias)
        job = Job.objects.using(alias).create(name="add", status="succeeded", attempt=1,
                                              worker_id="w1", attempt_on_row=True)
        assert [(a.attempt, a.worker_id, a.outcome) for a in job.attempts.all()] == [
            (1, "w1", "succeeded")]


def _job_index_names(alias: str) -> set[str]:
    connection = connections[alias]
    with connection.cursor() as cursor:
        return set(connection.introspection.get_constraints(cursor, Job._meta.db_table))


_FACTS = ("attempt", "worker_id", "started_at", "finished_at", "outcome", "error", "slot_key",
          "slot", "steps_run", "steps_replayed", "claims")


def _facts(attempt: object) -> tuple:
    return tuple(getattr(attempt, name) for name in _FACTS)


def _settle_plain_success(cstore: JobStore, clock: FakeClock, worker: str,
                          **fields: Any) -> int:
    (job_id,) = enqueue(cstore, new_job())
    (job,) = claim(cstore, worker)
    clock.advance(2)
    assert cstore.settle([settlement(job, result_json="1", **fields)], worker) == {job_id}
    return job_id


def test_going_back_from_0022_writes_the_rows_the_jobs_rows_held(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:
    # rule 97 (attempt-on-row): the code before 0022 reads the attempt table alone; going back
    # writes each attempt a job's row held as a row with the facts the view showed, once.
    held = _settle_plain_success(cstore, clock, "w1")
    (seen,) = Job.objects.using(alias).get(id=held).attempts.all()
    assert seen.id == ON_ROW_ID + held
    # A job flagged with its row already written (a half-done earlier way back) keeps one row.
    written = _settle_plain_success(cstore, clock, "w2")
    JobAttempt.objects.using(alias).create(job_id=written, attempt=1, worker_id="w2",
                                           outcome="succeeded")
    with _migrated_back(alias, "0021"):
        (row,) = JobAttempt.objects.using(alias).filter(job_id=held)
        assert _facts(row) == _facts(seen)
        assert JobAttempt.objects.using(alias).filter(job_id=written).count() == 1
        _migrate(alias)
        (again,) = Job.objects.using(alias).get(id=held).attempts.all()
        assert again.id == row.id and _facts(again) == _facts(seen)
        assert Job.objects.using(alias).get(id=held).attempt_on_row is False
        # ...and a first success settled after the way forward is held by its row again.
        later = _settle_plain_success(cstore, clock, "w3")
        (attempt,) = Job.objects.using(alias).get(id=later).attempts.all()
        assert attempt.id == ON_ROW_ID + later and attempt.worker_id == "w3"


def _settle_slotted_success(cstore: JobStore, clock: FakeClock, worker: str, slot: int) -> int:
    return _settle_plain_success(cstore, clock, worker, slot_key=slot_key_for("add"), slot=slot)


def test_going_back_from_0023_writes_the_rows_of_the_slotted_attempts_the_rows_held(
        cstore: JobStore, clock: FakeClock, alias: str) -> None:
    # rule 97 (attempt-on-row): version 1 of the view (0022) shows no slot for the attempt a row
    # holds; going back writes each one the rows held with a slot as a row with the facts version 2
    # showed, and the rows hold them no more. One held without a slot stays held.
    slotted = _settle_slotted_success(cstore, clock, "w1", 4)
    plain = _settle_plain_success(cstore, clock, "w2")
    (seen,) = Job.objects.using(alias).get(id=slotted).attempts.all()
    (plain_seen,) = Job.objects.using(alias).get(id=plain).attempts.all()
    assert seen.id == ON_ROW_ID + slotted and (seen.slot_key, seen.slot) == ("job:add", 4)
    with _migrated_back(alias, "0022"):
        (row,) = JobAttempt.objects.using(alias).filter(job_id=slotted)
        assert _facts(row) == _facts(seen)
        # (the model has the column 0022 has not: read the job's row by its fields)
        assert Job.objects.using(alias).filter(id=slotted).values_list(
            "attempt_on_row", flat=True).get() is False
        (again,) = history(slotted, using=alias)
        assert again.id == row.id and _facts(again) == _facts(seen)
        (plain_again,) = history(plain, using=alias)
        assert (plain_again.id, _facts(plain_again)) == (plain_seen.id, _facts(plain_seen))
        with connections[alias].cursor() as cursor:  # the column went with 0023
            columns = connections[alias].introspection.get_table_description(
                cursor, Job._meta.db_table)
        assert "attempt_slot" not in {c.name for c in columns}
        _migrate(alias)
        (forward,) = Job.objects.using(alias).get(id=slotted).attempts.all()
        assert forward.id == row.id and _facts(forward) == _facts(seen)
        # ...and a slotted first success settled after the way forward is held by its row.
        later = _settle_slotted_success(cstore, clock, "w3", 2)
        (attempt,) = Job.objects.using(alias).get(id=later).attempts.all()
        assert attempt.id == ON_ROW_ID + later and (attempt.slot_key, attempt.slot) == (
            "job:add", 2)


def _foreign_keys_to_jobs(alias: str) -> dict[str, list[str]]:
    """Per child table (attempts, steps), the columns of its foreign keys to the jobs table."""
    connection = connections[alias]
    found = {}
    with connection.cursor() as cursor:
        for table in ("django_ultjobs_jobattempt", "django_ultjobs_jobstep"):
            constraints = connection.introspection.get_constraints(cursor, table)
            found[table] = [column for c in constraints.values()
                            if c["foreign_key"] and c["foreign_key"][0] == Job._meta.db_table
                            for column in c["columns"]]
    return found


def test_0031_drops_the_children_s_constraints_on_postgresql_alone(alias: str) -> None:
    # PostgreSQL checked each with a query per job deleted; SQLite's table is not rebuilt for it.
    kept = [] if connections[alias].vendor == "postgresql" else ["job_id"]
    assert _foreign_keys_to_jobs(alias) == {"django_ultjobs_jobattempt": kept,
                                            "django_ultjobs_jobstep": kept}
    with _migrated_back(alias, "0028"):
        assert _foreign_keys_to_jobs(alias) == {"django_ultjobs_jobattempt": ["job_id"],
                                                "django_ultjobs_jobstep": ["job_id"]}


def test_an_interrupted_0031_finishes_when_migrate_runs_again(pg_alias: str) -> None:
    # Not atomic: a deploy killed after a constraint was dropped, before the migration was
    # recorded, runs it again and finds that constraint gone.
    with _migrated_back(pg_alias, "0028"):
        with connections[pg_alias].cursor() as cursor:
            cursor.execute("SELECT conname FROM pg_constraint WHERE contype = 'f' "
                           "AND conrelid = 'django_ultjobs_jobattempt'::regclass")
            (name,) = cursor.fetchone()
            cursor.execute(f'ALTER TABLE django_ultjobs_jobattempt DROP CONSTRAINT "{name}"')
        _migrate(pg_alias)
        assert _foreign_keys_to_jobs(pg_alias) == {"django_ultjobs_jobattempt": [],
                                                   "django_ultjobs_jobstep": []}


def _job_indexes(alias: str) -> dict[str, list[str]]:
    connection = connections[alias]
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Job._meta.db_table)
    return {name: c["columns"] for name, c in constraints.items() if c["index"]}


def test_0032_indexes_failed_and_cancelled_jobs_by_id_and_goes_back(alias: str) -> None:
    # Built concurrently on PostgreSQL (not atomic); the jobs list's status filter reads it.
    assert _job_indexes(alias)["ultjobs_job_status"] == ["status", "id"]
    with _migrated_back(alias, "0031"):
        assert "ultjobs_job_status" not in _job_indexes(alias)
