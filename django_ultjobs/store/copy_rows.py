"""A bulk enqueue by COPY on PostgreSQL: the rows, their times, and the COPY itself.

COPY takes rows as data, never expressions, so what the INSERT of ``enqueue`` computes in SQL is
computed here from the database's clock, read in the same transaction first (``enqueue_copy_ids``,
which also takes the ids COPY cannot return): the same values, column by column
(rule 95 (copy-writes-as-insert)).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.backends.utils import CursorDebugWrapper

from ..core import jsonargs
from .records import NewJob

#: Jobs from which a bulk enqueue goes by COPY: below it the one-statement INSERT is as fast (two
#: round trips against one) and keeps ``bulk_enqueue()`` one statement
#: (rule 41 (instrumented-statements)).
COPY_MIN_JOBS = 100

#: Lines sent to COPY at a time: the server inserts the first while the next are written, where
#: one block of every line would leave it idle until the last was.
BLOCK = 500


def soonest_params(jobs: Sequence[NewJob]) -> dict[str, Any]:
    """The parameters of ``enqueue_copy_ids``: per queue, its soonest delay among the jobs
    without ``run_at`` and its soonest ``run_at`` (a queue is notified if either is due, as
    ``enqueue`` notifies a queue with any row due)."""
    delays: dict[str, float] = {}
    run_ats: dict[str, datetime] = {}
    for job in jobs:
        if job.run_at is None:
            if job.queue not in delays or job.delay < delays[job.queue]:
                delays[job.queue] = float(job.delay)
        elif job.queue not in run_ats or job.run_at < run_ats[job.queue]:
            run_ats[job.queue] = job.run_at
    queues = sorted(delays.keys() | run_ats.keys())
    return {"count": len(jobs), "queues": queues, "delays": [delays.get(q) for q in queues],
            "run_ats": [run_ats.get(q) for q in queues]}


def plus_seconds(now: datetime, seconds: float) -> datetime:
    """``now + make_interval(secs => seconds)`` as PostgreSQL computes it: the seconds rounded
    to whole microseconds, half to even, from the same float product."""
    micros = round(seconds * 1_000_000)
    return now if micros == 0 else now + timedelta(microseconds=micros)


def visible_at(job: NewJob, now: datetime) -> datetime:
    """The job's ``visible_at`` as ``enqueue`` computes it from ``now`` (``now`` itself, the
    same object, when it has no delay: the rows then write the clock already formatted)."""
    return job.run_at if job.run_at is not None else plus_seconds(now, job.delay)


def expires_at(job: NewJob, now: datetime) -> datetime | None:
    """The job's ``expires_at`` as ``enqueue`` computes it from ``now``."""
    return None if job.expires_in is None else plus_seconds(now, job.expires_in)


def times(jobs: Sequence[NewJob], now: datetime) -> list[tuple[datetime, datetime | None]]:
    """Each job's ``visible_at`` and ``expires_at``: what ``enqueue`` returns, and what the
    rows (text or binary) write, from the same two functions."""
    return [(visible_at(job, now), expires_at(job, now)) for job in jobs]


def _text(value: str) -> str:
    """``value`` as a field of COPY's text format: its backslash, tab, newline and carriage
    return escaped (no other character is special there)."""
    if "\\" in value:
        value = value.replace("\\", "\\\\")
    if "\t" in value or "\n" in value or "\r" in value:
        value = value.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return value


def _json(value: Any) -> str:
    # An empty list or object is most bulk calls' arguments: spared the encoder. The encoder's
    # output is ASCII (no tab or newline), so only its backslashes need escaping.
    if not value:
        return "[]" if isinstance(value, (list, tuple)) else "{}"
    return jsonargs.dumps(value).replace("\\", "\\\\")


def _float(value: float | None) -> str:
    # repr: the shortest text that reads back as the same double.
    return "\\N" if value is None else repr(float(value))


def _when(when: datetime, now: datetime, stamp: str) -> str:
    # The common case, no delay, is the statement's clock already written out.
    return stamp if when is now else when.isoformat()


def plain(jobs: Sequence[NewJob]) -> bool:
    """Whether no job of ``jobs`` sets a column ``enqueue_copy_plain`` leaves out (a timeout,
    an expiry, a slot key, tags), so that those columns take their defaults (NULL, NULL, ""
    and ``[]``), the values ``enqueue`` writes for such jobs; and every run_at given is
    timezone-aware, as ``copy_binary`` needs (a spec's always is)."""
    return not any(job.timeout is not None or job.expires_in is not None
                   or job.concurrency_key or job.tags
                   or (job.run_at is not None and job.run_at.utcoffset() is None)
                   for job in jobs)


def text_rows(jobs: Sequence[NewJob], ids: Sequence[int], now: datetime) -> Iterator[str]:
    """Every job's line of COPY's text format in the columns of ``enqueue_copy``, with the
    values ``enqueue`` writes (the times ``times`` gives), ``BLOCK`` lines at a time."""
    stamp = now.isoformat()
    for start in range(0, len(jobs), BLOCK):
        lines = [_line(job_id, job, now, stamp) for job_id, job in zip(
            ids[start:start + BLOCK], jobs[start:start + BLOCK], strict=True)]
        lines.append("")
        yield "\n".join(lines)


def _line(job_id: int, job: NewJob, now: datetime, stamp: str) -> str:
    return "\t".join((
        str(job_id), _text(job.name), _text(job.queue), str(job.priority),
        _json(job.args), _json(job.kwargs), "queued", "0", str(job.max_attempts),
        _when(visible_at(job, now), now, stamp),
        "\\N", "", "f", _text(job.traceparent), _text(job.tracestate), _text(job.enqueued_by),
        "", "", "0", stamp, stamp, _text(job.concurrency_key), _float(job.timeout),
        "\\N" if job.expires_in is None else _when(expires_at(job, now), now, stamp),
        _json(job.tags)))


def copy(wrapper: Any, sql: str, blocks: Iterable[str] | Iterable[bytes]) -> None:
    """Send ``blocks`` (in the format ``sql`` names) with ``sql``, a COPY ... FROM STDIN,
    through Django's cursor ``wrapper``: through its execute wrappers and, under DEBUG and in
    tests, its query log (rule 41 (instrumented-statements)), as an ``execute`` would be (psycopg's
    ``copy()`` is no method Django wraps)."""
    driver = wrapper.cursor

    def execute(sql: str, params: Any, many: bool, context: dict[str, Any]) -> None:
        with driver.copy(sql) as out:
            for block in blocks:
                out.write(block)

    wrapper.db.validate_no_broken_transaction()
    if isinstance(wrapper, CursorDebugWrapper):
        with wrapper.debug_sql(sql):
            wrapper._execute_with_wrappers(sql, None, False, executor=execute)
    else:
        wrapper._execute_with_wrappers(sql, None, False, executor=execute)
