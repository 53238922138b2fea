"""``send_event``: record an event and wake the jobs waiting for it, transactionally."""

from __future__ import annotations

from typing import Any

from . import jsonargs
from .store import get_store


def send_event(name: str, payload: dict[str, Any] | None = None) -> int:
    """Send event ``name``; jobs in ``ctx.wait_for_event(name, match=...)`` whose ``match`` keys
    all equal the payload's wake up. Returns the event's id.

    Runs in the caller's transaction: if it rolls back, the event was never sent and nobody
    wakes. An event sent after a job was enqueued counts for its waits even if the job had not
    started waiting yet.
    """
    if not name or len(name) > 200:
        raise ValueError("an event name must be 1 to 200 characters long")
    payload = dict(payload or {})
    jsonargs.check_result(f"send_event({name!r}) payload", payload)
    return get_store().send_event(name, payload)
