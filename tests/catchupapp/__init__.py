"""Periodic jobs of every catch-up policy, installed only in the worker processes of the
clock-step tests (every other test's workers would otherwise enqueue their ticks)."""
