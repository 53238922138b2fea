"""Values and rows as a careless or hostile producer makes them (raw SQL bypasses enqueue)."""

from __future__ import annotations

from typing import Any

from django.db import connections


def nested(depth: int) -> str:
    """JSON text of a list ``depth`` levels deep."""
    return "[" * depth + "]" * depth


def nested_list(depth: int) -> list[Any]:
    """A list ``depth`` levels deep, built without recursion."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


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
