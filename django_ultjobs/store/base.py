"""The store protocol: the only place that runs SQL against the job tables.

One protocol, one implementation per engine (``postgresql.py``, ``sqlite.py``) answering the same
named queries identically; ``tests/conformance`` runs one suite against both. Every method uses
the calling thread's own Django connection for ``alias`` (Django keeps one per thread), through
the cursor ``connection.cursor()`` gives (rule 41 (instrumented-statements)): the ORM is skipped,
not Django's cursor wrappers, so ``assertNumQueries``, ``connection.execute_wrapper`` and the tools
built on them see every statement, and enqueue joins the caller's transaction because it is the same
connection.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, ClassVar

from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..core.jsonargs import storable_text
from ..core.retry import clamp_delay
from ..exceptions import JobTablesMissingError
from ..sql import django_queries
from .decoding import decode_arguments
from .records import (
    ClaimedJob,
    ClaimRequest,
    EnqueuedJob,
    LostAttempt,
    NewJob,
    ParkEpisode,
    Previous,
    RateTaken,
    SavedStep,
    Settlement,
)
from .slots import SlotStore
from .unique_batches import insertion_order, match_inserted

#: A clock the store reads instead of the database's, for tests only; None means the database's.
Clock = Callable[[], datetime]

#: What every table of this package is named with: a missing table that is not one of them is
#: the site's own error, not a forgotten migrate of this app.
TABLE_PREFIX = "django_ultjobs_"


def unmigrated_message(alias: str) -> str:
    """Say that the job tables are missing (or old) in ``alias`` and how to create them."""
    flag = "" if alias == "default" else f" --database {alias}"
    return (f"the django_ultjobs tables do not exist in database {alias!r} "
            f"({connections[alias].settings_dict.get('NAME')}), or are older than this version "
            f"of django_ultjobs: run `python manage.py migrate{flag}`")


class JobStore(SlotStore):
    """Claim, heartbeat, settle and enqueue jobs; hold fleet slots (``slot_store``)."""

    #: The Django ``connection.vendor`` this store speaks to.
    vendor: ClassVar[str]
    #: The dialect whose named queries this store runs.
    dialect: ClassVar[str]

    def __init__(self, alias: str, clock: Clock | None = None) -> None:
        self.alias = alias
        self.clock = clock
        self.sql = django_queries(self.dialect)

    @property
    def slot_store(self) -> SlotStore | None:
        """The fleet-slot store, or None for an engine that has none (rule 10 (cap-kept-or-refused)
        refuses to start)."""
        return self

    @property
    def connection(self) -> BaseDatabaseWrapper:
        """The calling thread's Django connection for this store's alias."""
        return connections[self.alias]

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        """Yield Django's cursor on this thread's connection, errors as Django's.

        Django's cursor wrapper, not the driver's cursor (rule 41 (instrumented-statements)):
        ``execute_wrapper`` hooks, the queries log (``assertNumQueries``, ``CaptureQueriesContext``,
        ``DEBUG``) and tools that patch ``connection.cursor()`` see every statement of the store.

        A connection that broke (the database restarted, the network dropped), or that lost
        state every later statement needs (``spoils_connection``), is closed so the next call
        reconnects instead of failing forever: a dead database is an outage to wait out, not a
        reason for a worker thread to die.
        """
        conn = self.connection
        try:
            cur = self._django_cursor(conn)
            with conn.wrap_database_errors:
                try:
                    yield cur
                finally:
                    cur.close()
        except Exception as exc:
            if conn.connection is None or self.in_callers_transaction(conn):
                raise
            if self.spoils_connection(exc):
                # Closed before Django lets go of it: Django's pool (OPTIONS["pool"]) takes an
                # open connection back as it is, and would hand the same one out again.
                conn.connection.close()
                conn.close()
            elif not conn.is_usable():
                conn.close()
            raise

    def write_transaction(self) -> AbstractContextManager[Any]:
        """``transaction.atomic()`` on the jobs database, for a block that reads, then writes.

        Engines whose default transaction cannot do that under contention override it (SQLite
        begins it as the writer). Inside an open ``atomic`` block this is a savepoint of the
        caller's transaction, which began the way the caller's began.
        """
        return transaction.atomic(using=self.alias)

    def in_callers_transaction(self, conn: BaseDatabaseWrapper) -> bool:
        """Whether the caller has a transaction open on ``conn`` (an ``atomic`` block, engines
        add their own signs): then the connection is the caller's to keep or drop, never ours."""
        return conn.in_atomic_block

    def execute_unprepared(self, cur: Any, name: str, params: Mapping[str, Any]) -> None:
        """Run query ``name``, planned for these parameters every time: for the queries whose
        plan depends on their values (engines that can prepare statements override)."""
        cur.execute(self.sql[name], params)

    def spoils_connection(self, exc: BaseException) -> bool:
        """Whether ``exc`` leaves this connection failing every later statement of its kind,
        though it still answers (engines override)."""
        return False

    def refuses(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the database (or the encoding before it) refusing the *values* of
        a statement, which no retry will change: a string too long, a value out of range, a
        constraint broken. Not an outage: a lost connection, a locked database, a full disk are
        waited out (rule 30 (refused-outcome-no-wedge)). Engines add their own codes."""
        return isinstance(exc, (ValueError, TypeError, OverflowError, RecursionError))

    def refusal_reason(self, exc: BaseException) -> str:
        """The database's own words for a refusal, in one line (engines add their detail)."""
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")

    def unfit_settings(self) -> str | None:
        """What in the database's settings would make this store misread its own statements, as
        a sentence for the operator; None when nothing does (engines override)."""
        return None

    def schema_missing(self, exc: BaseException) -> bool:
        """Whether ``exc`` says a table or column of this package does not exist in the
        database: a database nobody migrated, which no wait will fix (engines override)."""
        return False

    def tables_missing(self, exc: BaseException) -> bool:
        """Whether ``exc`` says a table or column of this package does not exist, naming it:
        ``schema_missing``, and never a missing table of the site's own."""
        return self.schema_missing(exc) and TABLE_PREFIX in str(exc)

    @contextmanager
    def tables_required(self) -> Iterator[None]:
        """Turn the database's "no such table" of this package's tables into one line saying
        to run ``migrate`` (rule 109 (missing-tables-named)); every other error passes as it was.

        Raised, never swallowed: on PostgreSQL the failed statement has aborted the caller's
        transaction, which must roll back as it would for the driver's own error."""
        try:
            yield
        except DatabaseError as exc:
            if isinstance(exc, JobTablesMissingError) or not self.tables_missing(exc):
                raise
            raise JobTablesMissingError(unmigrated_message(self.alias)) from exc

    def _django_cursor(self, conn: BaseDatabaseWrapper) -> Any:
        """``conn.cursor()``: Django's wrapper (engines override to put a faster driver cursor
        inside it)."""
        return conn.cursor()

    def now_param(self) -> Any:
        """The ``now`` parameter of every query: None (database clock) unless a clock is set."""
        return None if self.clock is None else self.format_time(self.clock())

    @staticmethod
    def format_time(value: datetime) -> Any:
        """Turn a datetime into this engine's parameter form."""
        return value

    @staticmethod
    def parse_time(value: Any) -> datetime:
        """Turn a returned time into an aware datetime."""
        assert isinstance(value, datetime)
        return value

    @staticmethod
    def token_param(token: str) -> Any:
        """A claim token in this engine's parameter form."""
        return token

    @staticmethod
    def parse_json(value: Any) -> Any:
        """Turn a returned JSON column into Python."""
        return json.loads(value) if isinstance(value, (str, bytes)) else value

    # -- jobs ---------------------------------------------------------------------------------

    def enqueue(self, jobs: Sequence[NewJob]) -> list[EnqueuedJob]:
        """Insert ``jobs`` in one statement on the caller's connection (and transaction)."""
        if not jobs:
            return []
        payload = json.dumps([self._new_job_row(job) for job in jobs], separators=(",", ":"))
        with self.cursor() as cur:
            cur.execute(self.sql["enqueue"], {"jobs": payload, "now": self.now_param()})
            rows = cur.fetchall()
        rows.sort(key=lambda row: row[0])
        return [
            EnqueuedJob(id=r[0], visible_at=self.parse_time(r[1]), created_at=self.parse_time(r[2]),
                        expires_at=None if r[3] is None else self.parse_time(r[3]))
            for r in rows
        ]

    def enqueue_ids(self, jobs: Sequence[NewJob]) -> list[int]:
        """``enqueue``, and only the new rows' ids, in the order of ``jobs``: what a bulk
        enqueue returns."""
        return [row.id for row in self.enqueue(jobs)]

    def enqueue_unique(self, jobs: Sequence[NewJob]) -> list[EnqueuedJob | None]:
        """Insert ``jobs`` on the caller's connection, each one with a ``unique_key`` only where
        no row holds that key; None for each job whose key is held (rules 65 (one-key-holder) to
        68 (bulk-unique-in-order)).

        Keyed jobs go in by (name, key) (``insertion_order``). PostgreSQL's statement first
        releases the expired holders of these keys; SQLite's store does that in a second
        statement when a key was held."""
        if not jobs:
            return []
        order = insertion_order(jobs)
        sent = [jobs[i] for i in order]
        rows = self._insert_unique(sent)
        matched = match_inserted(sent, rows, lambda r: (r[3], r[4]), lambda r: r[0])
        out: list[EnqueuedJob | None] = [None] * len(jobs)
        for i, r in zip(order, matched, strict=True):
            if r is not None:
                out[i] = EnqueuedJob(id=r[0], visible_at=self.parse_time(r[1]),
                                     created_at=self.parse_time(r[2]),
                                     expires_at=None if r[5] is None else self.parse_time(r[5]))
        return out

    def release_keys(self, keys: Iterable[tuple[str, str]]) -> int:
        """Take each ``(name, key)`` of ``keys`` from the row holding it if that row expired
        (finished at least its ``unique_for`` ago, rule 67 (unique-for-window)), the row keeping it
        as its ``released_key``; return how many were taken."""
        with self.cursor() as cur:
            cur.execute(self.sql["unique_release"], {
                "keys": json.dumps(sorted(keys)), "now": self.now_param()})
            return len(cur.fetchall())

    def _insert_unique(self, sent: Sequence[NewJob]) -> list[Any]:
        """Run ``enqueue_unique`` for ``sent`` in that order: the rows it inserted (id,
        visible_at, created_at, name, unique_key, expires_at)."""
        payload = json.dumps([self._unique_row(job) for job in sent], separators=(",", ":"))
        with self.cursor() as cur:
            cur.execute(self.sql["enqueue_unique"], {"jobs": payload, "now": self.now_param()})
            return cur.fetchall()

    def _unique_row(self, job: NewJob) -> dict[str, Any]:
        return {**self._new_job_row(job), "unique_key": job.unique_key,
                "unique_for": float(job.unique_for)}

    def claim(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        visibility_timeout: float,
        caps: Mapping[str, int],
        uncapped: bool = True,
        kept: Mapping[str, int] | None = None,
        keyed: Iterable[str] = (),
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` runnable jobs in one write, skipping kinds whose caps are full.

        ``caps``: per capped kind (``@job(concurrency=N)``), its fleet-wide limit.

        ``uncapped=False`` claims only the kinds of ``caps``: the async lane's claim, which takes
        its own kinds only (rule 87 (no-claim-beyond-free-places)).

        ``kept``: per capped kind, the slots this worker holds between runs; the claim may take
        that many runs of the kind beyond the fleet's free slots (the worker hands them over).

        ``keyed``: the kinds of ``caps`` capped per key (``concurrency_key``,
        rule 50 (per-key-cap)): the claim skips their keys whose slots are all held, takes at most
        each key's free slots, and says each run's slot key (``ClaimedJob.slot_key``); they keep no
        slots."""
        if limit <= 0:
            return []
        return self.claim_jobs(ClaimRequest(
            worker_id=worker_id, queues=queues, limit=limit,
            visibility_timeout=float(visibility_timeout), caps=caps, uncapped=uncapped,
            kept=kept or {}, keyed=frozenset(keyed) & frozenset(caps)))

    @abstractmethod
    def claim_jobs(self, request: ClaimRequest) -> list[ClaimedJob]:
        """The claim ``request`` asks for (its limit at least 1): what each engine implements
        of ``claim``."""

    def claimed_batch(self, rows: Sequence[Sequence[Any]], previous: Sequence[Previous],
                      token: str, slot_keys: Mapping[int, str] | None = None) -> list[ClaimedJob]:
        """The jobs of a claim's ``UPDATE … RETURNING`` rows, in claim order (priority, then id).

        Each row starts with the columns both engines' claim queries return, in this order: id,
        name, queue, priority, args, kwargs, attempt, max_attempts, traceparent, tracestate,
        enqueued_by, cancel_requested, claimed_at, timeout, expires_at, cancel_reason.
        ``previous[i]`` is what ``rows[i]`` was just before the claim; ``token`` the claim's
        token in its canonical text form; ``slot_keys`` the slot key of each run of a kind
        capped per key, by job id.
        """
        batch: list[ClaimedJob] = []
        parse, new = self.parse_time, object.__new__
        decoded = decode_arguments(rows, 4)
        for r, (args, kwargs, undecodable), prev in zip(rows, decoded, previous, strict=True):
            prev_status, prev_worker, prev_claimed_at, due = prev
            redelivered = prev_status == "running"
            # Every field set by name on a bare instance: the dataclass __init__ taking 23
            # keywords cost a fourteenth of the worker's busy time in a no-op drain.
            # A test holds that this equals the __init__'s.
            job = new(ClaimedJob)
            job.id, job.name, job.queue, job.priority = r[0], r[1], r[2], r[3]
            job.args, job.kwargs, job.undecodable = args, kwargs, undecodable
            job.attempt, job.max_attempts, job.token = r[6], r[7], token
            job.traceparent, job.tracestate = r[8] or "", r[9] or ""
            job.enqueued_by, job.cancel_requested = r[10] or "", bool(r[11])
            job.claimed_at, job.timeout = parse(r[12]), r[13]
            job.expires_at = None if r[14] is None else parse(r[14])
            job.cancel_reason = r[15] or ""
            job.redelivered_from = prev_worker if redelivered else None
            job.previous_claimed_at = (parse(prev_claimed_at)
                                       if redelivered and prev_claimed_at else None)
            job.woke = prev_status == "waiting"
            job.due_at = parse(due)
            job.slot_key = slot_keys.get(r[0]) if slot_keys else None
            batch.append(job)
        batch.sort(key=lambda job: (-job.priority, job.id))
        return batch

    def take_starts(self, wanted: Sequence[tuple[str, int, int, int]]) -> dict[str, RateTaken]:
        """Take starts from rate-limit buckets in one statement (rule 52 (fleet-rate-limit)):
        ``wanted`` is ``(key, interval, tolerance, want)`` per bucket (microseconds), each key once;
        the answer says, per key, what the bucket granted."""
        if not wanted:
            return {}
        with self.cursor() as cur:
            cur.execute(self.sql["rate_take"], {
                "keys": [w[0] for w in wanted], "intervals": [w[1] for w in wanted],
                "tolerances": [w[2] for w in wanted], "wants": [w[3] for w in wanted],
                "now": self.now_param()})
            return {row[0]: RateTaken(granted=row[1], wait=max(0, row[2]) / 1e6, at=row[3])
                    for row in cur.fetchall()}

    def heartbeat(
        self, runs: Sequence[tuple[int, str]], visibility_timeout: float
    ) -> dict[int, bool]:
        """Extend the lease of each ``(job id, token)`` in one statement; return
        ``{id: cancel_requested}`` for the runs still held. A run missing from the answer is
        lost (rule 2 (heartbeat-retried))."""
        if not runs:
            return {}
        params = {**self.runs_params(runs), "timeout": float(visibility_timeout),
                  "now": self.now_param()}
        with self.cursor() as cur:
            cur.execute(self.sql["heartbeat"], params)
            return {row[0]: bool(row[1]) for row in cur.fetchall()}

    @staticmethod
    @abstractmethod
    def runs_params(runs: Sequence[tuple[int, str]]) -> dict[str, Any]:
        """The ``(job id, token)`` pairs as this engine's parameters for the heartbeat."""

    @abstractmethod
    def settle(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
        """Apply each settlement only under its token (rule 4 (fenced-settle)), recording its
        attempt; return the ids that applied.

        At most one settlement per job: the rows are matched to the batch by id."""

    def settle_landed(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
        """The ids of ``settlements`` (each with an outcome) whose attempt this worker already
        recorded: a settle that committed though its reply was lost (rule 32 (landed-never-stale)).
        Matched on job, attempt, worker, start time, outcome and error, so the attempt a re-claimer
        records for a lapsed lease never passes for it."""
        if not settlements:
            return set()
        batch = dumps_batch([
            {"id": s.job_id, "attempt_no": s.attempt_no, "outcome": s.outcome,
             "error": "" if s.error is None else storable_text(s.error),
             "started_at": None if s.started_at is None else self._json_time(s.started_at)}
            for s in settlements if s.outcome is not None
        ])
        with self.cursor() as cur:
            cur.execute(self.sql["settle_landed"], {"batch": batch, "worker_id": worker_id})
            return {row[0] for row in cur.fetchall()}

    def record_attempts(self, attempts: Sequence[LostAttempt]) -> None:
        """Record attempts that ended without a report from their worker."""
        if not attempts:
            return
        batch = json.dumps([
            {
                "job_id": a.job_id,
                "attempt": a.attempt,
                "worker_id": a.worker_id,
                "started_at": None if a.started_at is None else self._json_time(a.started_at),
                "outcome": a.outcome,
                "error": a.error,
            }
            for a in attempts
        ])
        with self.cursor() as cur:
            cur.execute(self.sql["record_attempts"], {"batch": batch, "now": self.now_param()})

    def park_episodes(self, job_ids: Sequence[int], prefix: str, timeout: float
                      ) -> dict[int, ParkEpisode]:
        """The park episode each of ``job_ids`` is in, in one statement: its latest attempt row
        (highest attempt, then newest), when that row is a ``suspended`` one whose error starts
        with ``prefix``; whether it began ``timeout`` seconds ago or more (database clock)."""
        if not job_ids:
            return {}
        with self.cursor() as cur:
            cur.execute(self.sql["park_episodes"], {
                "ids": self.ids_param(job_ids), "prefix": prefix, "timeout": float(timeout),
                "now": self.now_param()})
            rows = cur.fetchall()
        return {row[0]: ParkEpisode(job_id=row[0], attempt_id=row[1], attempt=row[2],
                                    expired=bool(row[3]))
                for row in rows}

    def cancel_reasons(self, job_ids: Sequence[int]) -> dict[int, str]:
        """The reason of each of ``job_ids``' cancel requests (rule 59 (cancel-reason-kept)), ""
        where none was given; read only when a heartbeat reports a cancel request."""
        if not job_ids:
            return {}
        with self.cursor() as cur:
            cur.execute(self.sql["cancel_reasons"], {"ids": self.ids_param(job_ids)})
            return {row[0]: row[1] or "" for row in cur.fetchall()}

    @staticmethod
    def ids_param(ids: Sequence[int]) -> Any:
        """Job ids in this engine's parameter form (an array; SQLite: JSON)."""
        return list(ids)

    @staticmethod
    def queues_param(queues: Sequence[str]) -> Any:
        """Queue names in this engine's parameter form (an array; SQLite: JSON)."""
        return list(queues)

    def make_retries_due(self, queues: Sequence[str]) -> int:
        """Make every job of ``queues`` queued for a retry runnable now, whatever its backoff,
        on the database's clock; return how many (the test helpers' ``run_jobs(retries=True)``,
        rule 74 (run-jobs-real-path))."""
        with self.cursor() as cur:
            cur.execute(self.sql["retries_due"], {"queues": self.queues_param(queues),
                                                  "now": self.now_param()})
            return cur.rowcount

    # -- durable steps and events --------------------------------------------------------------

    def save_step(self, *, job_id: int, token: str, attempt: int, name: str, status: str,
                  result_json: str | None, wait_seconds: float | None) -> SavedStep | None:
        """Store a step (``done``, or ``waiting`` for ``wait_seconds``), fenced on ``token``;
        None when the run no longer owns the job."""
        params = {"job_id": job_id, "token": self.token_param(token), "attempt": attempt,
                  "name": name, "status": status, "result_json": result_json,
                  "wait_seconds": wait_seconds, "now": self.now_param()}
        with self.cursor() as cur:
            cur.execute(self.sql["step_save"], params)
            row = cur.fetchone()
        if row is None:
            return None
        return SavedStep(wait_until=None if row[1] is None else self.parse_time(row[1]))

    def save_progress(self, job_id: int, token: str, progress: dict[str, Any]) -> bool:
        """Store a run's progress, fenced on ``token`` (rule 79 (progress-throttled-fenced)); False
        when the run no longer owns the job."""
        params = {"job_id": job_id, "token": self.token_param(token),
                  "progress": json.dumps(progress, separators=(",", ":"))}
        with self.cursor() as cur:
            cur.execute(self.sql["progress_save"], params)
            return cur.fetchone() is not None

    def find_event(self, *, job_id: int, name: str, match: dict[str, Any],
                   after: int) -> tuple[int, Any] | None:
        """The first event named ``name`` matching ``match`` that job ``job_id`` may consume:
        newer than id ``after`` and sent no earlier than the job was enqueued (compared in SQL,
        in the database's own time format). ``(id, payload)``, or None."""
        with self.cursor() as cur:
            self.execute_unprepared(cur, "event_find", {
                "name": name, "match": json.dumps(match), "after": after, "job_id": job_id})
            row = cur.fetchone()
        return None if row is None else (row[0], self.parse_json(row[1]))

    def send_event(self, name: str, payload: dict[str, Any]) -> int:
        """Record an event and wake the jobs waiting for it, in the caller's transaction.

        On PostgreSQL the event name's advisory lock is taken shared first: senders never wait
        for each other, only for a settle that is putting a run to wait on this event (which
        takes it exclusively), so the event is either seen by that settle or sees the wait.
        SQLite needs no lock: the insert makes this transaction its one writer until it commits,
        so such a settle runs wholly before or wholly after it.
        """
        body = json.dumps(payload, separators=(",", ":"), allow_nan=False)
        with transaction.atomic(using=self.alias), self.cursor() as cur:
            if "event_send_lock" in self.sql:
                cur.execute(self.sql["event_send_lock"], {"name": name})
            cur.execute(self.sql["event_insert"], {"name": name, "payload": body,
                                                   "now": self.now_param()})
            event_id = cur.fetchone()[0]
            cur.execute(self.sql["event_wake"], {"name": name, "payload": body,
                                                 "event_id": event_id, "now": self.now_param()})
        return event_id

    def notify(self, queues: Sequence[str]) -> None:
        """Wake idle workers of ``queues`` on commit (PostgreSQL; elsewhere they poll)."""
        if "notify" in self.sql and queues:
            with self.cursor() as cur:
                cur.execute(self.sql["notify"], {"queues": sorted(set(queues))})

    def notify_cancel(self, job_ids: Sequence[int]) -> None:
        """Tell the workers running ``job_ids`` on commit that they were asked to stop
        (PostgreSQL; elsewhere the heartbeat finds the request)."""
        if "notify_cancel" in self.sql and job_ids:
            with self.cursor() as cur:
                cur.execute(self.sql["notify_cancel"], {"ids": self.ids_param(job_ids)})

    def gauge_rows(self) -> tuple[list[tuple[str, int, float]], list[tuple[str, int]]]:
        """What the gauges show, in two statements: per queue ``(queue, runnable jobs, seconds
        the oldest has been due)``, and per key ``(key, fleet slots held)``."""
        with self.cursor() as cur:
            cur.execute(self.sql["gauge_queues"], {"now": self.now_param()})
            queues = [(row[0], int(row[1]), max(0.0, float(row[2] or 0.0)))
                      for row in cur.fetchall()]
            cur.execute(self.sql["gauge_slots"], {"now": self.now_param()})
            slots = [(row[0], int(row[1])) for row in cur.fetchall()]
        return queues, slots

    def db_now(self) -> datetime:
        """The database's clock (or the injected one)."""
        with self.cursor() as cur:
            cur.execute(self.sql["db_now"], {"now": self.now_param()})
            return self.parse_time(cur.fetchone()[0])

    # -- workers ------------------------------------------------------------------------------

    def worker_upsert(self, worker_id: str, hostname: str, pid: int, threads: int,
                      queues: Sequence[str], *, visibility_timeout: float | None = None,
                      heartbeat_interval: float | None = None, jobs: Sequence[str] = (),
                      in_flight: int = 0, overrunning: Sequence[Mapping[str, Any]] = (),
                      started_at: datetime | None = None) -> datetime:
        """Register this worker process, with the lease timings it runs under, the job names
        it knows, its runs in flight and overrunning bodies; return when it started.

        ``started_at`` is the start a row written again keeps (None: now)."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_upsert"], {
                "id": worker_id, "hostname": hostname, "pid": pid, "threads": threads,
                "queues": json.dumps(list(queues)), "now": self.now_param(),
                "visibility_timeout": visibility_timeout,
                "heartbeat_interval": heartbeat_interval, "jobs": json.dumps(sorted(jobs)),
                "in_flight": in_flight,
                "overrunning": json.dumps(list(overrunning), default=str) if overrunning
                else None,
                "started_at": None if started_at is None else self.format_time(started_at)})
            return self.parse_time(cur.fetchone()[0])

    def worker_jobs(self, worker_id: str, jobs: Sequence[str]) -> None:
        """Record the job names this worker knows now (it resolved more since it started)."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_jobs"], {"id": worker_id,
                                                  "jobs": json.dumps(sorted(jobs))})

    def worker_overrunning(self, worker_id: str, runs: Sequence[Mapping[str, Any]]) -> None:
        """Record the runs of this worker still executing past their timeout
        (rule 56 (overrun-reported))."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_overrunning"], {
                "id": worker_id, "overrunning": json.dumps(list(runs), default=str)})

    def worker_touch(self, worker_id: str, in_flight: int) -> bool:
        """Keep this worker's row fresh; False when the row is gone (pruned, deleted)."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_touch"], {"id": worker_id, "in_flight": in_flight,
                                                   "now": self.now_param()})
            return cur.fetchone() is not None

    def worker_stop(self, worker_id: str) -> None:
        """Mark this worker stopped."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_stop"], {"id": worker_id, "now": self.now_param()})

    # -- helpers shared by the engines ---------------------------------------------------------

    def _settlement_row(self, s: Settlement) -> dict[str, Any]:
        # One run of a JSON settle batch: SQLite's (PostgreSQL's settle takes one array per
        # column instead, ``settle_arrays``). A key left out reads as
        # NULL, as a JSON null does, and the query reads a missing wait_after and steps as 0 and
        # []: a plain success sends half the text to encode, and to parse.
        row: dict[str, Any] = {
            "id": s.job_id,
            "token": s.token,
            "status": s.status,
            "attempt_delta": s.attempt_delta,
            # Finite and within a century: an infinite or huge delay would overflow the
            # timestamp arithmetic and refuse the whole batch (rule 31 (bounded-outcomes)).
            "delay": clamp_delay(float(s.delay)),
            "attempt_no": s.attempt_no,
        }
        if s.outcome is not None:
            row["outcome"] = s.outcome
        if s.started_at is not None:
            row["started_at"] = self._json_time(s.started_at)
        if s.error is not None:
            row["error"] = storable_text(s.error)
        if s.result_json is not None:
            row["result_json"] = s.result_json
        if s.slot_key is not None:
            row["slot_key"] = s.slot_key
        if s.slot is not None:
            row["slot"] = s.slot
        if s.carries_wait:
            row.update(wait_event=s.wait_event, wait_match=s.wait_match, wait_after=s.wait_after)
        if s.carries_steps:
            row.update(steps_run=list(s.steps_run), steps_replayed=list(s.steps_replayed))
        if s.extends is not None:
            row["extends"] = s.extends
        if s.on_row:
            row["on_row"] = True
        return row

    def _new_job_row(self, job: NewJob) -> dict[str, Any]:
        return {
            "name": job.name,
            "queue": job.queue,
            "priority": job.priority,
            "args": job.args,
            "kwargs": job.kwargs,
            "max_attempts": job.max_attempts,
            "delay": float(job.delay),
            "run_at": None if job.run_at is None else self._json_time(job.run_at),
            "traceparent": job.traceparent,
            "tracestate": job.tracestate,
            "enqueued_by": job.enqueued_by,
            "concurrency_key": job.concurrency_key,
            "timeout": job.timeout,
            "expires_in": job.expires_in,
            "tags": list(job.tags),
        }

    def _json_time(self, value: datetime) -> str:
        """A time inside a JSON batch parameter, in the form this engine compares."""
        return value.isoformat()


def dumps_batch(rows: object) -> str:
    """A settle batch, or one of its JSON values, as JSON. ``allow_nan=False``: Python would
    write ``NaN`` or ``Infinity``, which is no JSON, and the database would refuse the whole
    batch; raised here, it is a refusal of one row's values that the completer isolates (rules
    30, 31)."""
    return json.dumps(rows, separators=(",", ":"), allow_nan=False)


def check_one_per_job(settlements: Sequence[Settlement]) -> None:
    """Refuse a batch settling one job twice: the statement matches rows by id, so a stale
    outcome could be applied under the newer run's token (rule 4 (fenced-settle))."""
    if len({s.job_id for s in settlements}) != len(settlements):
        raise ValueError("a settle batch holds two settlements of the same job; settle them "
                         "in separate calls")
