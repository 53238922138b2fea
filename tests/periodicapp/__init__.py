"""A periodic job, installed only in the worker processes of the scheduling tests.

Every other test's workers would otherwise enqueue its ticks for as long as they run.
"""
