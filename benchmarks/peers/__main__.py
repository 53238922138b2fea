"""``python -m benchmarks.peers``: run every system on the same PostgreSQL and print the tables.

    python -m benchmarks.peers [--systems ours,pgqueuer,procrastinate,django-tasks-db,celery]
                               [--workloads noop,io-sync,io-async,django]
                               [--repeat 3] [--jobs 100000] [--threads 8,16,32,64,128] ...

Every system: a fresh database, the same no-op job, ONE worker process at its best documented
setting, drain jobs/s as the median of ``--repeat`` runs (each from the database's own timestamps:
first job started to last job's completion committed), bulk enqueue jobs/s, the median single
enqueue with its own commit, and idle pickup p50/p99 over ``--pickup-samples`` single enqueues.
Slow peers drain fewer jobs (``--procrastinate-jobs``, ``--dtdb-jobs``) so that no drain takes
minutes; the table shows each N and how long its drain took, which should be at least ~5 s.

Beyond the no-op drain (``workloads``): Celery on its Redis broker at each pool's best
concurrency, I/O-bound jobs (sync and async bodies that wait 50 ms), a Django-shaped job (one ORM
insert, one ORM read), and ours started with no options at all.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.peers import common, targets, workloads
from benchmarks.peers.common import log
from django_ultjobs.management.progress import Progress

SYSTEMS = ("ours", "pgqueuer", "procrastinate", "django-tasks-db", "celery")
MODULES = {
    "ours": "benchmarks.peers.ours",
    "pgqueuer": "benchmarks.peers.peer_pgqueuer",
    "procrastinate": "benchmarks.peers.peer_procrastinate",
    "django-tasks-db": "benchmarks.peers.peer_django_tasks_db",
    "celery": "benchmarks.peers.peer_celery",
}
PACKAGES = {"pgqueuer": ["pgqueuer", "asyncpg"], "procrastinate": ["procrastinate"],
            "django-tasks-db": ["django_tasks_db", "psycopg_pool"],
            "celery": ["celery", "redis"]}
LABELS = workloads.LABELS


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.peers",
                                description=__doc__.splitlines()[0])
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--workloads", default=",".join(common.WORKLOADS),
                   help="noop: the no-op drains, single enqueues, pickup, slots, history, "
                        "Celery's sweep and ours at default flags; io-sync, io-async: 50 ms "
                        "waits; django: one ORM insert and one read per job")
    p.add_argument("--repeat", type=int, default=3, help="drains per system; medians reported")
    p.add_argument("--jobs", type=int, default=100_000,
                   help="jobs drained by ours and PgQueuer (default: 100,000)")
    p.add_argument("--procrastinate-jobs", type=int, default=4_000)
    p.add_argument("--dtdb-jobs", type=int, default=2_000)
    p.add_argument("--celery-jobs", type=int, default=20_000,
                   help="no-op jobs each Celery drain moves (about 10 s on a quiet 2-core box)")
    p.add_argument("--celery-prefork", default="2,4",
                   help="Celery prefork concurrencies to try; the best is reported")
    p.add_argument("--celery-threads", default="16,64",
                   help="Celery threads-pool concurrencies to try; the best is reported")
    p.add_argument("--celery-prefetch", type=int, default=4,
                   help="Celery's worker_prefetch_multiplier (its default: 4)")
    p.add_argument("--default-flags-jobs", type=int, default=20_000,
                   help="jobs of ours' drain at runjobworker's default flags (0 skips it)")
    p.add_argument("--io-jobs", type=int, default=10_000, help="jobs per I/O-bound drain")
    p.add_argument("--io-concurrency", type=int, default=128,
                   help="every system's concurrency on the I/O-bound drains (ours: --threads, "
                        "or --async-concurrency for async bodies)")
    p.add_argument("--django-jobs", type=int, default=5_000,
                   help="Django-shaped jobs per drain of ours and Celery (django-tasks-db: "
                        "--dtdb-jobs)")
    p.add_argument("--django-threads", type=int, default=16,
                   help="our --threads on the Django-shaped drain (each thread holds a "
                        "connection of its own)")
    p.add_argument("--django-processes", type=int, default=2,
                   help="ours on the Django-shaped drain: runjobworker --pool process "
                        "--processes N, and Celery's prefork pool at the same -c N, plus a "
                        "no-op drain of ours' process pool; 0: ours at --django-threads, "
                        "Celery at its best prefork concurrency")
    p.add_argument("--threads", default="8,16,32,64,128",
                   help="our --threads settings to try; the best is reported")
    p.add_argument("--ours-prepare-threshold", default="5",
                   help="Django's OPTIONS['prepare_threshold'] for ours ('off': Django's "
                        "default, nothing prepared; its drains and single enqueues are then "
                        "measured too). PgQueuer's asyncpg prepares every statement and "
                        "Procrastinate's psycopg pool prepares at 5 runs: 5 (the default) puts "
                        "ours on their footing")
    p.add_argument("--pickup-samples", type=int, default=1000,
                   help="idle pickups of ours and PgQueuer each (the pickup targets' pair), "
                        "taken in --pickup-blocks blocks alternating between the two")
    p.add_argument("--pickup-blocks", type=int, default=5,
                   help="blocks the pair's pickups are taken in, each a worker of its own")
    p.add_argument("--peer-pickup-samples", type=int, default=200,
                   help="idle pickups of each other system, in one block")
    p.add_argument("--capped-jobs", type=int, default=10_000,
                   help="jobs per fleet-slots drain (0 skips the figure)")
    p.add_argument("--slots-threads", default="32,128",
                   help="our --threads for the fleet-slots pairs ('best': the sweep's). A slot "
                        "passes on when its body returns, so below 64 threads the cap of 64 never "
                        "binds and at 128 it bounds the bodies executing")
    p.add_argument("--history-rows", type=int, default=1_000_000,
                   help="finished rows for the scale-with-history figure (0 skips it)")
    p.add_argument("--history-jobs", type=int, default=20_000)
    p.add_argument("--dtdb-interval", type=float, default=0.1,
                   help="django-tasks-db db_worker --interval for its pickup figure")
    p.add_argument("--dtdb-default-interval-samples", type=int, default=100,
                   help="pickups also measured at db_worker's default 1 s interval (0 skips)")
    p.add_argument("--no-analyze", action="store_true",
                   help="drain never-analyzed tables (by default every system's tables are "
                        "ANALYZEd after the enqueue, as autovacuum would have done in production)")
    p.add_argument("--db-prefix", default="ultjobs_peers_")
    p.add_argument("--output", type=Path, help="also write the report (markdown) here, and its "
                   "chart beside it (the same name, .png)")
    p.add_argument("--chart", type=Path, help="write the chart here instead (.png or .svg; "
                   "needs matplotlib, in the bench-peers extra)")
    p.add_argument("--json", type=Path, help="also write every raw figure (JSON) here")
    args = p.parse_args()
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(args.workloads) - set(common.WORKLOADS))
    if unknown:
        raise SystemExit(f"unknown workloads {unknown}; known: {', '.join(common.WORKLOADS)}")
    return args


def missing_packages(system: str) -> list[str]:
    return [m for m in PACKAGES.get(system, []) if importlib.util.find_spec(m) is None]


class Runner:
    """Runs one phase of one system at a time, each in a process of its own, and counts them
    on a progress bar (on a terminal)."""

    def __init__(self, args: argparse.Namespace, progress: Progress | None = None) -> None:
        self.args = args
        self.progress = progress
        #: Celery's broker URL, as its setup phase chose it (the shared Redis or a private one).
        self.broker: str | None = None

    def db(self, system: str) -> str:
        return self.args.db_prefix + system.replace("-", "_")

    def jobs(self, system: str) -> int:
        return {"procrastinate": self.args.procrastinate_jobs,
                "django-tasks-db": self.args.dtdb_jobs,
                "celery": self.args.celery_jobs}.get(system, self.args.jobs)

    def phase(self, system: str, phase: str, *extra: str) -> dict[str, Any]:
        # Ours takes its connections' prepare_threshold first, so an explicit one in extra wins.
        first: tuple[str, ...] = ()
        if system == "ours":
            first = ("--prepare-threshold", self.args.ours_prepare_threshold)
        elif system == "celery" and self.broker:
            first = ("--broker", self.broker, "--prefetch", str(self.args.celery_prefetch))
        try:
            result = common.run_child(MODULES[system],
                                      [phase, "--db", self.db(system), *first, *extra])
            if system == "celery" and phase == "setup":
                self.broker = result["broker"]
            return result
        finally:
            if self.progress is not None:
                self.progress.advance()


def planned_phases(args: argparse.Namespace, systems: list[str]) -> int:
    """How many child phases a run starts (the progress bar's total)."""
    count = 2 * len(systems)  # setup and teardown
    if "noop" in args.workloads:
        count += noop_phases(args, systems)
    for workload in args.workloads:
        count += args.repeat * len(
            [s for s in workloads.WORKLOAD_SYSTEMS.get(workload, ()) if s in systems])
    return count


def noop_phases(args: argparse.Namespace, systems: list[str]) -> int:
    ours = "ours" in systems
    prepared = ours and args.ours_prepare_threshold != "off"
    count = len(args.threads.split(",")) if ours else 0  # the --threads sweep
    count += args.repeat * (len(systems) + (1 if prepared else 0))  # the measured rounds
    count += len(systems)  # single enqueues
    count += sum(pickup_blocks(args, system) for system in systems)
    count += 1 if "django-tasks-db" in systems and args.dtdb_default_interval_samples else 0
    if ours and args.capped_jobs:
        count += len(set(args.slots_threads.split(","))) * args.repeat
    count += 1 if ours and args.history_rows else 0
    count += args.repeat if ours and args.default_flags_jobs else 0
    if "celery" in systems:
        settings = workloads.celery_settings(args)
        pools = len({pool for pool, _ in settings})
        count += len(settings) + args.repeat * (pools - 1)
    return count


def main() -> int:
    args = parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}")
    common.exit_on_sigterm()
    started = time.monotonic()
    env = environment()
    progress = Progress("benchmark phases", unit="phase", stream=sys.stderr)
    runner = Runner(args, progress)
    results: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for system in systems:
        missing = missing_packages(system)
        if missing:
            skipped[system] = (f"not installed ({', '.join(missing)}): "
                               "pip install -e '.[bench-peers]'")
            log(f"{system}: skipped, {skipped[system]}")
    systems = [s for s in systems if s not in skipped]
    progress.set_total(planned_phases(args, systems))
    set_up: list[str] = []
    try:
        for system in systems:
            results[system] = {"jobs": runner.jobs(system), "bulk_runs": [], "drain_runs": [],
                               "seconds_runs": [], **runner.phase(system, "setup")}
            set_up.append(system)
        measure(runner, systems, results)
    finally:
        for system in set_up:
            try:
                runner.phase(system, "teardown")
            except RuntimeError as exc:
                log(f"{system}: teardown failed: {exc}")
        progress.close()
    env["load_after"] = round(os.getloadavg()[0], 2)
    env["git_after"] = _git_state()
    env["total_s"] = round(time.monotonic() - started)
    report = render(results, skipped, env, args)
    print(report)
    if args.output:
        args.output.write_text(report + "\n")
    chart = args.chart or (args.output.with_suffix(".png") if args.output else None)
    if chart is not None:
        write_chart(results, env, chart)
    if args.json:
        args.json.write_text(json.dumps({"environment": env, "results": results,
                                         "skipped": skipped}, indent=2) + "\n")
    return 0


