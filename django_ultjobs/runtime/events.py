"""``send_event``: record an event and wake the jobs waiting for it, transactionally."""

from __future__ import annotations

from typing import Any

from ..core import jsonargs
from ..store import get_store

#: The longest event name: the events table's column (``JobEvent.name``).
MAX_EVENT_NAME = 200


def check_event_name(name: object) -> None:
    """Raise ``ValueError`` unless ``name`` is an event name ``send_event`` accepts: a string of
    1 to ``MAX_EVENT_NAME`` characters."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_EVENT_NAME:
        raise ValueError(f"an event name must be a string of 1 to {MAX_EVENT_NAME} characters")


def send_event(name: str, payload: dict[str, Any] | None = None) -> int:
    """Send event ``name``; jobs in ``ctx.wait_for_event(name, match=...)`` whose ``match`` keys
    all equal the payload's wake up. Returns the event's id.

    Runs in the caller's transaction: if it rolls back, the event was never sent and nobody
    wakes. An event sent after a job was enqueued counts for its waits even if the job had not
    started waiting yet.
    """
    check_event_name(name)
    payload = dict(payload or {})
    jsonargs.check_result(f"send_event({name!r}) payload", payload)
    return get_store().send_event(name, payload)
