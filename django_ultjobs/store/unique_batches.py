"""Keyed batches (rules 65 (one-key-holder) to 68 (bulk-unique-in-order)): the order their rows are
inserted in, and which of them an ``INSERT … ON CONFLICT DO NOTHING RETURNING`` inserted."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .records import NewJob

T = TypeVar("T")


def insertion_order(jobs: Sequence[NewJob]) -> list[int]:
    """The order a keyed batch is inserted in: keyed jobs by (name, key), then the others in
    call order. Two batches with keys in common insert them in the same order, so on
    PostgreSQL one waits for the other instead of each waiting for a key the other inserted
    (a deadlock, which aborts a caller's transaction)."""
    def rank(i: int) -> tuple[bool, str, str, int]:
        job = jobs[i]
        key = job.unique_key
        return (key is None, job.name if key is not None else "", key or "", i)

    return sorted(range(len(jobs)), key=rank)


def match_inserted(sent: Sequence[NewJob], rows: Sequence[T], key_of_row: Callable[[T], Any],
                   id_of: Callable[[T], int]) -> list[T | None]:
    """Align what an ``INSERT … ON CONFLICT DO NOTHING RETURNING`` gave back with ``sent``.

    The rows were inserted in ``sent`` order, so ids ascend in it; a job without a key is always
    inserted; of the jobs with one key, only the first can be (a later one meets its row).
    """
    ordered = sorted(rows, key=id_of)
    returned = {(key_of_row(r)) for r in ordered if key_of_row(r)[1] is not None}
    out: list[T | None] = []
    position = 0
    for job in sent:
        pair = (job.name, job.unique_key)
        if job.unique_key is None or pair in returned:
            row = ordered[position]
            position += 1
            assert key_of_row(row) == pair, (key_of_row(row), pair)
            returned.discard(pair)
            out.append(row)
        else:
            out.append(None)
    assert position == len(ordered)
    return out