def write_chart(results: dict[str, dict[str, Any]], env: dict[str, Any], path: Path) -> None:
    """Draw the chart beside the report; say so, and why not, when matplotlib is missing."""
    if importlib.util.find_spec("matplotlib") is None:
        log(f"chart not written to {path}: matplotlib is missing (pip install -e "
            "'.[bench-peers]')")
        return
    if not any("drain" in r and "pickup" in r for r in results.values()):
        log(f"chart not written to {path}: the no-op drains did not run (--workloads)")
        return
    from benchmarks.peers.chart import draw

    log(f"chart written to {draw(results, env, path)}")


def measure(runner: Runner, systems: list[str], results: dict[str, dict[str, Any]]) -> None:
    args = runner.args

    def drain(system: str, label: str, *extra: str) -> dict[str, Any]:
        analyze = () if args.no_analyze else ("--analyze",)
        run = runner.phase(system, "drain", "--jobs", str(runner.jobs(system)), *analyze, *extra)
        log(f"{system} {label}: bulk {run['bulk']:,.0f}/s, drain {run['jobs_per_s']:,.0f}/s "
            f"in {run['seconds']:.2f}s (load {os.getloadavg()[0]:.1f})")
        return run

    if "noop" in args.workloads:
        sweeps(runner, systems, results, drain)
        noop_rounds(runner, systems, results, drain)
        single_and_pickup(runner, systems, results)
        if "ours" in systems:
            slots_and_history(runner, results["ours"])
    workloads.measure_workloads(runner, systems, results, drain)


