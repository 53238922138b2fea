"""Structured log events with stable names (``jobs.worker.slot-lost``) and ``key=value`` text.

The event name is the message, so ``grep jobs.worker.slot-lost`` finds every occurrence whatever
the formatter; the fields are also attached as ``record.ultjobs`` for JSON log handlers.
"""

from __future__ import annotations

import logging
from typing import Any


def log_event(logger: logging.Logger, level: int, event: str, **fields: Any) -> None:
    """Log ``event`` with its fields as ``key=value`` pairs and as structured ``extra``."""
    if not logger.isEnabledFor(level):
        return
    text = " ".join(f"{key}={_format(value)}" for key, value in fields.items())
    logger.log(level, "%s %s", event, text, extra={"ultjobs_event": event, "ultjobs": fields})


def _format(value: Any) -> str:
    text = str(value)
    if not text or any(ch.isspace() for ch in text) or '"' in text or "=" in text:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text
