"""Plain Python the rest of the package builds on: argument and option checks, retry backoff,
slot and flow keys, rate limits, schedule arithmetic, tags. Nothing here knows the tables."""