def sweeps(runner: Runner, systems: list[str], results: dict[str, dict[str, Any]],
           drain: Any) -> None:
    """Ours' --threads and Celery's pools: each system's setting is its best, as each peer
    gets its best documented one."""
    args = runner.args
    if "ours" in systems:
        ours = results["ours"]
        ours["sweep"] = {}
        for t in [int(t) for t in args.threads.split(",")]:
            ours["sweep"][t] = drain("ours", f"--threads {t} (sweep)",
                                     "--threads", str(t))["jobs_per_s"]
        ours["threads"] = max(ours["sweep"], key=ours["sweep"].get)
        ours["setting"] = f"runjobworker --threads {ours['threads']}"
        if args.ours_prepare_threshold != "off":
            ours["setting"] += f", prepare_threshold {args.ours_prepare_threshold}"
    if "celery" in systems:
        results["celery"]["prefetch"] = args.celery_prefetch
        workloads.sweep_celery(runner, drain, results["celery"])


def noop_rounds(runner: Runner, systems: list[str], results: dict[str, dict[str, Any]],
                drain: Any) -> None:
    """The measured drains, interleaved round by round: drift in a shared machine's load falls
    on every system alike instead of on whichever ran during a busy minute."""
    args = runner.args
    prepared = args.ours_prepare_threshold != "off"

    def unprepared_drain(r: int, extra: tuple[str, ...]) -> None:
        plain = drain("ours", f"round {r + 1}/{args.repeat}, nothing prepared", *extra,
                      "--prepare-threshold", "off")
        results["ours"].setdefault("unprepared_drain_runs", []).append(plain["jobs_per_s"])

    for r in range(args.repeat):
        for system in systems:
            if system == "celery":
                celery_round(results["celery"], drain, r, args.repeat)
                continue
            extra = ("--threads", str(results["ours"]["threads"])) if system == "ours" else ()
            unprepared_first = system == "ours" and prepared and r % 2 == 1
            if unprepared_first:
                # Every other round the other way round, so neither always runs second.
                unprepared_drain(r, extra)
            record(results[system], drain(system, f"round {r + 1}/{args.repeat}", *extra))
            if system == "ours" and prepared and not unprepared_first:
                # And on Django's default connections, in the same round.
                unprepared_drain(r, extra)
            if system == "ours" and args.default_flags_jobs:
                workloads.measure_default_flags(runner, results, drain, r)
    if "celery" in systems:
        workloads.settle_celery(results["celery"])
    for system in systems:
        r = results[system]
        r["bulk"] = common.median(r["bulk_runs"])
        r["drain"] = common.median(r["drain_runs"])
        r["drain_seconds"] = common.median(r["seconds_runs"])
        if r.get("cpu_runs"):
            r["worker_cpu_us"] = common.median([w for w, _ in r["cpu_runs"]])
            r["db_cpu_us"] = common.median([d for _, d in r["cpu_runs"]])


