"""Structured log events with stable names (``jobs.worker.slot-lost``) and ``key=value`` text.

The event name is the message, so ``grep jobs.worker.slot-lost`` finds every occurrence whatever
the formatter; the fields are also attached as ``record.ultjobs`` for JSON log handlers.

A worker started from the command line in a project whose ``LOGGING`` says nothing about these
loggers gets a console of its own (:func:`configure_console`): otherwise Python drops every INFO
line and prints warnings bare, with no time or level.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, TextIO

#: The root of every logger this package logs on.
ROOT_LOGGER = "django_ultjobs"
#: ``--log-format`` values.
LOG_FORMATS = ("text", "json")
#: Events logged once per run that went as it should: on the worker's own console only from
#: ``-v 2``, since a busy worker settles thousands of jobs a second.
PER_RUN_EVENTS = frozenset({"jobs.worker.settled", "jobs.worker.suspended",
                            "jobs.worker.rate-granted"})

#: Events ``log_event`` drops before building a record (see ``configure_console``).
_muted: frozenset[str] = frozenset()


def log_event(logger: logging.Logger, level: int, event: str, **fields: Any) -> None:
    """Log ``event`` with its fields as ``key=value`` pairs and as structured ``extra``."""
    if not logs_event(logger, level, event):
        return
    text = " ".join(f"{key}={_format(value)}" for key, value in fields.items())
    logger.log(level, "%s %s", event, text, extra={"ultjobs_event": event, "ultjobs": fields})


def logs_event(logger: logging.Logger, level: int, event: str) -> bool:
    """Whether ``log_event`` would log ``event`` now: asked once for a batch of runs, it spares
    each run the fields of a line nobody reads."""
    return event not in _muted and logger.isEnabledFor(level)


def _format(value: Any) -> str:
    text = str(value)
    if not text or any(ch.isspace() for ch in text) or '"' in text or "=" in text:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


# -- the worker's own console ---------------------------------------------------------------------


def project_configures_logging() -> bool:
    """Whether anything already decides where this package's records go: a handler or a level
    on one of its loggers, or a handler on the root logger (which they propagate to)."""
    if logging.getLogger().handlers:
        return True
    manager = logging.Logger.manager
    names = [ROOT_LOGGER, *(n for n in manager.loggerDict if n.startswith(ROOT_LOGGER + "."))]
    for name in names:
        logger = manager.loggerDict.get(name)
        if isinstance(logger, logging.Logger) and (
                logger.handlers or logger.level != logging.NOTSET or not logger.propagate):
            return True
    return False


def configure_console(*, verbosity: int, log_format: str, stream: TextIO) -> logging.Handler:
    """Send this package's records to ``stream``, one line each, and return the handler.

    ``verbosity`` is the command's ``-v``: 0 warnings and errors only; 1 also INFO (started,
    stopped, draining) except the per-run lines; 2 every settle too; 3 DEBUG (step replays).
    """
    global _muted
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logger = logging.getLogger(ROOT_LOGGER)
    logger.addHandler(handler)
    logger.setLevel({0: logging.WARNING, 1: logging.INFO, 2: logging.INFO}.get(verbosity,
                                                                            logging.DEBUG))
    # Dropped in log_event, not by a filter: a filter still pays for a record per settle.
    _muted = PER_RUN_EVENTS if verbosity < 2 else frozenset()
    return handler


class TextFormatter(logging.Formatter):
    """``2026-12-04 16:30:01.123 WARNING jobs.worker.retrying job_id=8 ...`` (local time)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s.%(msecs)03d %(levelname)s %(message)s",
                         datefmt="%Y-%m-%d %H:%M:%S")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``event`` and
    the event's fields, or ``message`` for a record that is not an event; ``exception`` with
    the traceback when there is one."""

    #: Keys of the envelope; a field of the same name is renamed ``field_<name>``.
    ENVELOPE = ("time", "level", "logger", "event", "message", "exception")

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
        }
        event = getattr(record, "ultjobs_event", None)
        if event is not None:
            entry["event"] = event
            for key, value in getattr(record, "ultjobs", {}).items():
                entry[f"field_{key}" if key in self.ENVELOPE else key] = value
        else:
            entry["message"] = record.getMessage()
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)
