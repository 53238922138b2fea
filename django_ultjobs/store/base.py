"""The store protocol: the only place that runs SQL against the job tables.

One protocol, one implementation per engine (``postgresql.py``, ``sqlite.py``) answering the same
named queries identically; ``tests/conformance`` runs one suite against both. The protocol is
built of parts: the connection and parameter forms (``connection.py``), fleet slots
(``slots.py``), what a body writes (``body_rows.py``), the workers table (``worker_rows.py``), and
here the jobs: enqueue, claim, heartbeat, settle.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..core.jsonargs import storable_text
from ..core.retry import clamp_delay
from .body_rows import BodyRows
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
    Settlement,
)
from .slots import SlotStore
from .unique_batches import insertion_order, match_inserted
from .worker_rows import WorkerRows


class JobStore(WorkerRows, BodyRows, SlotStore):
    """Claim, heartbeat, settle and enqueue jobs; hold fleet slots (``slot_store``)."""

    @property
    def slot_store(self) -> SlotStore | None:
        """The fleet-slot store, or None for an engine that has none (rule 10 (cap-kept-or-refused)
        refuses to start)."""
        return self

    # -- jobs ---------------------------------------------------------------------------------

    def enqueue(self, jobs: Sequence[NewJob]) -> list[EnqueuedJob]:
        """Insert ``jobs`` in one statement on the caller's connection (and transaction)."""
        if not jobs:
            return []
        payload = json.dumps([self.new_job_row(job) for job in jobs], separators=(",", ":"))
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
        return {**self.new_job_row(job), "unique_key": job.unique_key,
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

    def make_retries_due(self, queues: Sequence[str]) -> int:
        """Make every job of ``queues`` queued for a retry runnable now, whatever its backoff,
        on the database's clock; return how many (the test helpers' ``run_jobs(retries=True)``,
        rule 74 (run-jobs-real-path))."""
        with self.cursor() as cur:
            cur.execute(self.sql["retries_due"], {"queues": self.queues_param(queues),
                                                  "now": self.now_param()})
            return cur.rowcount

    # -- notices and clocks ----------------------------------------------------------------

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

    def gauge_rows(self, limit: int) -> tuple[list[tuple[str, int, float]],
                                              list[tuple[str, int]]]:
        """What the gauges show, in two statements: per queue ``(queue, runnable jobs, seconds
        the oldest has been due)``, the jobs counted up to ``limit`` per live status, and per
        key ``(key, fleet slots held)``."""
        with self.cursor() as cur:
            cur.execute(self.sql["gauge_queues"], {"now": self.now_param(), "limit": limit})
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

    def new_job_row(self, job: NewJob) -> dict[str, Any]:
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
