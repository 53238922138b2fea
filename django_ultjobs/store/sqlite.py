"""The SQLite store: conditional ``UPDATE … RETURNING`` in short ``BEGIN IMMEDIATE`` writes.

SQLite has one writer at a time, so a statement (or an immediate transaction) is atomic against
every other worker thread and process: that, not row locks, is what makes a claim exclusive here.
Batches travel as one JSON parameter (``json_each``), so no batch is ever more than one statement.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections, transaction

from ..core.rate_limits import gcra_take
from . import dependencies
from .base import JobStore, check_one_per_job, dumps_batch
from .records import (
    ClaimedJob,
    ClaimRequest,
    EnqueuedJob,
    NewJob,
    RateTaken,
    Settlement,
    SlotHold,
)

#: SQLITE_TOOBIG, SQLITE_CONSTRAINT, SQLITE_MISMATCH: a statement refused for its values.
_REFUSED_CODES = (sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_MISMATCH)

#: A claim candidate: id, priority, visible_at (its rank), then status, worker_id and claimed_at
#: (what it was before the claim: ``Previous``, with visible_at last).
_Candidate = tuple[int, int, str, str, str | None, str | None]

#: Django's SQLite transaction modes that begin a transaction as the writer (in WAL the two are
#: one: EXCLUSIVE takes the same lock as IMMEDIATE).
WRITER_MODES = frozenset({"IMMEDIATE", "EXCLUSIVE"})


def transaction_mode(alias: str) -> str:
    """How the project's transactions on SQLite alias ``alias`` begin (``DEFERRED`` unless
    ``OPTIONS["transaction_mode"]`` says otherwise), upper case."""
    options = connections[alias].settings_dict.get("OPTIONS") or {}
    return str(options.get("transaction_mode") or "DEFERRED").upper()


class SQLiteStore(JobStore):
    """Jobs and fleet slots on SQLite (3.35+: RETURNING, UPDATE … FROM, json_each)."""

    vendor = "sqlite"
    dialect = "sqlite"

    def schema_missing(self, exc: BaseException) -> bool:
        # SQLite has no error codes for these: its messages are the only sign.
        text = str(exc)
        return any(sign in text for sign in ("no such table", "no such column",
                                             "has no column named"))

    def refuses(self, exc: BaseException) -> bool:
        # SQLITE_TOOBIG (a string or the batch over SQLITE_LIMIT_LENGTH), SQLITE_CONSTRAINT,
        # SQLITE_MISMATCH; extended codes keep the primary one in their low byte. BUSY, LOCKED,
        # FULL and IOERR are outages to wait out (rule 30 (refused-outcome-no-wedge)).
        if super().refuses(exc):
            return True
        for error in (exc, exc.__cause__):
            code = getattr(error, "sqlite_errorcode", None)
            if code is not None and (code & 0xFF) in _REFUSED_CODES:
                return True
        return False

    @staticmethod
    def format_time(value: datetime) -> str:
        """Django's SQLite text form: UTC, no offset, microseconds."""
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ", timespec="microseconds")

    @staticmethod
    def parse_time(value: Any) -> datetime:
        """Read a SQLite time (text, or a datetime when Django's converter ran) as aware UTC."""
        parsed = value if isinstance(value, datetime) else datetime.fromisoformat(value)
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)

    @staticmethod
    def token_param(token: str) -> Any:
        # Django keeps a UUIDField as 32 hex digits on SQLite.
        return uuid.UUID(token).hex

    def _json_time(self, value: datetime) -> str:
        return self.format_time(value)

    def new_job_row(self, job: NewJob) -> dict[str, Any]:
        row = super().new_job_row(job)
        if job.run_at is not None:
            # The clock keeps milliseconds: a run_at between two of them is due at the later
            # one. Cut down to the earlier, the job could start before its run_at, which the
            # Tasks contract forbids (started_at >= run_after).
            extra = job.run_at.microsecond % 1000
            due = job.run_at + timedelta(microseconds=1000 - extra) if extra else job.run_at
            row["run_at"] = self._json_time(due)
        return row

    def enqueue_unique(self, jobs: Sequence[NewJob]) -> list[EnqueuedJob | None]:
        """``JobStore.enqueue_unique``: one statement when no key is held. A key held makes two
        more: the expired holders of the held keys give them up (``unique_release``), and the
        jobs those keys held back are inserted again. Each statement is its own write (or part
        of the caller's transaction): the unique index, not a transaction around them, keeps
        one holder per key."""
        out = super().enqueue_unique(jobs)
        held = [i for i, row in enumerate(out) if row is None]
        if held:
            # A job held back has a key: only keyed inserts are skipped.
            keys = {(jobs[i].name, str(jobs[i].unique_key)) for i in held}
            if self.release_keys(keys):
                again = super().enqueue_unique([jobs[i] for i in held])
                for i, row in zip(held, again, strict=True):
                    out[i] = row
        return out

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """A cursor inside one immediate write transaction (or the caller's, if one is open).

        IMMEDIATE takes the write lock up front: a deferred transaction that reads, then writes,
        can fail with "database is locked" at the write instead of waiting its turn.
        """
        with self.cursor() as cur:
            if self.connection.in_atomic_block:
                yield cur
                return
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")

    @contextmanager
    def write_transaction(self) -> Iterator[None]:
        """``atomic()`` begun as the writer (``BEGIN IMMEDIATE``), whatever the project's
        ``OPTIONS["transaction_mode"]`` (rule 21 (sqlite-begins-as-writer)).

        Under Django's default (deferred) mode, a transaction that reads first holds a snapshot;
        if another connection commits before its first write, that write fails at once with
        "database is locked" (SQLite cannot move a snapshot forward, so its busy timeout never
        applies). Begun as the writer, it waits its turn under the busy timeout instead, and
        nobody can write between its reads and its writes.

        Inside an ``atomic`` block already open on this connection it is a savepoint: the
        transaction began as the caller's did, and the mode cannot change after ``BEGIN``.
        """
        conn = self.connection
        if conn.in_atomic_block:
            with transaction.atomic(using=self.alias):
                yield
            return
        # Connected first: connecting sets ``transaction_mode`` from the settings again.
        conn.ensure_connection()
        project_mode = conn.transaction_mode
        conn.transaction_mode = "IMMEDIATE"
        try:
            with transaction.atomic(using=self.alias):
                # BEGIN has run; savepoints and later transactions are the project's again.
                conn.transaction_mode = project_mode
                yield
        finally:
            conn.transaction_mode = project_mode

    def claim_jobs(self, request: ClaimRequest) -> list[ClaimedJob]:
        """Claim in one write transaction: choose the candidates, then take them."""
        now = self.now_param()
        with self._write() as cur:
            candidates, slot_keys = self._choose_candidates(cur, request, now)
            if not candidates:
                return []
            # Stored as Django's SQLite UUID form (hex), handed out in the canonical form
            # PostgreSQL returns, so a ClaimedJob looks the same on both engines.
            token = uuid.uuid4()
            rows = self._take(cur, list(candidates), request, token.hex, now)
        # What each row was (status, worker, claim time), then when it was due.
        previous = [(*candidates[r[0]][3:], candidates[r[0]][2]) for r in rows]
        return self.claimed_batch(rows, previous, str(token), slot_keys=slot_keys)

    def _choose_candidates(self, cur: Any, request: ClaimRequest, now: Any
                           ) -> tuple[dict[int, _Candidate], dict[int, str]]:
        """The rows this claim tries to take, by id; the slot keys of the chosen rows of kinds
        capped per key."""
        uncapped: list[_Candidate] = []
        if request.uncapped or not request.caps:
            uncapped = self._uncapped_candidates(cur, request, now)
        keyed, slot_keys = self._keyed_candidates(cur, request, now)
        rows = uncapped + self._capped_candidates(cur, request, now) + keyed
        # The claim order across uncapped and capped kinds: priority, then due time, then id.
        rows.sort(key=lambda row: (-row[1], row[2], row[0]))
        chosen = {row[0]: row for row in rows[:request.limit]}
        return chosen, {i: k for i, k in slot_keys.items() if i in chosen}

    def _uncapped_candidates(self, cur: Any, request: ClaimRequest, now: Any
                             ) -> list[_Candidate]:
        """The first runnable rows, in claim order, of the kinds without a cap."""
        cur.execute(self.sql["claim_candidates"], {
            "queues": json.dumps(list(request.queues)), "capped": json.dumps(list(request.caps)),
            "limit": request.limit, "now": now,
        })
        return cur.fetchall()

    def _capped_candidates(self, cur: Any, request: ClaimRequest, now: Any
                           ) -> list[_Candidate]:
        """The first runnable rows of each capped kind, no more than it has free fleet slots
        (counted in this write transaction, so no other claim takes one meanwhile)."""
        per_job = [(name, limit) for name, limit in request.caps.items()
                   if name not in request.keyed]
        if not per_job:
            return []
        cur.execute(self.sql["claim_caps"], {
            "caps": json.dumps([[name, limit, request.kept_of(name)] for name, limit in per_job]),
            "now": now,
        })
        free_slots = cur.fetchall()
        queues = json.dumps(list(request.queues))
        rows: list[_Candidate] = []
        for name, free in free_slots:
            if free > 0:
                cur.execute(self.sql["claim_capped_candidates"], {
                    "name": name, "queues": queues, "limit": min(free, request.limit),
                    "now": now,
                })
                rows.extend(cur.fetchall())
        return rows

    def _keyed_candidates(self, cur: Any, request: ClaimRequest, now: Any
                          ) -> tuple[list[_Candidate], dict[int, str]]:
        """The first runnable rows of each kind capped per key (rule 50 (per-key-cap)), past its
        full keys and no more per key than it has free slots; and each one's slot key."""
        if not request.keyed:
            return [], {}
        cur.execute(self.sql["claim_key_held"], {"now": now})
        held = dict(cur.fetchall())
        queues = json.dumps(list(request.queues))
        rows: list[_Candidate] = []
        slot_keys: dict[int, str] = {}
        for name in sorted(request.keyed):
            limit = request.caps[name]
            cur.execute(self.sql["claim_keyed_candidates"], {
                "name": name, "queues": queues, "limit": request.limit, "now": now,
                "full": json.dumps([key for key, n in held.items() if n >= limit])})
            taken: dict[str, int] = {}
            for *row, slot_key in cur.fetchall():
                if held.get(slot_key, 0) + taken.get(slot_key, 0) < limit:
                    taken[slot_key] = taken.get(slot_key, 0) + 1
                    rows.append(tuple(row))  # type: ignore[arg-type]
                    slot_keys[row[0]] = slot_key
        return rows, slot_keys

    def _take(self, cur: Any, ids: list[int], request: ClaimRequest, token: str, now: Any
              ) -> list[Any]:
        """Claim the rows ``ids`` that are still runnable under ``token``; their claimed rows."""
        cur.execute(self.sql["claim"], {
            "ids": json.dumps(ids),
            "token": token,
            "worker_id": request.worker_id,
            "timeout": request.visibility_timeout,
            "now": now,
        })
        return cur.fetchall()

    @staticmethod
    def runs_params(runs: Sequence[tuple[int, str]]) -> dict[str, Any]:
        """One JSON array of ``[id, token]`` pairs, tokens as the 32 hex digits stored."""
        return {"runs": json.dumps([[job_id, uuid.UUID(token).hex] for job_id, token in runs])}

    def settle(self, settlements: Sequence[Settlement], worker_id: str) -> set[int]:
        """Settle a batch in one write transaction, each row fenced on its token."""
        if not settlements:
            return set()
        check_one_per_job(settlements)
        rows = [self._settlement_row(s) for s in settlements]
        for row in rows:
            row["token"] = uuid.UUID(row["token"]).hex
            # Stored as JSON text, as Django's JSONField keeps it on SQLite.
            if row.get("wait_match") is not None:
                row["wait_match"] = json.dumps(row["wait_match"], separators=(",", ":"),
                                               allow_nan=False)
        batch = dumps_batch(rows)
        now = self.now_param()
        with self._write() as cur:
            cur.execute(self.sql["settle"], {"batch": batch, "now": now, "worker_id": worker_id})
            rows = cur.fetchall()
            settled = {row[0] for row in rows}
            # Dependents released in this write transaction (rule 110 (released-in-settle)).
            dependencies.release(self, cur, sorted(row[0] for row in rows if row[1]))
            if settled:
                record = {"batch": batch, "settled": json.dumps(sorted(settled)),
                          "worker_id": worker_id, "now": now}
                if any(s.extends is not None for s in settlements):
                    cur.execute(self.sql["settle_extend"], record)
                cur.execute(self.sql["settle_record"], record)
        return settled

    # -- fleet slots ---------------------------------------------------------------------------

    @staticmethod
    def holders_param(holders: Sequence[str]) -> Any:
        return json.dumps(list(holders))

    @staticmethod
    def ids_param(ids: Sequence[int]) -> Any:
        return json.dumps(list(ids))

    @staticmethod
    def queues_param(queues: Sequence[str]) -> Any:
        return json.dumps(list(queues))

    @staticmethod
    def held_params(held: Sequence[SlotHold]) -> dict[str, Any]:
        return {"held": json.dumps([[h.key, h.slot, h.holder] for h in held])}

    @staticmethod
    def wanted_params(wanted: Sequence[tuple[str, int, str]]) -> dict[str, Any]:
        return {"wanted": json.dumps([list(w) for w in wanted])}

    # -- rate limits ---------------------------------------------------------------------------

    def take_starts(self, wanted: Sequence[tuple[str, int, int, int]]) -> dict[str, RateTaken]:
        """The same GCRA as PostgreSQL's ``rate_take``, read and written in one write
        transaction (SQLite's one writer is the lock)."""
        if not wanted:
            return {}
        now = self.now_param()
        with self._write() as cur:
            cur.execute(self.sql["rate_read"], {"keys": json.dumps([w[0] for w in wanted]),
                                                "now": now})
            rows = cur.fetchall()
            clock = rows[0][0]
            tats = {key: tat for _, key, tat in rows if key is not None}
            answer: dict[str, RateTaken] = {}
            buckets = []
            for key, interval, tolerance, want in wanted:
                granted, tat, wait = gcra_take(tats.get(key), clock, interval, tolerance, want)
                answer[key] = RateTaken(granted=granted, wait=max(0, wait) / 1e6, at=clock)
                buckets.append([key, tat, granted, interval, tolerance])
            cur.execute(self.sql["rate_write"], {"buckets": json.dumps(buckets), "now": now})
        return answer
