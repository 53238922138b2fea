"""``runjobworker`` with the pool named on the command line: ``ours`` or ``executor``.

    python -m benchmarks.pool_ab.worker POOL CPU_FILE [runjobworker flags...]

Writes the process's CPU seconds spent from the command's start to its end (Django's set-up
left out) to CPU_FILE.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import django

django.setup()

from django.core.management import call_command  # noqa: E402

from django_ultjobs.worker import dispatch  # noqa: E402

from .executor_pool import ExecutorPool  # noqa: E402


def main() -> None:
    pool, cpu_file, *flags = sys.argv[1:]
    if pool == "executor":
        dispatch.ExecutorPool = ExecutorPool  # type: ignore[misc]
    elif pool != "ours":
        raise SystemExit(f"unknown pool {pool!r}")
    before = os.times()
    call_command("runjobworker", *flags)
    after = os.times()
    Path(cpu_file).write_text(str((after.user - before.user) + (after.system - before.system)))
    # The executor's threads are not daemons: leave without waiting for any (none is left here,
    # the drain joined them), exactly as the product's pool does.
    sys.stdout.flush()
    os._exit(0)


main()
