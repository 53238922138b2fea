"""The SQL of the attempts view, ``django_ultjobs_attemptrecord`` (rule 97 (attempt-on-row)), in one
place.

Migration 0022 creates version 1 of the view from here, migration 0023 version 2, and
``WithoutAttemptsView`` (every later migration that changes the job or attempt table) drops it and
creates again the version it names. Migrations import this module, so it must stay stable: a
change to the view's SQL is a new version here, created by a new migration (and named by the
``WithoutAttemptsView`` of every later one), never an edit of a version that would change what an
old migration builds.
"""

from __future__ import annotations

from typing import Any

#: Where the ids of the attempts the jobs' rows hold begin (rule 97 (attempt-on-row)): 2**62, beyond
#: any id a bigint sequence of attempt rows reaches. ``models.ON_ROW_ID`` is this constant.
ON_ROW_ID = 2**62

NAME = "django_ultjobs_attemptrecord"

#: The attempt a job's row holds, its id ON_ROW_ID + the job's id: above every attempt row's id,
#: so ordered by id it comes after the job's rows, as it happened. The job's claim is the
#: attempt's start (the settle records the claim time as the start of every attempt), its finish
#: time and worker are the attempt's. Only a settle to succeeded sets attempt_on_row, and nothing
#: moves a succeeded job, so the flag alone selects them: a finish-time window reads the partial
#: index alone (an index-only scan). On PostgreSQL each constant has its column's exact type:
#: with any other, the planner keeps the second half as a subquery and sorts it whole instead of
#: merging it in index order.
_SELECT = """
SELECT a.id, a.job_id, a.attempt, a.worker_id, a.started_at, a.finished_at, a.outcome,
       a.error, a.slot_key, a.slot, a.steps_run, a.steps_replayed, a.claims
FROM django_ultjobs_jobattempt AS a
UNION ALL
SELECT {on_row_id} + j.id, j.id, j.attempt, j.worker_id, j.claimed_at, j.finished_at, {succeeded},
       {no_error}, {no_slot_key}, {no_slot}, {no_steps}, {no_steps}, 1
FROM django_ultjobs_job AS j
WHERE j.attempt_on_row
"""
#: Version 2 (migration 0023): the held attempt may have held a per-job fleet slot, its number in
#: ``Job.attempt_slot`` (NULL: no slot); its key is then the job's per-job slot key, built from
#: the job's name as ``slot_keys.slot_key_for`` builds it (written out here, so that this version
#: stays what 0023 built).
_SELECT_2 = _SELECT.replace("{no_slot_key}, {no_slot}", "{held_slot_key}, j.attempt_slot")
_CONSTANTS = {
    "postgresql": {"succeeded": "'succeeded'::varchar(16)", "no_error": "''::text",
                   "no_slot_key": "''::varchar(200)", "no_slot": "NULL::integer",
                   "no_steps": "'[]'::jsonb"},
    "sqlite": {"succeeded": "'succeeded'", "no_error": "''", "no_slot_key": "''",
               "no_slot": "NULL", "no_steps": "'[]'"},
}


_HELD_SLOT_KEY = {
    "postgresql": "CASE WHEN j.attempt_slot IS NULL THEN ''::varchar(200) "
                  "ELSE ('job:' || j.name)::varchar(200) END",
    "sqlite": "CASE WHEN j.attempt_slot IS NULL THEN '' ELSE 'job:' || j.name END",
}
#: Version 3 (migration 0031): version 2 with the held attempts selected as each engine's partial
#: index of them (ultjobs_job_attempt_on_row) states its predicate. SQLite uses a partial index
#: only for a query that states the index's own term, and Django wrote its predicate
#: "attempt_on_row = 1": version 2's bare "j.attempt_on_row" read every job row on SQLite.
_SELECT_3 = _SELECT_2.replace("WHERE j.attempt_on_row", "WHERE {on_row}")
_ON_ROW = {"postgresql": "j.attempt_on_row", "sqlite": "j.attempt_on_row = 1"}
#: The version later migrations create (``WithoutAttemptsView(view=LATEST)`` names it as a number).
LATEST = 3


def _select(vendor: str, version: int) -> str:
    if version == 1:
        return _SELECT.format(on_row_id=ON_ROW_ID, **_CONSTANTS[vendor])
    if version == 2:
        return _SELECT_2.format(on_row_id=ON_ROW_ID, held_slot_key=_HELD_SLOT_KEY[vendor],
                                **_CONSTANTS[vendor])
    if version == 3:
        return _SELECT_3.format(on_row_id=ON_ROW_ID, held_slot_key=_HELD_SLOT_KEY[vendor],
                                on_row=_ON_ROW[vendor], **_CONSTANTS[vendor])
    raise ValueError(f"no attempts view of version {version}")


def create_view(schema_editor: Any, version: int = 1) -> None:
    """Create the view of ``version``, replacing whatever view of that name is there.

    PostgreSQL replaces it in one statement when it is already this view (a re-run of an
    interrupted migration: readers never see it missing); a view of another shape (half-made by
    an older run) it refuses to replace, so that one is dropped first, in the same transaction.
    SQLite has no CREATE OR REPLACE VIEW: drop, then create.
    """
    vendor = schema_editor.connection.vendor
    select = _select(vendor, version)
    if vendor == "postgresql" and _same_view_there(schema_editor):
        schema_editor.execute(f"CREATE OR REPLACE VIEW {NAME} AS{select}")
        return
    drop_view(schema_editor)
    schema_editor.execute(f"CREATE VIEW {NAME} AS{select}")


def drop_view(schema_editor: Any) -> None:
    schema_editor.execute(f"DROP VIEW IF EXISTS {NAME}")


def _same_view_there(schema_editor: Any) -> bool:
    """Whether a view of this name has this view's columns (so CREATE OR REPLACE accepts it)."""
    if schema_editor.collect_sql:  # sqlmigrate: no database to ask
        return False
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute "
                       "WHERE attrelid = to_regclass(%s) AND attnum > 0", [NAME])
        (columns,) = cursor.fetchone()
    return columns == list(_COLUMNS)


_COLUMNS = ("id", "job_id", "attempt", "worker_id", "started_at", "finished_at", "outcome",
            "error", "slot_key", "slot", "steps_run", "steps_replayed", "claims")
