"""One process of the unique-jobs races: threads that enqueue one unique key at one instant.

Run by tests/acceptance/test_unique_jobs.py as
``python -m tests.acceptance.unique_burst <alias> <key> <threads> <start_at> <hold> <mode>``:
each thread waits for the wall-clock instant ``start_at``, enqueues ``unique_touch`` with
``unique_key=<key>`` inside ``transaction.atomic()``, keeps that transaction open ``hold``
seconds (or, when ``hold`` is a path, writes ``<hold>.ready`` and waits until ``<hold>`` exists),
then commits (mode ``commit``) or rolls back (mode ``rollback``). It prints one JSON list: per
thread, ``[job id, created, mode]`` or ``["error", repr]``. Mode ``bulk`` instead
``bulk_enqueue``s the keys ``<key>-1`` and ``<key>-2`` twice each, in one order in even threads
and the other in odd ones, and reports ``[{key: id}, None, "bulk"]``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any


class _RollBack(Exception):
    pass


def _hold(hold: str) -> None:
    try:
        time.sleep(float(hold))
        return
    except ValueError:
        pass
    Path(hold + ".ready").write_text("enqueued")
    deadline = time.monotonic() + 60
    while not Path(hold).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def main(alias: str, key: str, threads: int, start_at: float, hold: str, mode: str) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    from django.db import connections, transaction

    from django_ultjobs import bulk_enqueue
    from tests.testapp.jobs import unique_touch

    spec = unique_touch.using(unique_key=key)
    results: list[list[Any]] = []
    lock = threading.Lock()

    def run_bulk(index: int) -> tuple[dict[str, int], None]:
        keys = [f"{key}-1", f"{key}-2"]
        if index % 2:
            keys.reverse()
        calls = [unique_touch.using(unique_key=k).call(k) for k in keys + keys]
        ids = bulk_enqueue(calls)
        return dict(zip(keys + keys, ids, strict=True)), None

    def run(index: int) -> None:
        connections[alias].ensure_connection()
        time.sleep(max(0.0, start_at - time.time()))
        try:
            with transaction.atomic(using=alias):
                if mode == "bulk":
                    found, created = run_bulk(index)
                else:
                    found, created = spec.enqueue_or_existing("burst")
                _hold(hold)
                if mode == "rollback":
                    raise _RollBack
            outcome: list[Any] = [found if mode == "bulk" else found.id, created, mode]
        except _RollBack:
            outcome = [found.id, created, mode]
        except Exception as exc:  # reported to the test, which fails on it
            outcome = ["error", repr(exc)]
        finally:
            connections.close_all()
        with lock:
            results.append(outcome)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5],
         sys.argv[6])
