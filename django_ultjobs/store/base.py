"""The store protocol: the only place that runs SQL against the job tables.

One protocol, one implementation per engine (``postgresql.py``, ``sqlite.py``) answering the same
named queries identically; ``tests/conformance`` runs one suite against both. Every method uses
the calling thread's own Django connection for ``alias`` (Django keeps one per thread), through
the cursor ``connection.cursor()`` gives (rule 41): the ORM is skipped, not Django's cursor
wrappers, so ``assertNumQueries``, ``connection.execute_wrapper`` and the tools built on them see
every statement, and enqueue joins the caller's transaction because it is the same connection.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..jsonargs import storable_text
from ..retry import clamp_delay
from ..sql import django_queries
from .decoding import decode_arguments

#: A clock the store reads instead of the database's, for tests only; None means the database's.
Clock = Callable[[], datetime]


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job to insert: everything enqueue knows before the database assigns an id."""

    name: str
    queue: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    max_attempts: int
    delay: float = 0.0
    run_at: datetime | None = None
    traceparent: str = ""
    tracestate: str = ""
    enqueued_by: str = ""


@dataclass(frozen=True, slots=True)
class EnqueuedJob:
    """What the database assigned to a new job row."""

    id: int
    visible_at: datetime
    created_at: datetime


# The two records made once per job on the worker's hot path are slotted but not frozen: a frozen
# dataclass sets each field through object.__setattr__, a cost the claim loop pays per job
# (docs/performance.md, item 28). Nothing mutates them after construction.
@dataclass(slots=True)
class ClaimedJob:
    """One job this worker now holds under ``token`` until its lease lapses."""

    id: int
    name: str
    queue: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    attempt: int
    max_attempts: int
    token: str
    traceparent: str
    tracestate: str
    enqueued_by: str
    cancel_requested: bool
    claimed_at: datetime
    #: The worker whose lease lapsed when this claim is a re-delivery of a running row.
    redelivered_from: str | None = None
    previous_claimed_at: datetime | None = None
    #: True when the row was waiting (a durable sleep or event wait) and woke: not a new attempt.
    woke: bool = False
    #: Why the stored arguments cannot be decoded (then args and kwargs are empty), or None:
    #: the worker fails such a job at once instead of running it (rule 15).
    undecodable: str | None = None
    #: When the row was due, just before this claim (enqueued, scheduled, retried or woken):
    #: the start of the job's wait (``ultjobs.job.wait``). None from a store that does not say.
    due_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """What one claim asks for; ``JobStore.claim`` describes each field."""

    worker_id: str
    queues: Sequence[str]
    limit: int
    visibility_timeout: float
    caps: Mapping[str, int]
    uncapped: bool = True
    kept: Mapping[str, int] = field(default_factory=dict)

    def kept_of(self, name: str) -> int:
        """The fleet slots this worker kept for capped kind ``name``."""
        return self.kept.get(name, 0)


#: What a claimed row was just before the claim: its status, its worker, its claim time and
#: when it was due (its ``visible_at``).
Previous = tuple[str, str | None, Any, Any]


class ClaimBatch(list[ClaimedJob]):
    """The jobs one claim took, and whether it left runnable jobs of uncapped kinds behind.

    ``others_left``: True when the scan of the uncapped kinds found runnable rows that the
    claim's limit cut (they rank below everything it took); False when everything that scan
    found was taken (possibly nothing; there may be more beyond what it looked at, which the
    worker tells by whether the claim took any), or when the scan was left out; None when the
    store does not say, and the worker then reads a full claim as "maybe crowded out". Only
    "found nothing and took nothing" lets the worker leave that scan out of its next claims.
    """

    def __init__(self, jobs: Iterable[ClaimedJob] = (), *, others_left: bool | None = None
                 ) -> None:
        super().__init__(jobs)
        self.others_left = others_left


