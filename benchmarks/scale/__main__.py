"""``python -m benchmarks.scale``: run every phase (see the package's docstring), report."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.peers import common
from benchmarks.peers.common import log
from benchmarks.scale import fill, locks, report

CHILD = "benchmarks.scale.child"
SETTINGS = "benchmarks.scale.settings"
#: The drains: workload, jobs per drain, the worker's --threads (the peer benchmark's).
DRAINS = {"noop": (20_000, 32), "io-sync": (5_000, 128)}
#: The span the history finished over.
HISTORY_DAYS = 30.0
#: The jobs of the drain a prune runs in the middle of, by workload (scaled by --drain-scale,
#: at least ``THROUGH_MIN_JOBS``): long enough for the lead (``report.PRUNE_LEAD``), a paced
#: prune and as long again after it.
THROUGH_JOBS = {"noop": 160_000, "io-sync": 120_000}
THROUGH_MIN_JOBS = 80_000


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale",
                                description="The job queue with tables of millions of rows.")
    p.add_argument("--rows", type=int, default=10_000_000, help="finished jobs in HIST")
    p.add_argument("--queued", type=int, default=1_000_000,
                   help="live jobs added for the read paths")
    p.add_argument("--prune-rows", type=int, default=1_000_000,
                   help="finished jobs pruned, and filled per cycle")
    p.add_argument("--cycles", type=int, default=5, help="fill-and-prune cycles")
    p.add_argument("--sqlite-queued", type=int, default=300_000)
    p.add_argument("--pairs", type=int, default=3,
                   help="EMPTY/HIST pairs of each hot-path and read-path measurement")
    p.add_argument("--pickup-samples", type=int, default=100, help="per pickup block")
    p.add_argument("--repeat", type=int, default=5, help="runs per page (median)")
    p.add_argument("--drain-scale", type=float, default=1.0, help="jobs per drain, scaled")
    p.add_argument("--quick", action="store_true",
                   help="a few minutes: a tenth of every size, one pair")
    p.add_argument("--skip", default="",
                   help="phases to leave out: hot,read,prune,cycles,sqlite")
    p.add_argument("--keep", action="store_true", help="keep the databases afterwards")
    p.add_argument("--reuse", action="store_true",
                   help="reuse the databases a --keep run left (HIST topped up to --rows "
                        "finished jobs, live jobs cleared); implies --keep")
    p.add_argument("--prune-args", default="",
                   help="more arguments of the prune's prunejobs, e.g. '--batch-size 2000'")
    p.add_argument("--prune-drains", default=",".join(DRAINS),
                   help="the drains a prune runs beside, one prune each (default: %(default)s)")
    p.add_argument("--prune-pgoptions", default="",
                   help="PGOPTIONS of the prune's connection alone, e.g. "
                        "'-c wal_compression=on'")
    p.add_argument("--json", type=Path, help="write every figure here")
    p.add_argument("--plans", type=Path, default=Path("scale-plans.txt"),
                   help="where the EXPLAIN output goes")
    args = p.parse_args(argv)
    if args.quick:
        args.rows = min(args.rows, 1_000_000)
        args.queued = min(args.queued, 100_000)
        args.prune_rows = min(args.prune_rows, 100_000)
        args.cycles = min(args.cycles, 2)
        args.sqlite_queued = min(args.sqlite_queued, 30_000)
        args.pairs = 1
        args.pickup_samples = min(args.pickup_samples, 40)
        args.repeat = min(args.repeat, 3)
        args.drain_scale = min(args.drain_scale, 0.25)
    if args.prune_rows > args.rows:
        p.error("--prune-rows must not exceed --rows: each prune takes the oldest of them")
    args.skip = set(filter(None, args.skip.split(",")))
    args.prune_drains = args.prune_drains.split(",")
    if not set(args.prune_drains) <= set(DRAINS) or \
            len(set(args.prune_drains)) < len(args.prune_drains):
        p.error(f"--prune-drains: each of {', '.join(DRAINS)} at most once, not "
                f"{','.join(args.prune_drains)!r}")
    args.keep = args.keep or args.reuse
    return args


class Bench:
    """The two databases and the children that measure them."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        suffix = os.environ.get("ULTJOBS_TEST_DB_SUFFIX", "")
        self.empty = f"ultjobs_peers_scale_empty{suffix}"
        self.hist = f"ultjobs_peers_scale_hist{suffix}"
        self.results: dict[str, Any] = {"args": {k: sorted(v) if isinstance(v, set) else
                                                 str(v) if isinstance(v, Path) else v
                                                 for k, v in vars(args).items()},
                                        "empty_db": self.empty, "hist_db": self.hist}
        self.plans: list[str] = []

    def env(self, **extra: str) -> dict[str, str]:
        return common.child_env(DJANGO_SETTINGS_MODULE=SETTINGS, **extra)

    def child(self, db: str, phase: str, *args: str, **env: str) -> dict[str, Any]:
        return common.run_child(CHILD, [phase, "--db", db, *args], env=self.env(**env))

    def both(self, pair: int) -> list[tuple[str, str]]:
        """EMPTY then HIST in even pairs, HIST first in odd ones."""
        order = [("empty", self.empty), ("hist", self.hist)]
        return order if pair % 2 == 0 else order[::-1]

    # -- phases -------------------------------------------------------------------------------

    def setup(self) -> None:
        self.results["server"] = common.server_facts()
        if self.args.reuse and self.reuse():
            return
        for db in (self.empty, self.hist):
            common.create_database(db)
            self.child(db, "setup")
        log(f"filling {self.hist} with {self.args.rows:,} finished jobs")
        self.results["history_fill"] = self.child(
            self.hist, "fill-history", "--rows", str(self.args.rows), "--days",
            str(HISTORY_DAYS), "--analyze")
        log(f"filled: {report.short(self.results['history_fill'])}")

    def reuse(self) -> bool:
        """Take the databases a ``--keep`` run left, when both are there: live jobs cleared,
        HIST topped up to ``--rows`` finished jobs at the finish-time indexes' right edge (a
        prune of an earlier run took the oldest). Filling ten million rows is most of a run."""
        if not all(common.database_exists(db) for db in (self.empty, self.hist)):
            log("--reuse: no databases to reuse, filling new ones")
            return False
        for db in (self.empty, self.hist):
            self.child(db, "setup")  # a migration added since the databases were filled
            self.child(db, "clear-live")
        self.results["history_fill"] = self.child(self.hist, "top-up", "--rows",
                                                  str(self.args.rows))
        log(f"reused {self.hist}: {report.short(self.results['history_fill'])}")
        return True

    def hot_paths(self) -> None:
        """Drains, pickup and single enqueues, EMPTY and HIST alternated."""
        figures: dict[str, dict[str, list[Any]]] = {"empty": {}, "hist": {}}
        for pair in range(self.args.pairs):
            for workload, (jobs, threads) in DRAINS.items():
                count = max(1_000, int(jobs * self.args.drain_scale))
                for side, db in self.both(pair):
                    r = self.child(db, "drain", "--workload", workload, "--jobs", str(count),
                                   "--threads", str(threads))
                    figures[side].setdefault(f"drain_{workload}", []).append(r)
                    log(f"pair {pair + 1} {side} drain {workload}: {r['jobs_per_s']:,.0f} jobs/s")
            for side, db in self.both(pair):
                r = self.child(db, "pickup", "--samples", str(self.args.pickup_samples))
                figures[side].setdefault("pickup", []).append(r)
                log(f"pair {pair + 1} {side} pickup: p50 {r['p50_ms']:.1f} p99 {r['p99_ms']:.1f}")
            for side, db in self.both(pair):
                r = self.child(db, "single")
                figures[side].setdefault("single", []).append(r)
                log(f"pair {pair + 1} {side} enqueue: {r['single_commit_ms']:.2f} ms commit, "
                    f"{r['single_txn_ms']:.2f} ms in a transaction")
        self.results["hot"] = figures

    def read_paths(self) -> None:
        """The admin, the CLI and the stats view: HIST with no backlog, a young backlog before
        ANALYZE, then ``--queued`` live jobs in both databases (the figures the targets hold
        for, in pairs)."""
        reads: dict[str, dict[str, Any]] = {}

        def measure(label: str, db: str, target: bool, explain: bool,
                    paths: str = "admin,cli,stats") -> None:
            entry = reads.setdefault(label, {"target": target, "runs": []})
            entry["runs"].append(self._read(db, label, explain, paths))

        measure("HIST, 0 live", self.hist, False, True)
        young = max(1, self.args.queued // 10)
        self.child(self.empty, "fill-queued", "--rows", str(young))
        measure(f"EMPTY + {young:,} live, before ANALYZE", self.empty, False, True, "admin")
        self.child(self.empty, "fill-queued", "--rows", str(self.args.queued - young),
                   "--analyze")
        self.child(self.hist, "fill-queued", "--rows", str(self.args.queued), "--analyze")
        for pair in range(self.args.pairs):
            for side, db in self.both(pair):
                measure(f"{side.upper()} + {self.args.queued:,} live", db, True, pair == 0)
        self.results["reads"] = reads
        for db in (self.empty, self.hist):
            self.child(db, "clear-live")

    def _read(self, db: str, label: str, explain: bool, paths: str) -> dict[str, Any]:
        args = ["--repeat", str(self.args.repeat), "--paths", paths]
        r = self.child(db, "read-paths", *args, *(["--explain"] if explain else []))
        log(f"{label}: " + ", ".join(f"{p['name']} {p['median_ms']:.0f} ms"
                                     for p in r["paths"]
                                     if p["name"] in report.TARGETS_MS))
        if explain:
            self.plans.append(report.plans_text(label, r))
        return r

    def prunes(self) -> None:
        """One prune beside each of ``--prune-drains``, HIST topped up between them."""
        self.results["prune"] = {}
        for i, workload in enumerate(self.args.prune_drains):
            if i:  # each drain deleted its own jobs: only the pruned rows are missing
                self.child(self.hist, "top-up", "--rows", str(self.args.rows))
            self.results["prune"][workload] = self.prune(workload)

    def prune(self, workload: str) -> dict[str, Any]:
        """``prunejobs`` of ``--prune-rows`` in HIST in the middle of one long drain: the
        drain's jobs/s while the prune runs against its own jobs/s before and after it, per
        second from the jobs' finish times (separate drains alone and beside it differed by a
        third from one to the next on a shared machine, more than the prune's effect); the
        waits of every backend meanwhile."""
        _, threads = DRAINS[workload]
        count = max(THROUGH_MIN_JOBS, int(THROUGH_JOBS[workload] * self.args.drain_scale))
        drained: list[dict[str, Any]] = []
        drainer = threading.Thread(target=lambda: drained.append(self.child(
            self.hist, "drain", "--workload", workload, "--jobs", str(count), "--threads",
            str(threads), "--per-second")))
        drainer.start()
        self._wait_for_worker(drainer)
        time.sleep(report.PRUNE_LEAD)  # the drain's own pace first
        # Read as late as can be: topped-up histories finish a million jobs in minutes, so a
        # cut-off read a minute early would prune a fifth more.
        days = common.scalar(self.hist, fill.RETENTION_FOR, [self.args.prune_rows])
        sampler = locks.LockSampler(self.hist).start()
        lsn = common.scalar(self.hist, "SELECT pg_current_wal_lsn()::text")
        wall_started = time.time()
        started = time.perf_counter()
        extra = {"PGOPTIONS": self.args.prune_pgoptions} if self.args.prune_pgoptions else {}
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "prunejobs", "--days", f"{days:.6f}",
             *self.args.prune_args.split()],
            cwd=common.REPO,
            env=self.env(BENCH_PEERS_DB=self.hist, PGAPPNAME=locks.PRUNE_APP, **extra),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate()
        seconds = time.perf_counter() - started
        wall_ended = wall_started + seconds
        # The log written while the prune ran (the drain's beside it too): what the worker's
        # commits wait to flush.
        wal = common.scalar(self.hist, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)",
                            [lsn])
        waits = sampler.stop()
        drainer.join()
        if proc.returncode != 0:
            raise RuntimeError(f"prunejobs exited {proc.returncode}: {err.strip()[-500:]}")
        if not drained:
            raise RuntimeError("the drain beside the prune failed")
        per_second = drained[0].pop("per_second")
        through = report.through_rates(per_second, wall_started, wall_ended)
        first = min(int(t) for t in per_second)
        # The drain's jobs per second from its first, and where the prune ran in it.
        through["series"] = report.series(per_second)
        through["prune_from_s"] = wall_started - first
        # The same drain again with no prune: a long drain slows as its own dead rows pile up,
        # so the seconds the prune ran are compared with the same seconds of this one.
        control = self.child(self.hist, "drain", "--workload", workload, "--jobs", str(count),
                             "--threads", str(threads), "--per-second")
        through["control_series"] = report.series(control.pop("per_second"))
        through.update(report.against_control(through["series"], through["control_series"],
                                              through["prune_from_s"], seconds))
        log(f"prunejobs --days {days:.2f}: {seconds:.1f} s: {out.strip()}; the drain "
            f"{through['during']:,.0f} jobs/s beside it, {through['outside']:,.0f} before and "
            f"after: {through['ratio']:.2f}x; against the same seconds of a drain alone: "
            f"{through['control_ratio']:.2f}x")
        return {"days": float(days), "seconds": seconds, "output": out.strip(),
                "args": self.args.prune_args, "pgoptions": self.args.prune_pgoptions,
                "wal_bytes": int(wal), "drain": {**drained[0], "jobs": count},
                "workload": workload, "through": through, "waits": waits,
                "sizes_after": self.child(self.hist, "sizes")}

    def _wait_for_worker(self, drainer: threading.Thread) -> None:
        """Until the drain's worker has connected (its jobs are enqueued by then)."""
        deadline = time.monotonic() + 300
        while drainer.is_alive() and time.monotonic() < deadline:
            if common.scalar("postgres", "SELECT count(*) FROM pg_stat_activity "
                             "WHERE datname = %s AND application_name = %s",
                             [self.hist, locks.WORKER_APP]):
                return
            time.sleep(0.2)
        raise RuntimeError("the drain's worker never connected")

    def cycles(self) -> None:
        """Fill-and-prune cycles: each adds ``--prune-rows`` finished since the last fill (as a
        busy site's workers add them, at the finish-time indexes' right edge) and prunes as many
        of the oldest."""
        self.child(self.hist, "clear-live")  # the VACUUM autovacuum would run after the prune
        cycles = [{"sizes": self.child(self.hist, "sizes")}]
        for c in range(1, self.args.cycles + 1):
            r = self.child(self.hist, "prune-cycle", "--rows", str(self.args.prune_rows))
            cycles.append(r)
            log(f"cycle {c}: {r['prune_output']}; {r['prune_s']:.1f} s; "
                f"{report.total_bytes(r['sizes']) / 2**20:,.0f} MiB")
        self.results["cycles"] = cycles

    def sqlite(self) -> None:
        path = Path(tempfile.gettempdir()) / f"ultjobs-scale{os.getpid()}.sqlite3"
        try:
            self.results["sqlite"] = self.child(
                "sqlite", "sqlite", "--rows", str(self.args.sqlite_queued), "--repeat",
                str(self.args.repeat), BENCH_SCALE_SQLITE=str(path))
            self.plans.append(report.plans_text(
                f"SQLite + {self.args.sqlite_queued:,} queued, after ANALYZE",
                {"paths": self.results["sqlite"]["after_analyze"]}))
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)

    def teardown(self) -> None:
        for db in (self.empty, self.hist):
            common.drop_database(db)


def load() -> str:
    """The load average, as ``uptime`` prints it."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    bench = Bench(args)
    loads: list[tuple[str, str]] = [("start", load())]
    try:
        bench.setup()
        for name, phase in (("hot", bench.hot_paths), ("read", bench.read_paths),
                            ("prune", bench.prunes), ("cycles", bench.cycles),
                            ("sqlite", bench.sqlite)):
            if name in args.skip:
                continue
            log(f"phase {name} (load {load()})")
            phase()
            loads.append((name, load()))
    finally:
        if not args.keep:
            bench.teardown()
        bench.results["loads"] = loads
        if args.json:
            args.json.write_text(json.dumps(bench.results, indent=1, default=str))
        if bench.plans:
            args.plans.write_text("\n\n".join(bench.plans))
    print(report.render(bench.results))
    return 0


if __name__ == "__main__":
    common.exit_on_sigterm()
    sys.exit(main(sys.argv[1:]))
