"""What ``manage.py ultjobs cancel`` and ``retry`` say they did: one line of counts on stdout,
what was left alone on stderr, never one line per job (a filter may select a million)."""

from __future__ import annotations

from collections.abc import Sequence

from ..operations import CancelResult, RetryResult

#: Ids a message names, at most; the rest are counted.
SHOWN_IDS = 20
DRY_RUN = "dry run, nothing changed: would"


def cancel_summary(result: CancelResult, *, dry_run: bool, took: str) -> tuple[str, list[str]]:
    """The result line of a cancel, and its notes (the jobs skipped for their status)."""
    if dry_run:
        line = (f"{DRY_RUN} cancel {result.cancelled} queued or waiting job(s) and ask "
                f"{result.requested} running job(s) to stop")
    else:
        line = (f"cancelled {result.cancelled} queued or waiting job(s); asked "
                f"{result.requested} running job(s) to stop at their worker's next heartbeat "
                f"({took})")
    return line, _skipped(result.skipped, "only queued, waiting or running jobs can be "
                                          "cancelled, a running one once")


def retry_summary(result: RetryResult, *, dry_run: bool, took: str) -> tuple[str, list[str]]:
    """The result line of a retry, and its notes (jobs run without their key, jobs skipped for
    their status)."""
    if dry_run:
        line = (f"{DRY_RUN} queue {result.retried} failed or cancelled job(s) again (unique "
                "keys are checked when it runs)")
    else:
        line = f"queued {result.retried} job(s) again, runnable now ({took})"
    notes = []
    if result.keyless_ids:
        notes.append(f"retried {len(result.keyless_ids)} job(s) without their unique key, "
                     f"beside the job that holds it: {_ids(result.keyless_ids)}")
    return line, notes + _skipped(result.skipped, "only failed or cancelled jobs can be retried")


def missing_error(ids: Sequence[int]) -> str:
    """``no job 999999``: the ids given that no job has."""
    return f"no job {_ids(ids)}"


def _skipped(count: int, why: str) -> list[str]:
    return [f"skipped {count} job(s) for their status: {why}"] if count > 0 else []


def _ids(ids: Sequence[int]) -> str:
    more = f" (and {len(ids) - SHOWN_IDS:,} more)" if len(ids) > SHOWN_IDS else ""
    return ", ".join(map(str, ids[:SHOWN_IDS])) + more
