"""What the backends of one database wait on while a prune and a drain run side by side.

A thread samples ``pg_stat_activity`` every ``INTERVAL`` seconds: each client backend's wait
event and the pids blocking it (``pg_blocking_pids``), told apart by ``application_name`` (the
prune runs as ``scale-prune``, the drain's worker as ``scale-drain-worker``); and the locks the
prune's backend holds (``pg_locks``). A heavyweight lock wait (``wait_event_type = 'Lock'``) of a
worker's backend blocked by the prune's is what a prune must never cause.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from benchmarks.peers import common

PRUNE_APP = "scale-prune"
WORKER_APP = "scale-drain-worker"
INTERVAL = 0.05

ACTIVITY = """
SELECT pid, application_name, state, wait_event_type, wait_event, left(query, 90),
       pg_blocking_pids(pid)
FROM pg_stat_activity
WHERE datname = %s AND backend_type = 'client backend' AND pid <> pg_backend_pid()
"""
#: The prune's locks but its indexes' (each follows its table's) and its own virtual xid.
PRUNE_LOCKS = """
SELECT l.locktype, COALESCE(c.relname, ''), l.mode, l.granted
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
LEFT JOIN pg_class AS c ON c.oid = l.relation
WHERE a.datname = %s AND a.application_name = %s AND l.locktype <> 'virtualxid'
  AND (c.relkind IS NULL OR c.relkind = 'r')
"""


def role(application_name: str) -> str:
    return {PRUNE_APP: "prune", WORKER_APP: "worker"}.get(application_name, "other")


class LockSampler:
    """Samples the waits of ``dbname``'s backends on a thread until ``stop``."""

    def __init__(self, dbname: str) -> None:
        self.dbname = dbname
        self.samples = 0
        #: (role, state) of each backend seen, per sample.
        self.seen: Counter[str] = Counter()
        #: (role, "type:event") of each waiting backend, per sample.
        self.waits: Counter[tuple[str, str]] = Counter()
        #: (waiting role, lock event, blocking roles, the waiting query) per sample.
        self.blocked: Counter[tuple[str, str, str, str]] = Counter()
        #: (locktype, relation, mode, granted) the prune's backend held, per sample.
        self.prune_locks: Counter[tuple[str, str, str, bool]] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lock-sampler", daemon=True)

    def start(self) -> LockSampler:
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        return self.summary()

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(common.dsn(self.dbname), autocommit=True) as conn:
            while not self._stop.is_set():
                self._sample(conn)
                self._stop.wait(INTERVAL)

    def _sample(self, conn: Any) -> None:
        rows = conn.execute(ACTIVITY, [self.dbname]).fetchall()
        roles = {pid: role(app) for pid, app, *_ in rows}
        self.samples += 1
        for pid, _app, state, wait_type, wait_event, query, blockers in rows:
            who = roles[pid]
            self.seen[f"{who}:{state}"] += 1
            if wait_type and state == "active":
                self.waits[(who, f"{wait_type}:{wait_event}")] += 1
            if blockers:
                by = ",".join(sorted({roles.get(b, "other") for b in blockers}))
                self.blocked[(who, f"{wait_type}:{wait_event}", by, query)] += 1
        for locktype, relation, mode, granted in conn.execute(
                PRUNE_LOCKS, [self.dbname, PRUNE_APP]).fetchall():
            self.prune_locks[(locktype, relation, mode, granted)] += 1

    def summary(self) -> dict[str, Any]:
        """The samples taken, every wait seen per role, every block and the prune's locks."""
        worker_blocked_by_prune = sum(n for (who, _, by, _), n in self.blocked.items()
                                      if who == "worker" and "prune" in by)
        return {
            "samples": self.samples,
            "seen": dict(self.seen),
            "waits": [[who, event, n] for (who, event), n in self.waits.most_common()],
            "blocked": [[who, event, by, query, n]
                        for (who, event, by, query), n in self.blocked.most_common()],
            "worker_blocked_by_prune": worker_blocked_by_prune,
            "prune_locks": sorted({(t, r, m, g) for t, r, m, g in self.prune_locks}),
        }

