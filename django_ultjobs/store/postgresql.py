"""The PostgreSQL store (psycopg 3): single-statement claims with FOR UPDATE SKIP LOCKED."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import cache
from typing import Any

import psycopg
from django.conf import settings
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg.pq import Format, TransactionStatus

from ..core import jsonargs
from . import copy_binary, copy_rows, dependencies
from .base import JobStore, check_one_per_job
from .dependencies import FINAL
from .records import (
    ClaimedJob,
    ClaimRequest,
    EnqueuedJob,
    NewJob,
    Settlement,
    SlotHold,
)
from .settle_arrays import settle_arrays

#: SQLSTATE invalid_sql_statement_name: a prepared statement the server does not have.
_LOST_PREPARED_STATEMENT = "26000"
#: SQLSTATE feature_not_supported, and the message of the one case of it that concerns us.
_FEATURE_NOT_SUPPORTED = "0A000"
_STALE_PLAN = "cached plan must not change result type"
#: SQLSTATE undefined_table and undefined_column: the tables are not migrated (to this version).
_UNMIGRATED = ("42P01", "42703")

#: SQLSTATE classes of a statement refused for its values, never for an outage
#: (rule 30 (refused-outcome-no-wedge)).
_REFUSED_CLASSES = ("22", "23", "54")

#: The driver's own timestamptz loader (C, in psycopg's binary package). Django's connections
#: load through a Python wrapper of it that relabels every value with Django's time zone.
_DRIVER_TIME_LOADER = psycopg.adapters.get_loader(psycopg.adapters.types["timestamptz"].oid,
                                                  Format.TEXT)

#: Sent before a prepared plain settle, in its transaction (``_execute_settle``).
GENERIC_PLAN = "SET LOCAL plan_cache_mode = force_generic_plan"

#: Seconds before a run put to wait on an event whose lock a sender held re-checks for it.
BUSY_EVENT_RECHECK = 1.0


class _StoreCursor(psycopg.Cursor[Any]):
    """A server-side binding cursor that can be told to prepare none of its statements.

    It runs inside Django's cursor wrapper, whose ``execute`` passes no options to the driver.
    """

    #: ``execute``'s ``prepare`` when the caller gives none: None leaves it to
    #: ``prepare_threshold``; False never prepares.
    prepare: bool | None = None

    def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                binary: bool | None = None) -> Any:
        return super().execute(query, params, binary=binary,
                               prepare=self.prepare if prepare is None else prepare)


class PostgresStore(JobStore):
    """Jobs and fleet slots on PostgreSQL; every batch is one statement and one round trip."""

    vendor = "postgresql"
    dialect = "postgresql"

    @staticmethod
    def token_param(token: str) -> Any:
        return uuid.UUID(token)

    def _copies(self, jobs: Sequence[NewJob]) -> bool:
        """Whether ``jobs`` go in by COPY (``copy_rows.COPY_MIN_JOBS``)."""
        # COPY's rows carry times computed here from the database's clock; with USE_TZ off they
        # would be naive wall-clock times, which a DST change shifts, where the INSERT adds an
        # interval on the server: such sites keep the INSERT (rule 95 (copy-writes-as-insert)).
        return len(jobs) >= copy_rows.COPY_MIN_JOBS and settings.USE_TZ

    def enqueue(self, jobs: Sequence[NewJob]) -> list[EnqueuedJob]:
        """Insert ``jobs``: one plain INSERT for a single job, the JSON-array form for a few,
        COPY for many (``copy_rows.COPY_MIN_JOBS``)."""
        if self._copies(jobs):
            now, ids = self._copy(jobs)
            return [EnqueuedJob(id=job_id, visible_at=visible_at, created_at=now,
                                expires_at=expires_at)
                    for job_id, (visible_at, expires_at) in zip(
                        ids, copy_rows.times(jobs, now), strict=True)]
        if len(jobs) != 1:
            return super().enqueue(jobs)
        row = self.new_job_row(jobs[0])
        # The shared encoder (checked arguments, so the same text): json.dumps with options
        # builds an encoder per call.
        params = {**row, "args": jsonargs.dumps(row["args"]),
                  "kwargs": jsonargs.dumps(row["kwargs"]), "tags": jsonargs.dumps(row["tags"]),
                  "run_at": jobs[0].run_at, "now": self.now_param()}
        with self.cursor() as cur:
            cur.execute(self.sql["enqueue_one"], params)
            r = cur.fetchone()
        return [EnqueuedJob(id=r[0], visible_at=r[1], created_at=r[2], expires_at=r[3])]

    def enqueue_ids(self, jobs: Sequence[NewJob]) -> list[int]:
        # By COPY, the ids as the first statement gave them: no EnqueuedJob per job, the
        # largest cost left of a bulk enqueue's job once its rows were in.
        return self._copy(jobs)[1] if self._copies(jobs) else super().enqueue_ids(jobs)

    def _copy(self, jobs: Sequence[NewJob]) -> tuple[datetime, list[int]]:
        """Insert ``jobs`` by COPY, in two statements of one transaction (the caller's when it
        has one): the clock, the ids and the notify (``enqueue_copy_ids``), then the rows.
        Returns the clock and the ids, in the order of ``jobs``."""
        # No savepoint: like the one INSERT it replaces, a failure fails the caller's
        # transaction; outside one, both statements commit or roll back together, and read
        # the same now().
        with transaction.atomic(using=self.alias, savepoint=False), self.cursor() as cur:
            cur.execute(self.sql["enqueue_copy_ids"],
                        {**copy_rows.soonest_params(jobs), "now": self.now_param()})
            now, ids, _ = cur.fetchone()
            ids.sort()
            # A plain batch leaves to their defaults the columns every job of it does, and is
            # sent in binary: the server's insert is what the call waits for, and both take
            # from it.
            if copy_rows.plain(jobs):
                copy_rows.copy(cur, self.sql["enqueue_copy_plain"],
                               copy_binary.binary_rows(jobs, ids, now))
            else:
                copy_rows.copy(cur, self.sql["enqueue_copy"],
                               copy_rows.text_rows(jobs, ids, now))
        return now, ids

    def _insert_unique(self, sent: Sequence[NewJob]) -> list[Any]:
        # One job: its values as parameters, not a JSON array.
        if len(sent) != 1:
            return super()._insert_unique(sent)
        row = self._unique_row(sent[0])
        params = {**row, "args": jsonargs.dumps(row["args"]),
                  "kwargs": jsonargs.dumps(row["kwargs"]), "tags": jsonargs.dumps(row["tags"]),
                  "run_at": sent[0].run_at,
                  "now": self.now_param()}
        with self.cursor() as cur:
            cur.execute(self.sql["enqueue_unique_one"], params)
            return cur.fetchall()

    def _django_cursor(self, conn: BaseDatabaseWrapper) -> Any:
        # Django's wrapper from connection.cursor() (rule 41 (instrumented-statements): whatever
        # patched that method, a debug toolbar, an APM agent, has wrapped it), with a server-side
        # binding cursor put inside in place of the ORM's, whatever Django's connection uses for the
        # ORM: the client-side cursor quoted every parameter (arrays, uuids) in Python on every
        # claim.
        # Prepared statements follow the site's own choice:
        # Django opens psycopg connections with prepare_threshold off (a transaction-mode pooler
        # older than PgBouncer 1.21 loses them), and OPTIONS["prepare_threshold"] turns them on
        # for these cursors (the ORM's client-side cursors never prepare unless
        # server_side_binding is on too; docs/deployment.md: prepared statements).
        wrapper = conn.cursor()
        wrapper.cursor.close()
        wrapper.cursor = _StoreCursor(conn.connection)
        return wrapper

    def execute_unprepared(self, cur: Any, name: str, params: Mapping[str, Any]) -> None:
        # Never prepared, whatever prepare_threshold says: after five runs PostgreSQL may switch
        # a prepared statement to its generic plan, planned without the parameters' values.
        # claim_capped's cannot see the cap names as constants and seq-scans and sorts every
        # live row (the claim without caps and the capped kinds' own claim, once as bad, are
        # prepared, behind a fence that fixes their plans); event_find's walks the
        # events in id order instead of taking its name's index. Each is many times slower
        # than planning afresh; a settle that extends an
        # episode or waits on an event is the same. Django's wrapper passes no
        # options to the driver: the cursor inside it is told instead.
        driver = cur.cursor
        driver.prepare = False
        try:
            cur.execute(self.sql[name], params)
        finally:
            driver.prepare = None

    def schema_missing(self, exc: BaseException) -> bool:
        return any(getattr(error, "sqlstate", None) in _UNMIGRATED
                   for error in (exc, exc.__cause__))

    def refuses(self, exc: BaseException) -> bool:
        # SQLSTATE classes 22 (data exception: "string too long to represent as jsonb string",
        # "unsupported Unicode escape sequence", a value out of range), 23 (integrity
        # constraint) and 54 (program limit: "total size of jsonb array elements exceeds the
        # maximum"). psycopg's DataError without a SQLSTATE is its own refusal before sending
        # (a NUL in a text parameter). Class 08 (connection), 53 (disk full, out of memory) and
        # 57 (shutdown) are outages to wait out.
        if super().refuses(exc):
            return True
        for error in (exc, exc.__cause__):
            sqlstate = getattr(error, "sqlstate", None) or ""
            if sqlstate[:2] in _REFUSED_CLASSES:
                return True
            if isinstance(error, psycopg.DataError) and not sqlstate:
                return True
        return False

    def unfit_settings(self) -> str | None:
        # The settle's arrays write a run's missing value as NULL, which PostgreSQL reads as
        # the text 'NULL' with array_nulls off: a success would record the error 'NULL'.
        with self.cursor() as cur:
            cur.execute("SHOW array_nulls")
            if cur.fetchone()[0] == "on":
                return None
        return (f"PostgreSQL's array_nulls is off for the database of '{self.alias}': the "
                "worker's settles would store the text 'NULL' for values they leave out. Turn "
                "it back on (ALTER DATABASE ... RESET array_nulls, ALTER ROLE ... RESET "
                "array_nulls, or remove it from the connection's options)")

    def refusal_reason(self, exc: BaseException) -> str:
        # The DETAIL line says what was refused ("\u0000 cannot be converted to text", "jsonb
        # strings cannot exceed 268435455 bytes"); the CONTEXT lines repeat the parameter.
        reason = super().refusal_reason(exc)
        diag = getattr(exc.__cause__, "diag", None)
        detail = getattr(diag, "message_detail", None)
        return f"{reason} ({detail.strip()})" if detail else reason

    def spoils_connection(self, exc: BaseException) -> bool:
        # A prepared statement that fails the same way at every later run on this connection,
        # where a new connection prepares afresh: "prepared statement "_pg3_0" does not exist"
        # (the server forgot what psycopg prepared: DEALLOCATE or DISCARD ALL behind its back,
        # a pooler that moved the session; psycopg does not notice), and "cached plan must not
        # change result type" (a migration changed the type of a column it returns).
        for error in (exc, exc.__cause__):
            sqlstate = getattr(error, "sqlstate", None)
            if sqlstate == _LOST_PREPARED_STATEMENT or (
                    sqlstate == _FEATURE_NOT_SUPPORTED and _STALE_PLAN in str(error)):
                return True
        return False

    def in_callers_transaction(self, conn: BaseDatabaseWrapper) -> bool:
        # Also a transaction opened outside atomic(): set_autocommit(False), or psycopg's own.
        return super().in_callers_transaction(conn) or conn.connection.info.transaction_status \
            in (TransactionStatus.INTRANS, TransactionStatus.INERROR)

    def commit_mode(self) -> str | None:
        # Rule 93 (unflushed-slot-release): only a statement that is its own transaction commits
        # without waiting for the WAL flush; in a caller's transaction (or with autocommit off,
        # where the statement would open one the caller then owns) the caller's commit keeps its own
        # setting. Asked with the cursor open (the connection may have been closed until then).
        conn = self.connection
        return None if self.in_callers_transaction(conn) or not conn.get_autocommit() else "off"

    def claim_jobs(self, request: ClaimRequest) -> list[ClaimedJob]:
        """Claim in one statement: ``claim``, or one of the capped claims (``_claim_query``)."""
        caps = request.caps
        per_job = [name for name in caps if name not in request.keyed]
        per_key = [name for name in caps if name in request.keyed]
        token = uuid.uuid4()
        params = {
            "cap_names": per_job,
            "cap_limits": [caps[name] for name in per_job],
            "cap_kept": [request.kept_of(name) for name in per_job],
            "key_names": per_key,
            "key_limits": [caps[name] for name in per_key],
            "uncapped": request.uncapped or not caps,
            "queues": list(request.queues),
            "limit": request.limit,
            "token": token,
            "worker_id": request.worker_id,
            "timeout": request.visibility_timeout,
            "now": self.now_param(),
        }
        name = _claim_query(caps, per_key, request.uncapped)
        with self.cursor() as cur:
            self._driver_times(cur)
            if name in _PREPARED_CLAIMS:
                # Prepared as the site's connection prepares: its generic plan is its custom one
                # at every queue size measured.
                cur.execute(claim_text(self.sql[name], request.limit, kinds=len(per_job)),
                            params)
            else:
                self.execute_unprepared(cur, name, params)
            rows = cur.fetchall()
        # Columns 13-15: the run's timeout, expiry and cancel reason; 16-19: what the row was
        # before (claim_update), its due time last; 20 (with caps): the slot key of a run capped
        # per key.
        slot_keys = {r[0]: r[20] for r in rows if caps and r[20] is not None}
        return self.claimed_batch(rows, [r[16:20] for r in rows], str(token),
                                  slot_keys=slot_keys)

    def _driver_times(self, cur: Any) -> None:
        # A claim returns two or three times per row, and Django's loader (a Python call and a
        # datetime.replace per value) was the largest single cost of the claim loop, a
        # seventh of the worker's busy time in a no-op drain.
        # The driver's loader gives the very same datetimes when the session's time zone is
        # the one Django relabels with (UTC under USE_TZ, which Django sets on connecting).
        driver = cur.cursor
        if self.connection.timezone == driver.connection.info.timezone:
            driver.adapters.register_loader("timestamptz", _DRIVER_TIME_LOADER)

    @staticmethod
    def runs_params(runs: Sequence[tuple[int, str]]) -> dict[str, Any]:
        """Two arrays the heartbeat unnests side by side."""
        return {"ids": [job_id for job_id, _ in runs],
                "tokens": [uuid.UUID(token) for _, token in runs]}

    def settle(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
        """Settle a batch in one statement, each row fenced on its token, attempts recorded."""
        if not settlements:
            return set()
        check_one_per_job(settlements)
        params = self.settle_params(settlements, worker_id)
        waits = sorted({s.wait_event for s in settlements if s.wait_event})
        # A run that extends a park's episode or waits on an event makes the settle read the
        # attempts or the events table, which a prepared settle's generic plan, made at its first
        # runs, would scan whole once it has grown: such batches (rare) are planned afresh; the
        # rest never reach those reads.
        fresh = bool(waits) or any(s.extends is not None for s in settlements)
        with self.cursor() as cur:
            if not waits:
                self._execute_settle(cur, params, fresh)
                settled = {row[0] for row in cur.fetchall()}
                return settled | self._settle_dependencies(cur, settlements, settled, worker_id)
            # Runs going to wait on events: hold each event's lock across the check and the
            # write, so an event being sent right now is either seen here or sees the wait.
            with self.connection.connection.transaction():
                cur.execute(self.sql["event_wait_lock"], {"names": waits})
                busy = {row[0] for row in cur.fetchall()}
                if busy:
                    # A sender of that event is mid-transaction: its event may commit unseen by
                    # this settle, so those runs look again in a second instead of sleeping
                    # until their timeout.
                    params.update(settle_arrays(
                        [replace(s, delay=min(s.delay, BUSY_EVENT_RECHECK))
                         if s.wait_event in busy else s for s in settlements],
                        self._json_time))
                self._execute_settle(cur, params, fresh)
                settled = {row[0] for row in cur.fetchall()}
            return settled | self._settle_dependencies(cur, settlements, settled, worker_id)

    def _settle_dependencies(self, cur: Any, settlements: Sequence[Settlement],
                             settled: set[int], worker_id: str) -> set[int]:
        """Settle the runs the settle statement left out because they finish a job with
        dependents, each with the release of those dependents in one transaction
        (rule 110 (released-in-settle)).

        Only runs that finish a job and were not settled are sent again: the plain batch pays
        nothing, and a stale one (its token no longer holds the row) settles nothing here either.
        """
        again = [s for s in settlements if s.job_id not in settled and s.status in FINAL]
        if not again:
            return set()
        params = {**self.settle_params(again, worker_id), "dependents": True}
        with self.connection.connection.transaction():
            self.execute_unprepared(cur, "settle", params)
            finished = sorted(row[0] for row in cur.fetchall())
            dependencies.release(self, cur, finished)
        return set(finished)

    def settle_params(self, settlements: Sequence[Settlement], worker_id: str) -> dict[str, Any]:
        """The settle statement's parameters: the batch as one array per column."""
        return {**settle_arrays(settlements, self._json_time), "worker_id": worker_id,
                "now": self.now_param(), "dependents": False}

    def _execute_settle(self, cur: Any, params: Mapping[str, Any], fresh: bool) -> None:
        if fresh:
            self.execute_unprepared(cur, "settle", params)
            return
        driver = cur.cursor.connection
        if driver.prepare_threshold is None or \
                driver.info.transaction_status != TransactionStatus.IDLE:
            # Not prepared (planned at every run whatever is said), or inside the caller's own
            # transaction, which a SET LOCAL would outlast.
            cur.execute(self.sql["settle"], params)
            return
        # Prepared, the settle keeps its generic plan: left to choose, PostgreSQL planned a
        # custom one at nearly every run (the batch's arrays estimated at ten rows, not the one
        # or two a worker with few places sends), and planning the statement cost more of
        # the server than running it. Its generic plan reads by primary key at every batch size.
        with driver.transaction():
            cur.execute(GENERIC_PLAN)
            cur.execute(self.sql["settle"], params)

    # -- fleet slots ---------------------------------------------------------------------------

    @staticmethod
    def held_params(held: Sequence[SlotHold]) -> dict[str, Any]:
        return {
            "keys": [h.key for h in held],
            "slots": [h.slot for h in held],
            "holders": [h.holder for h in held],
        }