def record(figures: dict[str, Any], run: dict[str, Any]) -> None:
    """One measured drain's figures, added to a system's (or a Celery pool's) lists."""
    figures.setdefault("bulk_runs", []).append(run["bulk"])
    figures.setdefault("drain_runs", []).append(run["jobs_per_s"])
    figures.setdefault("seconds_runs", []).append(run["seconds"])
    if "worker_cpu_us" in run:
        figures.setdefault("cpu_runs", []).append((run["worker_cpu_us"], run["db_cpu_us"]))


def celery_round(celery: dict[str, Any], drain: Any, r: int, repeat: int) -> None:
    """Each of Celery's pools at its best concurrency, once per round."""
    for pool, figures in celery["pools"].items():
        run = drain("celery", f"--pool {pool} -c {figures['concurrency']}, round {r + 1}/{repeat}",
                    *workloads.celery_pool_args(pool, figures["concurrency"]))
        record(figures, run)
        celery["bulk_runs"].append(run["bulk"])


#: The pickup targets compare these two: their pickups alternate in blocks, so drift on the
#: machine over the minutes they take reaches both alike (one block each, one after the other,
#: read PgQueuer's p99 at 0.90x and 0.69x of ours an hour apart).
PICKUP_PAIR = ("ours", "pgqueuer")


