"""Declaring jobs and queueing their calls: ``@job`` and the registry, a job's spec and the
checks of its options, the enqueue path, unique keys, and the periodic jobs.

Django's discovery of each installed app's ``jobs`` module imports this package too; it
registers nothing itself (``apps.py`` imports ``periodic``, which holds the built-in job)."""
