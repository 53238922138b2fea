"""The rows of a plain bulk enqueue (``copy_rows.plain``) in COPY's binary format.

The server reads a binary field without parsing it: a row in it takes less of the
server's time than the same row in text (three timestamps and the integers not parsed), and
the server's insert is what a bulk enqueue by COPY waits for. The
values are those ``copy_rows.text_rows`` writes, column by column
(rule 101 (bulk-shortcuts-same-outcome)).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

from ..core import jsonargs
from .copy_rows import BLOCK, visible_at
from .records import NewJob

#: The columns of ``enqueue_copy_plain``, in its order: a row starts with their count.
COLUMNS = 20
_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_TRAILER = struct.pack(">h", -1)
#: A row's field count and its id (int8), a length-prefixed int4, a timestamptz.
_ROW_ID = struct.Struct(">hiq")
_INT4 = struct.Struct(">ii")
_TIME = struct.Struct(">iq")
_LENGTH = struct.Struct(">i")
#: PostgreSQL's timestamps count microseconds from this instant.
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
#: status 'queued' and attempt 0; then worker_id '' and cancel_requested false; then
#: last_error '', wait_event '' and wait_after 0 (int8).
_QUEUED = _LENGTH.pack(6) + b"queued" + _INT4.pack(4, 0)
_UNCLAIMED = _LENGTH.pack(0) + _LENGTH.pack(1) + b"\x00"
_NOT_WAITING = _LENGTH.pack(0) + _LENGTH.pack(0) + struct.pack(">iq", 8, 0)
_EMPTY_LIST = _LENGTH.pack(3) + b"\x01[]"
_EMPTY_OBJECT = _LENGTH.pack(3) + b"\x01{}"


def _time(value: datetime) -> bytes:
    return _TIME.pack(8, (value - _PG_EPOCH) // _MICROSECOND)


def _text(value: str) -> bytes:
    data = value.encode()
    return _LENGTH.pack(len(data)) + data


def _json(value: object, empty: bytes) -> bytes:
    # jsonb's binary form: a version byte (1), then the JSON text.
    if not value:
        return empty
    data = b"\x01" + jsonargs.dumps(value).encode()
    return _LENGTH.pack(len(data)) + data


def binary_rows(jobs: Sequence[NewJob], ids: Sequence[int], now: datetime) -> Iterator[bytes]:
    """Every job's row in the columns of ``enqueue_copy_plain``, ``BLOCK`` rows at a time, the
    header first and the trailer last. The jobs' run_at, if any, are timezone-aware."""
    stamp = _time(now)
    created = stamp + stamp
    # A batch repeats a few names, queues, trace headers and actors: each is encoded once.
    texts: dict[str, bytes] = {}

    def text(value: str) -> bytes:
        encoded = texts.get(value)
        if encoded is None:
            encoded = texts[value] = _text(value)
        return encoded

    yield _HEADER
    for start in range(0, len(jobs), BLOCK):
        rows = []
        for job_id, job in zip(ids[start:start + BLOCK], jobs[start:start + BLOCK],
                               strict=True):
            when = visible_at(job, now)
            visible = stamp if when is now else _time(when)
            rows.append(b"".join((
                _ROW_ID.pack(COLUMNS, 8, job_id), text(job.name), text(job.queue),
                _INT4.pack(4, job.priority), _json(job.args, _EMPTY_LIST),
                _json(job.kwargs, _EMPTY_OBJECT), _QUEUED, _INT4.pack(4, job.max_attempts),
                visible, _UNCLAIMED, text(job.traceparent), text(job.tracestate),
                text(job.enqueued_by), _NOT_WAITING, created)))
        yield b"".join(rows)
    yield _TRAILER