def pickup_blocks(args: argparse.Namespace, system: str) -> int:
    """How many blocks ``system``'s pickups are taken in: the pair's ``--pickup-blocks``, one
    for any other system."""
    return max(1, args.pickup_blocks) if system in PICKUP_PAIR else 1


def single_and_pickup(runner: Runner, systems: list[str],
                      results: dict[str, dict[str, Any]]) -> None:
    args = runner.args
    for system in systems:
        results[system].update(runner.phase(system, "single"))
    blocks: dict[str, list[dict[str, Any]]] = {system: [] for system in systems}
    for block in range(max((pickup_blocks(args, system) for system in systems), default=0)):
        # The order turns each block (ours first, then PgQueuer first, ...), so neither always
        # runs on the later side of a drift.
        for system in systems if block % 2 == 0 else reversed(systems):
            if block < pickup_blocks(args, system):
                blocks[system].append(pickup_block(runner, system, results[system]))
    for system in systems:
        r = results[system]
        r["pickup"] = common.pooled_pickup(blocks[system])
        log(f"{system}: single enqueue {r['single_commit_ms']:.2f} ms; pickup p50 "
            f"{r['pickup']['p50_ms']:.2f} ms, p99 {r['pickup']['p99_ms']:.2f} ms")
        if system == "django-tasks-db" and args.dtdb_default_interval_samples:
            r["pickup_default"] = runner.phase(
                system, "pickup", "--samples", str(args.dtdb_default_interval_samples),
                "--interval", "1")
            log(f"{system} at --interval 1: pickup p50 {r['pickup_default']['p50_ms']:.1f} ms")


def pickup_block(runner: Runner, system: str, r: dict[str, Any]) -> dict[str, Any]:
    """One block of ``system``'s idle pickups (a worker started for it, then stopped)."""
    args = runner.args
    extra: tuple[str, ...] = ()
    if system == "ours":
        extra = ("--threads", str(r["threads"]))
    elif system == "celery":
        extra = workloads.celery_pool_args(r["pool"], r["concurrency"])
    elif system == "django-tasks-db":
        extra = ("--interval", str(args.dtdb_interval))
        r["pickup_interval"] = args.dtdb_interval
    return runner.phase(system, "pickup", "--samples", str(block_samples(args, system)), *extra)


def block_samples(args: argparse.Namespace, system: str) -> int:
    """The pickups each of ``system``'s blocks takes: its total shared out, rounded up."""
    total = args.pickup_samples if system in PICKUP_PAIR else args.peer_pickup_samples
    return max(1, math.ceil(total / pickup_blocks(args, system)))


def slots_and_history(runner: Runner, ours: dict[str, Any]) -> None:
    args = runner.args
    threads = str(ours["threads"])
    if args.capped_jobs:
        ours["slots"] = []
        settings = dict.fromkeys(threads if t == "best" else t
                                 for t in args.slots_threads.split(","))
        for slot_threads in settings:
            capped, uncapped = [], []
            for r in range(args.repeat):
                pair = runner.phase("ours", "slots", "--jobs", str(args.capped_jobs),
                                    "--threads", slot_threads,
                                    *(() if args.no_analyze else ("--analyze",)))
                capped.append(pair["capped"])
                uncapped.append(pair["uncapped"])
                log(f"ours fleet slots at --threads {slot_threads}, {r + 1}/{args.repeat}: "
                    f"no cap {pair['uncapped']:,.0f}/s, concurrency=64 {pair['capped']:,.0f}/s")
            ours["slots"].append(dict(
                threads=int(slot_threads), capped_jobs=args.capped_jobs,
                capped_drain_runs=capped, uncapped_drain_runs=uncapped,
                capped_drain=common.median(capped), uncapped_drain=common.median(uncapped)))
    if args.history_rows:
        history = runner.phase("ours", "history", "--jobs", str(args.history_jobs),
                               "--threads", threads, "--rows", str(args.history_rows),
                               "--repeat", str(args.repeat))
        ours.update({k: v for k, v in history.items() if k not in ("rows", "jobs")},
                    history_rows=history["rows"], history_jobs=history["jobs"])


# -- the environment ------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    facts: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "load": round(os.getloadavg()[0], 2),
    }
    try:
        import django

        facts["django"] = django.get_version()
    except ImportError:
        pass
    facts.update(common.server_facts())
    facts["git"] = _git_state()
    return facts


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _git_state() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=common.REPO,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no",
                                "django_ultjobs"], cwd=common.REPO, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + (" + uncommitted changes in django_ultjobs/" if dirty else "")


