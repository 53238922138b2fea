"""Periodic jobs of every catch-up policy, installed only in the workers of the clock-step
scenario (``CHAOS_TICKS``): every other scenario's workers would enqueue their ticks too."""