#: The smallest inner limit of the claims' fence ("{bound}" in ``claim``, per queue, and in
#: ``claim_capped_kinds``, per kind): generic plans were measured at limits 1-128 under it.
CLAIM_BOUND = 128


def claim_text(sql: str, limit: int, *, kinds: int) -> str:
    """``claim`` or ``claim_capped_kinds`` (``sql``, its text as loaded) with its constants: the
    fence's, the least of 128, 1024, 8192... at or above ``limit``, and the number of capped
    ``kinds`` the claim's arrays hold. A handful of texts, so a handful of prepared statements,
    and sizes the planner can cost (past 128, at most eight times the rows asked for)."""
    bound = CLAIM_BOUND
    while bound < limit:
        bound *= 8
    return _fenced(sql, bound, kinds)


@cache
def _fenced(sql: str, bound: int, kinds: int) -> str:
    if "{kinds}" in sql and kinds < 1:
        # LIMIT 0 on the kinds would claim nothing, silently: the capped kinds would starve.
        raise ValueError(f"a claim of the capped kinds needs their number, not {kinds}")
    return sql.replace("{bound}", str(bound)).replace("{kinds}", str(kinds))


#: The claims whose scans sit behind the constant fence (``claim_text``): sent for the site's
#: connection to prepare. claim_capped is planned at every run: its generic plan was measured
#: slower than planning afresh (docs/deployment.md), and its scans for the other kinds and per
#: key have no fence.
_PREPARED_CLAIMS = frozenset({"claim", "claim_capped_kinds"})


def _claim_query(caps: Mapping[str, int], per_key: Sequence[str], uncapped: bool) -> str:
    """The claim statement for these arguments: ``claim`` with no cap, ``claim_capped_kinds``
    when only the capped kinds' own scans are due (none capped per key), else ``claim_capped``.
    """
    if not caps:
        return "claim"
    return "claim_capped" if uncapped or per_key else "claim_capped_kinds"