# -- the report -----------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def ratio(a: float | None, b: float | None) -> str:
    if not a or not b or math.isnan(a) or math.isnan(b):
        return "-"
    return f"{a / b:.2f}x" if a / b < 10 else f"{a / b:.1f}x"


def render(results: dict[str, dict[str, Any]], skipped: dict[str, str], env: dict[str, Any],
           args: argparse.Namespace) -> str:
    out: list[str] = []
    add = out.append
    add(f"## Peer benchmark — {env['date']}")
    add("")
    add(f"PostgreSQL {env['server_version']} on 127.0.0.1 ({env['cores']} cores, {env['cpu']}); "
        f"Python {env['python']}, Django {env.get('django', '?')}; "
        f"synchronous_commit={env['synchronous_commit']}, fsync={env['fsync']}, "
        f"shared_buffers={env['shared_buffers']}, autovacuum={env['autovacuum']}. "
        f"django_ultjobs at {env['git']}"
        + ("" if env.get("git_after", env["git"]) == env["git"] else
           f" (**changed during the run**, to {env['git_after']}: figures mix two versions)")
        + f". Load average {env['load']} before, "
        f"{env.get('load_after', '?')} after; {env.get('total_s', '?')} s in all. "
        f"Workloads: {', '.join(args.workloads)}.")
    noop = {s: r for s, r in results.items() if "drain" in r and "pickup" in r}
    if "noop" in args.workloads:
        out += render_noop(noop, skipped, args)
    out += workloads.render_workloads(results, args)
    add("")
    add(render_targets(results, args))
    return "\n".join(out)