@dataclass(slots=True)
class Settlement:
    """How one run ends: the row's next state, fenced on ``token``, and the attempt to record."""

    job_id: int
    token: str
    status: str
    attempt_no: int
    started_at: datetime | None
    outcome: str | None
    #: Added to the row's attempt count: -1 hands the attempt back (nothing was burned).
    attempt_delta: int = 0
    #: Seconds from now until a queued/waiting row is visible again.
    delay: float = 0.0
    error: str | None = None
    result_json: str | None = None
    slot_key: str | None = None
    slot: int | None = None
    #: For status "waiting" on an event: what wakes it (see ``send_event``).
    wait_event: str | None = None
    wait_match: dict[str, Any] | None = None
    wait_after: int = 0
    steps_run: tuple[str, ...] = ()
    steps_replayed: tuple[str, ...] = ()
    #: The id of an attempt row this settle adds a claim to instead of recording a new one:
    #: the park of a job no worker knows, continuing its episode (rule 12). Recorded anew if
    #: that row is gone.
    extends: int | None = None


@dataclass(frozen=True, slots=True)
class ParkEpisode:
    """The latest attempt row of a claimed job, when it is an unknown-job park (rule 12)."""

    job_id: int
    #: The attempt row, and the attempt number it recorded.
    attempt_id: int
    attempt: int
    #: Whether the episode began (its row's ``started_at``) at least the timeout ago.
    expired: bool


@dataclass(frozen=True, slots=True)
class SavedStep:
    """A step row written under the run's token; ``wait_until`` for a pending wait."""

    wait_until: datetime | None


@dataclass(frozen=True, slots=True)
class LostAttempt:
    """An attempt whose worker never reported back; recorded by whoever finds it lapsed."""

    job_id: int
    attempt: int
    worker_id: str
    started_at: datetime | None
    outcome: str
    error: str


@dataclass(frozen=True, slots=True)
class SlotHold:
    """A fleet slot held by ``holder`` until ``expires_at`` (database clock)."""

    key: str
    slot: int
    holder: str
    expires_at: datetime


