"""Run hooks: Django signals sent in the worker thread around every run of a job's body.

``job_started`` is sent right before the body, ``job_finished`` right after it, in the thread
that runs it, so a receiver can set up and tear down what the body needs around it (a Sentry
scope, a tenant, a locale). The sender is the job (its ``JobSpec``), so
``job_started.connect(receiver, sender=send_invoice)`` hears one job only.

Rule 72 (paired-run-hooks): every ``job_started`` is followed by exactly one ``job_finished`` in the
same thread, with the outcome the worker records for the attempt. A ``job_started`` receiver that
raises fails the attempt as the body would (a context that could not be set up must not run the body
in the wrong one); a ``job_finished`` receiver that raises is logged and changes nothing.
"""

from __future__ import annotations

from django.dispatch import Signal

#: Sent before a job's body runs. Arguments: ``context`` (the run's ``JobContext``: ``job_id``,
#: ``name``, ``attempt``, ``queue``, ...), ``args``, ``kwargs``.
job_started = Signal()

#: Sent after the body, once its outcome is known. Arguments: ``context``, ``args``,
#: ``kwargs``, ``outcome`` (``succeeded``, ``failed``, ``retrying``, ``cancelled``,
#: ``suspended``, ``interrupted``, ``slot_lost``, ``lease_lost``: the attempt's outcome),
#: ``exception`` (what the body raised, or None) and ``duration`` (seconds the body ran).
job_finished = Signal()

__all__ = ["job_finished", "job_started"]