def _pickup_counts(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    """How many pickups each system took, and in how many blocks, as the run took them."""
    pair = [s for s in PICKUP_PAIR if "pickup" in results.get(s, {})]
    others = [s for s in results if s not in PICKUP_PAIR and "pickup" in results[s]]
    parts = []
    if pair:
        first = results[pair[0]]["pickup"]
        names = " and ".join(LABELS[s] for s in pair)
        parts.append(f"{names} {first['samples']:,} each in {first['blocks']} blocks"
                     + (", taken in turn" if len(pair) == 2 else ""))
    if others:
        parts.append(f"the others {block_samples(args, others[0]):,} each in one block")
    return "; ".join(parts)


def _block_spread(ours: dict[str, Any], pgq: dict[str, Any] | None) -> str:
    """Each pickup block's p99, ours and PgQueuer's side by side: what one block alone read."""
    mine, theirs = ours.get("block_p99_ms"), (pgq or {}).get("block_p99_ms")
    if not mine or len(mine) < 2:
        return ""
    text = "; p99 of each block, in order: " + ", ".join(f"{v:.2f}" for v in mine)
    if theirs:
        text += " (PgQueuer's, alternating with them: " \
            + ", ".join(f"{v:.2f}" for v in theirs) + ")"
    return text


def render_noop(results: dict[str, dict[str, Any]], skipped: dict[str, str],
                args: argparse.Namespace) -> list[str]:
    out: list[str] = [""]
    add = out.append
    add(f"No-op jobs, ONE worker process per system, drain = median of {args.repeat} runs, "
        "each from the database's own timestamps (first job started → last completion "
        "committed; Celery: its worker's first task start → last task finish); idle pickup "
        "over single enqueues with the worker idle (commit returned → first line of the body, "
        f"CLOCK_MONOTONIC): {_pickup_counts(results, args)}. "
        + ("Tables were never ANALYZEd (--no-analyze)." if args.no_analyze else
           "Each system's tables were ANALYZEd after the enqueue, before the drain, as "
           "autovacuum would have done in production."))
    add("Drains were interleaved: round 1 of every system, then round 2, and so on.")
    add("")
    add("| system (setting) | version | drained N | bulk enqueue jobs/s | single enqueue ms "
        "(own commit) | drain jobs/s | drain took s | idle pickup p50 ms | p99 ms |")
    add("|---|---|--:|--:|--:|--:|--:|--:|--:|")
    for system in SYSTEMS:
        if system in skipped:
            add(f"| {LABELS[system]} | - | - | - | - | - | - | - | {skipped[system]} |")
            continue
        r = results.get(system)
        if r is None:
            continue
        add(main_row(system, r))
    ours = results.get("ours", {})
    if "default_drain" in ours:
        add(f"| django_ultjobs at its default flags (`runjobworker`, no options; drain only) | "
            f"| {args.default_flags_jobs:,} | | | {fmt(ours['default_drain'])} | | | |")
    dtdb = results.get("django-tasks-db", {})
    if dtdb.get("pickup_default"):
        pd = dtdb["pickup_default"]
        add(f"| django-tasks-db at its default --interval 1 (pickup only, {pd['samples']} "
            f"samples) | | | | | | | {fmt(pd['p50_ms'], 1)} | {fmt(pd['p99_ms'], 1)} |")
    add("")
    add("Every drain, in jobs/s: " + "; ".join(
        f"{LABELS[s]} " + ", ".join(fmt(v) for v in results[s]["drain_runs"])
        for s in SYSTEMS if s in results) + ".")
    out += render_cpu(results)
    ours = results.get("ours")
    if ours:
        out += render_against(ours, results)
        add("")
        add(render_ours(ours, args, results.get("pgqueuer", {}).get("pickup")))
    if "celery" in results:
        add("")
        add(workloads.render_celery(results["celery"]))
    return out


def main_row(system: str, r: dict[str, Any]) -> str:
    pk = r["pickup"]
    bulk = fmt(r["bulk"]) + {"django-tasks-db": " (enqueue() loop, no bulk API)",
                             "celery": " (apply_async loop, no bulk send)"}.get(system, "")
    setting = r.get("setting", "")
    if system == "django-tasks-db":
        setting += f"; pickup at --interval {r['pickup_interval']:g}"
    return (f"| {LABELS[system]} ({setting}) | {r.get('version', '')} | {r['jobs']:,} | {bulk} | "
            f"{fmt(r['single_commit_ms'], 2)} | {fmt(r['drain'])} | "
            f"{fmt(r['drain_seconds'], 1)}{'' if r['drain_seconds'] >= 4.5 else ' (< 5 s!)'} | "
            f"{fmt(pk['p50_ms'], 1)} | {fmt(pk['p99_ms'], 1)} |")


def render_cpu(results: dict[str, dict[str, Any]]) -> list[str]:
    metered = [s for s in SYSTEMS if "worker_cpu_us" in results.get(s, {})]
    if not metered:
        return []
    out = ["", "CPU per drained job (medians of the drains; the rest of the machine's busy CPU "
           "is the database's: PostgreSQL's backends and writers, and for Celery Redis's; "
           "Celery's worker column counts its pool's child processes): on which side each "
           "system's cost lies. It moves with the machine's speed as jobs/s does; compare "
           "within a run.", "",
           "| system | worker process µs/job | database µs/job | both µs/job |",
           "|---|--:|--:|--:|"]
    for s in metered:
        r = results[s]
        out.append(f"| {LABELS[s]} | {fmt(r['worker_cpu_us'])} | {fmt(r['db_cpu_us'])} | "
                   f"{fmt(r['worker_cpu_us'] + r['db_cpu_us'])} |")
    return out


def render_against(ours: dict[str, Any], results: dict[str, dict[str, Any]]) -> list[str]:
    out = ["", "Ours against each peer (throughput: ours ÷ peer; latency: peer ÷ ours; "
           "above 1x ours is better):", "",
           "| against | bulk enqueue | drain | single enqueue | pickup p50 | pickup p99 |",
           "|---|--:|--:|--:|--:|--:|"]
    for system in SYSTEMS[1:]:
        r = results.get(system)
        if not r:
            continue
        out.append(f"| {LABELS[system]} | {ratio(ours['bulk'], r['bulk'])} | "
                   f"{ratio(ours['drain'], r['drain'])} | "
                   f"{ratio(r['single_commit_ms'], ours['single_commit_ms'])} | "
                   f"{ratio(r['pickup']['p50_ms'], ours['pickup']['p50_ms'])} | "
                   f"{ratio(r['pickup']['p99_ms'], ours['pickup']['p99_ms'])} |")
    return out


def render_ours(r: dict[str, Any], args: argparse.Namespace,
                pgq_pickup: dict[str, Any] | None) -> str:
    out = [
        "Ours in detail:",
        "",
        f"- `--threads` sweep (one drain of {r['jobs']:,} each, before the measured rounds): "
        + ", ".join(f"{t}: {fmt(v)}/s" for t, v in r["sweep"].items())
        + f" → best {r['threads']}; the measured rounds at {r['threads']}: "
        + ", ".join(fmt(v) for v in r["drain_runs"]) + " jobs/s.",
        *filter(None, [workloads.render_default_flags(r, args.default_flags_jobs)]),
        f"- Single `enqueue()`: {r['single_commit_ms']:.2f} ms with its own commit, "
        f"{r['single_txn_ms']:.3f} ms inside an open transaction (medians of "
        f"{common.SINGLE_ENQUEUES}"
        + ("; each the mean of two blocks, alternating with the unprepared ones)."
           if "unprepared_single_txn_ms" in r else ")."),
    ]
    if "unprepared_drain_runs" in r:
        plain = common.median(r["unprepared_drain_runs"])
        out.append(
            "- On Django's default connections (nothing prepared), in the same rounds: drain "
            + ", ".join(fmt(v) for v in r["unprepared_drain_runs"])
            + f" jobs/s, median {fmt(plain)} ({plain / r['drain']:.2f}x of the prepared "
            f"drain); single `enqueue()` {r['unprepared_single_commit_ms']:.2f} ms with its own "
            f"commit, {r['unprepared_single_txn_ms']:.3f} ms inside an open transaction.")
    out += [
        f"- Idle pickup: p50 {r['pickup']['p50_ms']:.2f} ms, p90 {r['pickup']['p90_ms']:.2f} ms, "
        f"p99 {r['pickup']['p99_ms']:.2f} ms, max {r['pickup']['max_ms']:.2f} ms "
        f"({r['pickup']['samples']} samples, {r['pickup']['lost']} lost)"
        + _block_spread(r["pickup"], pgq_pickup) + ".",
    ]
    for s in r.get("slots", ()):
        out.append(
            f"- Fleet slots: every job `concurrency=64`, {s['capped_jobs']:,} jobs, "
            f"--threads {s['threads']} (medians of {len(s['capped_drain_runs'])} pairs): "
            f"{fmt(s['capped_drain'])} jobs/s against "
            f"{fmt(s['uncapped_drain'])} without a cap in the same runs = "
            f"{s['capped_drain'] / s['uncapped_drain']:.2f}x "
            f"({(1 - s['capped_drain'] / s['uncapped_drain']) * 100:.0f} % cost).")
    if "history_drain" in r:
        claim = ""
        if "history_claim_ms" in r:
            claim = (f"one claim statement of {r['claim_rows']} rows "
                     f"{r['empty_claim_ms']:.2f} ms → {r['history_claim_ms']:.2f} ms "
                     f"({r['history_claim_ms'] / r['empty_claim_ms']:.2f}x); ")
        out.append(
            f"- Scale with history ({r['history_jobs']:,} queued, then "
            f"{r['history_rows']:,} finished rows added): {claim}"
            f"drain {fmt(r['empty_drain'])} → {fmt(r['history_drain'])} jobs/s "
            f"({r['history_drain'] / r['empty_drain']:.2f}x).")
    return "\n".join(out)


def render_targets(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    """The targets this run measures, each named, met or missed (``targets``), then the
    absolute ones kept from before the peers were measured the same way."""
    rows = targets.evaluate(results, common.ideal_io_rate(args.io_concurrency))
    ours = results.get("ours", {})
    for system, factor in (("procrastinate", 20), ("django-tasks-db", 20)):
        r = results.get(system, {})
        if "drain" in ours and "drain" in r:
            x = ours["drain"] / r["drain"]
            rows.append((f"drain ≥ {factor:g}x {LABELS[system]}'s", f"{x:.2f}x", x >= factor))
    if "single_commit_ms" in ours:
        rows.append(("enqueue() with its own commit ≤ 1.5 ms",
                     f"{ours['single_commit_ms']:.2f} ms", ours["single_commit_ms"] <= 1.5))
        rows.append(("enqueue() in an open transaction ≤ 0.3 ms",
                     f"{ours['single_txn_ms']:.3f} ms", ours["single_txn_ms"] <= 0.3))
    if "history_claim_ms" in ours:
        x = ours["history_claim_ms"] / ours["empty_claim_ms"]
        rows.append((f"claim as fast with {ours['history_rows']:,} finished rows (≤ 1.2x)",
                     f"{x:.2f}x", x <= 1.2))
    return targets.render(rows)


if __name__ == "__main__":
    sys.exit(main())