class SlotStore(ABC):
    """Fleet slots as rows, one per held ``(key, slot)``, every expiry on the database clock."""

    def acquire(self, key: str, limit: int, ttl: float, holder: str) -> SlotHold | None:
        """Take the lowest free slot of ``key`` below ``limit`` in one statement; None when all
        are held."""
        return self.acquire_many(key, limit, ttl, [holder]).get(holder)

    def acquire_many(self, key: str, limit: int, ttl: float,
                     holders: Sequence[str]) -> dict[str, SlotHold]:
        """Take one free slot of ``key`` for each of ``holders`` (lowest slots first, in holder
        order) in ONE statement; holders missing from the answer got none."""
        if not holders:
            return {}
        params = {"key": key, "limit": limit, "ttl": float(ttl),
                  "holders": self.holders_param(holders), "now": self.now_param()}
        with self.cursor() as cur:
            cur.execute(self.sql["slot_acquire"], params)
            rows = cur.fetchall()
        return {
            row[2]: SlotHold(key=row[0], slot=row[1], holder=row[2],
                              expires_at=self.parse_time(row[3]))
            for row in rows
        }

    @staticmethod
    def holders_param(holders: Sequence[str]) -> Any:
        """Holders in this engine's parameter form (an array; SQLite: JSON)."""
        return list(holders)

    def renew_many(self, held: Sequence[SlotHold], ttl: float) -> set[tuple[str, int, str]]:
        """Extend each slot still held by its holder and unexpired, in one statement; return the
        ``(key, slot, holder)`` of each one renewed. A slot missing from the answer is lost
        (rule 7). The holder is part of the answer: two holds of one slot (one lapsed, then
        taken again) must never be told apart by ``(key, slot)`` alone."""
        if not held:
            return set()
        with self.cursor() as cur:
            cur.execute(self.sql["slot_renew"], {**self.held_params(held), "ttl": float(ttl),
                                                  "now": self.now_param()})
            return {(row[0], row[1], row[2]) for row in cur.fetchall()}

    def release_many(self, held: Sequence[SlotHold]) -> None:
        """Hand back slots in one statement; one that another holder has taken meanwhile is left
        alone (fenced on holder)."""
        if not held:
            return
        with self.cursor() as cur:
            cur.execute(self.sql["slot_release"], self.held_params(held))

    @staticmethod
    @abstractmethod
    def held_params(held: Sequence[SlotHold]) -> dict[str, Any]:
        """The held slots as this engine's parameters for the renew and release queries."""

    def renew(self, held: SlotHold, ttl: float) -> bool:
        """Extend one slot hold: False when another holder took it OR it lapsed (rule 7)."""
        return (held.key, held.slot, held.holder) in self.renew_many([held], ttl)

    def release(self, held: SlotHold) -> None:
        """Hand back one slot."""
        self.release_many([held])


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
        """The fleet-slot store, or None for an engine that has none (rule 10 refuses to start)."""
        return self

    @property
    def connection(self) -> BaseDatabaseWrapper:
        """The calling thread's Django connection for this store's alias."""
        return connections[self.alias]

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        """Yield Django's cursor on this thread's connection, errors as Django's.

        Django's cursor wrapper, not the driver's cursor (rule 41): ``execute_wrapper`` hooks,
        the queries log (``assertNumQueries``, ``CaptureQueriesContext``, ``DEBUG``) and tools
        that patch ``connection.cursor()`` see every statement of the store.

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
        waited out (rule 30). Engines add their own codes."""
        return isinstance(exc, (ValueError, TypeError, OverflowError, RecursionError))

    def refusal_reason(self, exc: BaseException) -> str:
        """The database's own words for a refusal, in one line (engines add their detail)."""
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")

    def schema_missing(self, exc: BaseException) -> bool:
        """Whether ``exc`` says a table or column of this package does not exist in the
        database: a database nobody migrated, which no wait will fix (engines override)."""
        return False

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
            EnqueuedJob(id=r[0], visible_at=self.parse_time(r[1]), created_at=self.parse_time(r[2]))
            for r in rows
        ]

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
    ) -> ClaimBatch:
        """Claim up to ``limit`` runnable jobs in one write, skipping kinds whose caps are full.

        ``caps``: per capped kind (``@job(concurrency=N)``), its fleet-wide limit.

        ``uncapped=False`` claims only the capped kinds of ``caps``: the scan for every other
        kind walks past each queued run of a capped kind, so a worker that just found no other
        kind runnable may leave it out for a while (see the worker's claim loop).

        ``kept``: per capped kind, the slots this worker holds between runs; the claim may take
        that many runs of the kind beyond the fleet's free slots (the worker hands them over)."""
        if limit <= 0:
            return ClaimBatch()
        return self.claim_jobs(ClaimRequest(
            worker_id=worker_id, queues=queues, limit=limit,
            visibility_timeout=float(visibility_timeout), caps=caps, uncapped=uncapped,
            kept=kept or {}))

    @abstractmethod
    def claim_jobs(self, request: ClaimRequest) -> ClaimBatch:
        """The claim ``request`` asks for (its limit at least 1): what each engine implements
        of ``claim``."""

    def claimed_batch(self, rows: Sequence[Sequence[Any]], previous: Sequence[Previous],
                      token: str, others_left: bool | None) -> ClaimBatch:
        """The jobs of a claim's ``UPDATE … RETURNING`` rows, in claim order (priority, then id).

        Each row starts with the columns both engines' claim queries return, in this order: id,
        name, queue, priority, args, kwargs, attempt, max_attempts, traceparent, tracestate,
        enqueued_by, cancel_requested, claimed_at. ``previous[i]`` is what ``rows[i]`` was just
        before the claim; ``token`` the claim's token in its canonical text form.
        """
        batch = ClaimBatch(others_left=others_left)
        decoded = decode_arguments(rows, 4)
        for r, (args, kwargs, undecodable), prev in zip(rows, decoded, previous, strict=True):
            prev_status, prev_worker, prev_claimed_at, due = prev
            redelivered = prev_status == "running"
            batch.append(ClaimedJob(
                id=r[0], name=r[1], queue=r[2], priority=r[3], args=args, kwargs=kwargs,
                undecodable=undecodable, attempt=r[6], max_attempts=r[7], token=token,
                traceparent=r[8] or "", tracestate=r[9] or "", enqueued_by=r[10] or "",
                cancel_requested=bool(r[11]), claimed_at=self.parse_time(r[12]),
                redelivered_from=prev_worker if redelivered else None,
                previous_claimed_at=(self.parse_time(prev_claimed_at)
                                     if redelivered and prev_claimed_at else None),
                woke=prev_status == "waiting",
                due_at=self.parse_time(due),
            ))
        batch.sort(key=lambda job: (-job.priority, job.id))
        return batch

    @abstractmethod
    def heartbeat(
        self, runs: Sequence[tuple[int, str]], visibility_timeout: float
    ) -> dict[int, bool]:
        """Extend the lease of each ``(job id, token)``; return ``{id: cancel_requested}`` for
        the runs still held. A run missing from the answer is lost (rule 2)."""

    @abstractmethod
    def settle(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
        """Apply each settlement only under its token (rule 4), recording its attempt; return the
        ids that applied.

        At most one settlement per job: the rows are matched to the batch by id."""

    def settle_landed(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
        """The ids of ``settlements`` (each with an outcome) whose attempt this worker already
        recorded: a settle that committed though its reply was lost (rule 32). Matched on job,
        attempt, worker, start time, outcome and error, so the attempt a re-claimer records for a
        lapsed lease never passes for it."""
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

    @staticmethod
    def ids_param(ids: Sequence[int]) -> Any:
        """Job ids in this engine's parameter form (an array; SQLite: JSON)."""
        return list(ids)

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
                      heartbeat_interval: float | None = None, jobs: Sequence[str] = ()
                      ) -> None:
        """Register this worker process, with the lease timings it runs under and the job
        names it knows."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_upsert"], {
                "id": worker_id, "hostname": hostname, "pid": pid, "threads": threads,
                "queues": json.dumps(list(queues)), "now": self.now_param(),
                "visibility_timeout": visibility_timeout,
                "heartbeat_interval": heartbeat_interval, "jobs": json.dumps(sorted(jobs))})

    def worker_jobs(self, worker_id: str, jobs: Sequence[str]) -> None:
        """Record the job names this worker knows now (it resolved more since it started)."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_jobs"], {"id": worker_id,
                                                  "jobs": json.dumps(sorted(jobs))})

    def worker_touch(self, worker_id: str, in_flight: int) -> None:
        """Keep this worker's row fresh."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_touch"], {"id": worker_id, "in_flight": in_flight,
                                                   "now": self.now_param()})

    def worker_stop(self, worker_id: str) -> None:
        """Mark this worker stopped."""
        with self.cursor() as cur:
            cur.execute(self.sql["worker_stop"], {"id": worker_id, "now": self.now_param()})

    # -- helpers shared by the engines ---------------------------------------------------------

    def _settlement_row(self, s: Settlement) -> dict[str, Any]:
        return {
            "id": s.job_id,
            "token": s.token,
            "status": s.status,
            "attempt_delta": s.attempt_delta,
            # Finite and within a century: an infinite or huge delay would overflow the
            # timestamp arithmetic and refuse the whole batch (rule 31).
            "delay": clamp_delay(float(s.delay)),
            "error": None if s.error is None else storable_text(s.error),
            "result_json": s.result_json,
            "outcome": s.outcome,
            "attempt_no": s.attempt_no,
            "started_at": None if s.started_at is None else self._json_time(s.started_at),
            "slot_key": s.slot_key,
            "slot": s.slot,
            "wait_event": s.wait_event,
            "wait_match": s.wait_match,
            "wait_after": s.wait_after,
            "steps_run": list(s.steps_run),
            "steps_replayed": list(s.steps_replayed),
            "extends": s.extends,
        }

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
        }

    def _json_time(self, value: datetime) -> str:
        """A time inside a JSON batch parameter, in the form this engine compares."""
        return value.isoformat()


def dumps_batch(rows: list[dict[str, Any]]) -> str:
    """A settle batch as one JSON parameter. ``allow_nan=False``: Python would write ``NaN`` or
    ``Infinity``, which is no JSON, and PostgreSQL would refuse the whole batch; raised here, it
    is a refusal of one row's values that the completer isolates (rules 30, 31)."""
    return json.dumps(rows, separators=(",", ":"), allow_nan=False)


def settlement_size(s: Settlement) -> int:
    """Roughly the bytes ``s`` adds to a settle batch: its result and error, plus the rest of
    its row. The completer bounds batches, and the worker its backlog, by this."""
    return 400 + len(s.result_json or "") + len(s.error or "")


def check_one_per_job(settlements: Sequence[Settlement]) -> None:
    """Refuse a batch settling one job twice: the statement matches rows by id, so a stale
    outcome could be applied under the newer run's token (rule 4)."""
    if len({s.job_id for s in settlements}) != len(settlements):
        raise ValueError("a settle batch holds two settlements of the same job; settle them "
                         "in separate calls")
