"""Rows written as another producer could write them: raw SQL that bypasses enqueue's checks."""

from __future__ import annotations

from django.db import connections


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def write_raw_args(alias: str, job_id: int, text: str | None = None, *,
                   hex_bytes: str | None = None) -> None:
    """Overwrite a row's args with SQL, bypassing enqueue's checks (another producer)."""
    with connections[alias].cursor() as cur:
        if hex_bytes is not None:  # SQLite only: bytes that are not UTF-8, stored as text
            cur.execute(f"UPDATE django_ultjobs_job SET args = CAST(X'{hex_bytes}' AS TEXT) "
                        "WHERE id = %s", [job_id])
        elif connections[alias].vendor == "postgresql":
            cur.execute("UPDATE django_ultjobs_job SET args = %s::jsonb WHERE id = %s",
                        [text, job_id])
        else:
            cur.execute("UPDATE django_ultjobs_job SET args = %s WHERE id = %s", [text, job_id])
